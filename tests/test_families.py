"""Objective families through the shared module machinery."""
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate

from ner_lightning.data.corpus import LabelSet
from ner_lightning.models.token_classification import TokenClassificationModule
from tests.helpers import train

LOSSES = ["ce", "wce1", "wce2", "focal", "dice", "dice_eq6", "mom", "crf", "bilstm_crf"]
TWO_TASK = ["ce2t", "auc2t", "comauc2t"]
OVA = ["ova_bce", "ova_auc", "ova_auc_maml"]
MRC = ["mrc", "mrc_focal", "mrc_dice", "mrc_dice_released", "mrc_mom"]  # padding, training: tests/test_mrc.py


class FixedEncoder(torch.nn.Module):
    """Returns a given hidden tensor, so tests can perturb single positions."""

    def __init__(self, hidden):
        super().__init__()
        self.hidden = hidden
        self.hidden_size = hidden.size(-1)
        self.anchor = torch.nn.Parameter(torch.zeros(()))

    def forward(self, input_ids, attention_mask):
        return self.hidden + self.anchor

    word_states = staticmethod(lambda hidden, starts: hidden.gather(1, starts.unsqueeze(-1).expand(-1, -1, hidden.size(-1))))


def _batch():
    # two examples, 6 sub-token positions; words start at 1,2,4 and 1,3; the rest is
    # [CLS], continuation pieces, [SEP] or padding.
    labels = torch.full((2, 6), -100)
    labels[0, [1, 2, 4]] = torch.tensor([1, 2, 0])
    labels[1, [1, 3]] = torch.tensor([0, 3])
    return {
        "input_ids": torch.zeros(2, 6, dtype=torch.long), "attention_mask": torch.ones(2, 6, dtype=torch.long),
        "labels": labels, "word_starts": torch.tensor([[1, 2, 4], [1, 3, 0]]),
        "word_mask": torch.tensor([[True, True, True], [True, True, False]]),
    }


@pytest.mark.parametrize("loss", LOSSES + TWO_TASK + OVA)
def test_padding_and_continuation_pieces_never_contribute(loss, toy_cfg):
    cfg = toy_cfg(f"loss={loss}")
    torch.manual_seed(0)
    hidden = torch.randn(2, 6, 8)
    labels = LabelSet(["ENT"] if loss in TWO_TASK else ["PER", "LOC"])
    module = instantiate(cfg.loss, encoder=FixedEncoder(hidden), label_set=labels)
    if isinstance(module, TokenClassificationModule):
        module.token_loss.fit_counts(torch.tensor([5, 2, 1, 1, 1]))
    module.eval()  # no dropout: compare exact values
    batch = _batch()
    if loss in TWO_TASK:  # one entity type: O, B-ENT, I-ENT
        batch["labels"][1, 3] = 1

    assert_padding_invariant(module, hidden, batch)


def assert_padding_invariant(module, hidden, batch):
    """Loss and gradient unchanged when [CLS], continuation pieces, [SEP] and padding change;
    no gradient reaches them (``module.encoder`` is a :class:`FixedEncoder`)."""

    def loss_and_grad(h):
        h = h.clone().requires_grad_(True)
        module.encoder.hidden = h
        value = module.training_loss(batch)
        value.backward()
        return value.detach(), h.grad

    base, grad = loss_and_grad(hidden)
    changed = hidden.clone()
    changed[0, [0, 3, 5]] += 10.0  # [CLS], continuation piece, [SEP]
    changed[1, [0, 2, 4, 5]] -= 7.0  # incl. padding
    other, grad2 = loss_and_grad(changed)
    assert torch.isfinite(base)
    assert torch.allclose(base, other)
    assert torch.allclose(grad, grad2, atol=1e-6)
    assert grad[0, [0, 3, 5]].abs().sum() == 0 and grad[1, [0, 2, 4, 5]].abs().sum() == 0


def test_every_loss_trains_and_evaluates(toy_cfg, monkeypatch):
    """Every loss moves the encoder and its heads in one epoch, and the test split is scored
    against all its gold entities (the toy test split's spans, counted from its tags)."""
    from tests.helpers import train_watching

    test_tags = [line.split()[-1] for line in (Path(toy_cfg().dataset.dir) / "test.txt").read_text().splitlines()
                 if line.strip() and not line.startswith("-DOCSTART-")]
    gold_spans = sum(t.startswith("B-") for t in test_tags)
    for loss in LOSSES + TWO_TASK + OVA:
        scheme = "data.label_scheme=untyped" if loss in TWO_TASK else "data.label_scheme=typed"
        res, moved = train_watching(toy_cfg(f"loss={loss}", scheme, "trainer.max_epochs=1"), monkeypatch)
        encoder = max(v for k, v in moved.items() if k.startswith("encoder."))
        heads = max(v for k, v in moved.items() if not k.startswith("encoder."))
        assert encoder > 0 and heads > 0, (loss, encoder, heads)
        assert res["test"]["micro"]["support"] == gold_spans, loss


@pytest.mark.parametrize("loss", LOSSES + TWO_TASK + OVA + MRC)
def test_every_family_trains_from_scratch_parameters_at_head_lr(loss, toy_cfg):
    """The encoder at optimizer.lr; heads, CRF transitions, BiLSTM at head_lr in every family;
    the AUC losses' a, b at lr_ab (default head_lr); α in no group (ascended by the module)."""
    cfg = toy_cfg(f"loss={loss}", "optimizer.lr=1e-5", "head_lr=3e-3")
    labels = LabelSet(["ENT"] if loss in TWO_TASK else ["PER", "LOC"])
    module = instantiate(cfg.loss, encoder=instantiate(cfg.model), label_set=labels)
    opt = instantiate(cfg.optimizer)(params=module.optimizer_parameters())
    lr = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    encoder = {id(p) for p in module.encoder.parameters()}
    alphas = {id(l.alpha) for l in getattr(module, "auc", None) or []}
    for name, p in module.named_parameters():
        if id(p) in alphas:
            assert id(p) not in lr, name
        else:
            assert lr[id(p)] == (1e-5 if id(p) in encoder else 3e-3), name
    if loss in ("crf", "bilstm_crf"):
        assert lr[id(module.head.crf.transitions)] == 3e-3
    assert len(lr) == sum(1 for _ in module.parameters()) - len(alphas)
    assert module.head_lr == 3e-3


@pytest.mark.parametrize("loss,head", [("ce", 1e-5), ("focal", 1e-5), ("crf", 1e-2), ("auc2t", 1e-2), ("ova_auc", 1e-2),
                                       ("mrc", 1e-5)])
def test_head_lr_null_means_each_familys_default(toy_cfg, loss, head):
    """Top-level head_lr=null (the default): softmax heads at optimizer.lr, CRF / two-task /
    one-vs-all heads at 1e-2 (conf/loss/*.yaml); the encoder always at optimizer.lr."""
    cfg = toy_cfg(f"loss={loss}", "optimizer.lr=1e-5", "head_lr=null")
    labels = LabelSet(["ENT"] if loss in TWO_TASK else ["PER"])
    module = instantiate(cfg.loss, encoder=instantiate(cfg.model), label_set=labels)
    opt = instantiate(cfg.optimizer)(params=module.optimizer_parameters())
    assert opt.param_groups[0]["lr"] == 1e-5 and opt.param_groups[1]["lr"] == head and module.head_lr == head


def test_results_record_compute_and_learning_rates(toy_cfg):
    res = train(toy_cfg("loss=crf", "trainer.max_epochs=2", "size=8", "data.batch_size=4", "head_lr=2e-3"))
    assert res["compute"] == {"train_batches": 4, "optimizer_steps": 4, "train_forward_passes": 4,
                              "init_seed": 42, "encoder_lr": 5e-5, "head_lr": 2e-3}

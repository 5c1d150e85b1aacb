"""Token losses, MoM and CRF decoding against values computed independently."""
import itertools
import math

import pytest
import torch

from ner_lightning.models.decoding import bio_transition_mask, viterbi_decode
from ner_lightning.losses import (
    CrossEntropy, DiceLoss, FocalLoss, MoMLoss, WeightedCrossEntropy,
)

LOGITS = torch.tensor([[2.0, 0.5, -1.0], [0.1, 0.2, 0.3], [-0.5, 1.5, 0.0], [1.0, 1.0, 1.0]])
TARGETS = torch.tensor([0, 2, 1, 0])
SENT = torch.tensor([0, 0, 1, 1])


def probs(row):
    z = [math.exp(v) for v in row]
    return [v / sum(z) for v in z]


P = [probs(r) for r in LOGITS.tolist()]
Y = TARGETS.tolist()


def test_cross_entropy():
    expected = sum(-math.log(P[i][Y[i]]) for i in range(4)) / 4
    assert CrossEntropy()(LOGITS, TARGETS).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("scheme", ["inverse_frequency", "log_ratio"])
def test_weighted_cross_entropy(scheme):
    counts = torch.tensor([6, 3, 1])  # s = 10
    loss = WeightedCrossEntropy(scheme, beta=1.0)
    loss.fit_counts(counts)
    if scheme == "inverse_frequency":
        w = [10 / 6, 10 / 3, 10 / 1]
    else:
        w = [math.log10(4 / 6 + 1), math.log10(7 / 3 + 1), math.log10(9 / 1 + 1)]
    expected = sum(-w[Y[i]] * math.log(P[i][Y[i]]) for i in range(4)) / 4
    assert loss(LOGITS, TARGETS).item() == pytest.approx(expected, rel=1e-6)


def test_weighted_ce_needs_counts():
    with pytest.raises(RuntimeError, match="fit_counts"):
        WeightedCrossEntropy("inverse_frequency")(LOGITS, TARGETS)


def test_focal():
    g = 2.0
    expected = sum(-((1 - P[i][Y[i]]) ** g) * math.log(P[i][Y[i]]) for i in range(4)) / 4
    assert FocalLoss(g)(LOGITS, TARGETS).item() == pytest.approx(expected, rel=1e-6)
    assert FocalLoss(0.0)(LOGITS, TARGETS).item() == pytest.approx(CrossEntropy()(LOGITS, TARGETS).item(), rel=1e-6)


@pytest.mark.parametrize("variant", ["li2020", "eq6"])
def test_dice_hand_worked(variant):
    eps, delta = 1.0, 0.5
    total = 0.0
    for i in range(4):
        dsc = 0.0
        for k in range(3):
            p, y = P[i][k], float(Y[i] == k)
            # Li et al. (2020) eq. 12 has (1 − p)^ε·p in the denominator; MoM eq. 6 prints (1 − p)^ε
            denominator = (1 - p) ** eps * p if variant == "li2020" else (1 - p) ** eps
            dsc += (2 * (1 - p) ** eps * p * y + delta) / (denominator + y + delta)
        total += 1 - dsc / 3
    assert DiceLoss(eps, delta, variant)(LOGITS, TARGETS).item() == pytest.approx(total / 4, rel=1e-6)


def dice_along_gold_probability(variant: str, k: int = 9) -> list[float]:
    """Dice loss of one word as its gold probability p_y goes 0.01 … 0.99 (rest spread evenly)."""
    out = []
    for p in [i / 100 for i in range(1, 100)]:
        probs = torch.full((k,), (1 - p) / (k - 1))
        probs[0] = p
        out.append(DiceLoss(1.0, 1.0, variant)(probs.log()[None], torch.tensor([0])).item())
    return out


def test_dice_li2020_rewards_confidence_eq6_does_not():
    li = dice_along_gold_probability("li2020")
    assert all(a > b for a, b in zip(li, li[1:]))  # strictly decreasing: p_y -> 1 is best
    eq6 = dice_along_gold_probability("eq6")
    best = (1 + min(range(99), key=eq6.__getitem__)) / 100
    assert 0.43 <= best <= 0.5  # eq. 6 as printed is minimised below p_y = 0.5


def test_dice_set_level_hand_worked():
    """One DSC per class over all words: sums in numerator and denominator (Li et al.'s code)."""
    eps, delta = 1.0, 0.01
    dsc = []
    for k in range(3):
        num = sum(2 * (1 - P[i][k]) ** eps * P[i][k] * float(Y[i] == k) for i in range(4))
        den = sum((1 - P[i][k]) ** eps * P[i][k] + float(Y[i] == k) for i in range(4))
        dsc.append((num + delta) / (den + delta))
    assert DiceLoss(eps, delta, level="set")(LOGITS, TARGETS).item() == pytest.approx(1 - sum(dsc) / 3, rel=1e-6)
    # two classes (the MRC heads): the positive class only, as Li et al.'s binary case
    logits, y = LOGITS[:, :2], TARGETS.clamp(max=1)
    p = logits.softmax(-1)[:, 1]
    num = (2 * (1 - p) * p * y).sum()
    den = ((1 - p) * p + y).sum()
    assert DiceLoss(eps, delta, level="set")(logits, y).item() == pytest.approx(1 - ((num + delta) / (den + delta)).item(), rel=1e-6)
    with pytest.raises(ValueError, match="per-token"):
        DiceLoss(eps, delta, level="set").per_token(logits, y)


def test_two_class_self_adjusting_dice_with_epsilon_one_is_label_blind():
    """With K = 2 and ε = 1 (the MoM paper's MRC setting) eq. 12 depends on p only through
    (1 − p)p — per word, per set, with or without squares: a confidently right and a confidently
    wrong answer cost the same, so loss=mrc_dice cannot learn (test F1 0.03 on CoNLL-2003,
    docs/results/mrc_conll2003.md). The released code's ε = 0.01 prefers the right answer."""
    y = torch.tensor([1, 0, 0, 0])
    right = torch.tensor([[-2.0, 2.0], [2.0, -2.0], [2.0, -2.0], [2.0, -2.0]])
    wrong = -right
    for level in ("token", "set"):
        for square in (False, True):
            blind = DiceLoss(1.0, 0.01, level=level, square=square)
            assert blind(right, y).item() == pytest.approx(blind(wrong, y).item(), rel=1e-6), (level, square)
    released = DiceLoss(0.01, 1e-4, level="set", square=True)
    assert released(right, y).item() < 0.1 < 0.9 < released(wrong, y).item()


def test_dice_stays_finite_when_the_softmax_saturates():
    """ε < 1: d(1 − p)^ε/dp is infinite at p = 1; the released settings diverged to NaN after 3
    epochs of loss=mrc_dice_released before (1 − p)^ε was computed from log(1 − p)."""
    logits = torch.tensor([[0.0, 120.0], [90.0, 0.0], [0.0, 0.5]], requires_grad=True)
    y = torch.tensor([1, 0, 1])
    for level in ("token", "set"):
        loss = DiceLoss(0.01, 1e-4, level=level, square=True)(logits, y)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(logits.grad).all(), level
        logits.grad = None


def test_dice_rejects_unknown_variant():
    with pytest.raises(ValueError, match="variant"):
        DiceLoss(1.0, 1.0, "li")


def test_mom_hand_worked_and_lambda_one():
    lam = 0.3
    ce = [-math.log(P[i][Y[i]]) for i in range(4)]
    # sentence 0: words 0 (O), 1; sentence 1: words 2, 3 (O). Paper: M constant (here 128),
    # L_MoM = mean over the 2 sentences of (Σ_O ℓ) / M
    l_mom = (ce[0] / 128 + ce[3] / 128) / 2
    expected = lam * sum(ce) / 4 + (1 - lam) * l_mom
    assert MoMLoss(CrossEntropy(), lam, m=128)(LOGITS, TARGETS, SENT).item() == pytest.approx(expected, rel=1e-6)
    # the per-sentence reading: M = each sentence's own length (2 and 2)
    l_mom = (ce[0] / 2 + ce[3] / 2) / 2
    expected = lam * sum(ce) / 4 + (1 - lam) * l_mom
    assert MoMLoss(CrossEntropy(), lam, m="sentence")(LOGITS, TARGETS, SENT).item() == pytest.approx(expected, rel=1e-6)
    for plain in [CrossEntropy(), FocalLoss(2.0), DiceLoss(1.0, 1.0), DiceLoss(1.0, 1.0, "eq6")]:
        assert MoMLoss(plain, 1.0)(LOGITS, TARGETS, SENT).item() == pytest.approx(plain(LOGITS, TARGETS).item(), rel=1e-6)
    mom = MoMLoss(WeightedCrossEntropy("inverse_frequency"), 1.0)
    mom.fit_counts(torch.tensor([6, 3, 1]))
    wce = WeightedCrossEntropy("inverse_frequency")
    wce.fit_counts(torch.tensor([6, 3, 1]))
    assert mom(LOGITS, TARGETS, SENT).item() == pytest.approx(wce(LOGITS, TARGETS).item(), rel=1e-6)


def test_mom_constant_m_weighs_outside_tokens_as_the_paper_does():
    """With M constant, an O token's weight does not depend on its sentence's length; with the
    per-sentence reading a short sentence's O tokens weigh more."""
    logits = torch.zeros(5, 3, requires_grad=True)
    targets = torch.tensor([0, 0, 1, 0, 0])
    sentence = torch.tensor([0, 0, 0, 0, 1])  # sentence 0: 4 words, sentence 1: 1 word
    MoMLoss(CrossEntropy(), 0.0, m=128)(logits, targets, sentence).backward()
    g = logits.grad.norm(dim=1)
    assert g[0] == pytest.approx(g[4].item()) and g[2] == 0  # same weight for every O word, none for B
    logits.grad = None
    MoMLoss(CrossEntropy(), 0.0, m="sentence")(logits, targets, sentence).backward()
    g = logits.grad.norm(dim=1)
    assert g[4] == pytest.approx(4 * g[0].item())


def test_mom_rejects_bad_m():
    with pytest.raises(ValueError, match="loss.token_loss.m"):
        MoMLoss(CrossEntropy(), 0.5, m=0)


@pytest.mark.parametrize("make", [CrossEntropy, lambda: FocalLoss(2.0), lambda: DiceLoss(1.0, 1.0),
                                  lambda: DiceLoss(1.0, 1.0, "eq6"), lambda: MoMLoss(FocalLoss(2.0), 0.5)])
def test_all_outside_batch_is_finite(make):
    logits = torch.randn(5, 3, requires_grad=True)
    targets = torch.zeros(5, dtype=torch.long)
    loss = make()(logits, targets, torch.tensor([0, 0, 0, 1, 1]))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()


def _paths(tags: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    return [row[m].tolist() for row, m in zip(tags, mask)]


def test_viterbi_matches_brute_force_and_torchcrf():
    from torchcrf import CRF

    torch.manual_seed(0)
    k, t = 3, 4
    crf = CRF(k, batch_first=True)
    em = torch.randn(2, t, k)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    ours = _paths(viterbi_decode(em, mask, crf.start_transitions, crf.end_transitions, crf.transitions), mask)
    assert ours == crf.decode(em, mask)
    for n in range(2):
        length = int(mask[n].sum())

        def score(path):
            s = crf.start_transitions[path[0]] + em[n, 0, path[0]] + crf.end_transitions[path[-1]]
            for i in range(1, length):
                s = s + crf.transitions[path[i - 1], path[i]] + em[n, i, path[i]]
            return float(s)

        best = max(itertools.product(range(k), repeat=length), key=score)
        assert ours[n] == list(best)


def test_viterbi_over_a_batch_of_mixed_lengths_equals_torchcrf_sentence_by_sentence():
    """One back-trace for the whole batch (no length read on the host) gives each sentence the
    path torchcrf finds for it alone, lengths 1 to T included."""
    from torchcrf import CRF

    torch.manual_seed(3)
    k, t = 5, 9
    crf = CRF(k, batch_first=True)
    lengths = [9, 1, 4, 7, 2, 9, 5, 3]
    em = torch.randn(len(lengths), t, k) * 3
    mask = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]
    ours = _paths(viterbi_decode(em, mask, crf.start_transitions, crf.end_transitions, crf.transitions), mask)
    alone = [crf.decode(em[n : n + 1, :length])[0] for n, length in enumerate(lengths)]
    assert ours == alone and [len(p) for p in ours] == lengths


def test_bio_constrained_decoding_never_emits_invalid_tags():
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    start_ok, trans_ok = bio_transition_mask(labels)
    assert start_ok.tolist() == [True, True, False, True, False]
    assert trans_ok[0, 2].item() is False and trans_ok[1, 2].item() is True and trans_ok[3, 2].item() is False
    em = torch.full((1, 3, 5), -5.0)
    em[0, 0, 2] = 5.0  # I-PER first: invalid
    em[0, 1, 0] = 5.0
    em[0, 2, 4] = 5.0  # I-LOC after O: invalid
    zeros = torch.zeros(5)
    free = viterbi_decode(em, torch.ones(1, 3, dtype=torch.bool), zeros, zeros, torch.zeros(5, 5))
    assert free.tolist() == [[2, 0, 4]]
    start = zeros.masked_fill(~start_ok, -1e4)
    trans = torch.zeros(5, 5).masked_fill(~trans_ok, -1e4)
    path = viterbi_decode(em, torch.ones(1, 3, dtype=torch.bool), start, zeros, trans)[0].tolist()
    tags = [labels[i] for i in path]
    assert not tags[0].startswith("I-")
    for a, b in zip(tags, tags[1:]):
        assert not b.startswith("I-") or a[2:] == b[2:]


def test_crf_log_likelihood_equals_torchcrf_and_brute_force():
    """The CRF head's likelihood (without torchcrf's per-step input check) is torchcrf's, bit
    for bit with its gradients, and the log of a probability summed over all paths by hand."""
    from torchcrf import CRF

    from ner_lightning.models.crf import crf_log_likelihood

    torch.manual_seed(1)
    k, t = 3, 4
    crf = CRF(k, batch_first=True)
    torch.nn.init.normal_(crf.transitions)
    lengths = [4, 2, 1]
    mask = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]
    tags = torch.randint(0, k, (3, t))
    em = torch.randn(3, t, k, requires_grad=True)
    ours = crf_log_likelihood(crf, em, tags, mask)
    (grad_ours,) = torch.autograd.grad(ours.sum(), em)
    ref = crf(em, tags, mask=mask, reduction="none")
    (grad_ref,) = torch.autograd.grad(ref.sum(), em)
    assert torch.equal(ours, ref) and torch.equal(grad_ours, grad_ref)

    def score(n, path):
        s = crf.start_transitions[path[0]] + em[n, 0, path[0]] + crf.end_transitions[path[-1]]
        for i in range(1, len(path)):
            s = s + crf.transitions[path[i - 1], path[i]] + em[n, i, path[i]]
        return s

    for n, length in enumerate(lengths):
        log_z = torch.logsumexp(torch.stack([score(n, p) for p in itertools.product(range(k), repeat=length)]), 0)
        assert float(ours[n]) == pytest.approx(float(score(n, tags[n, :length].tolist()) - log_z), abs=1e-5)

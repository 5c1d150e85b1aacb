"""Token losses, MoM and CRF decoding against values computed independently."""
import itertools
import math

import pytest
import torch

from ner_lightning.decoding import bio_transition_mask, viterbi_decode
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


def test_dice_eq6():
    eps, delta = 1.0, 0.5
    total = 0.0
    for i in range(4):
        dsc = 0.0
        for k in range(3):
            p, y = P[i][k], float(Y[i] == k)
            dsc += (2 * (1 - p) ** eps * p * y + delta) / ((1 - p) ** eps + y + delta)
        total += 1 - dsc / 3
    assert DiceLoss(eps, delta)(LOGITS, TARGETS).item() == pytest.approx(total / 4, rel=1e-6)


def test_mom_hand_worked_and_lambda_one():
    lam = 0.3
    ce = [-math.log(P[i][Y[i]]) for i in range(4)]
    # sentence 0: words 0 (O), 1; sentence 1: words 2, 3 (O); M = 2 each
    l_mom = ((ce[0]) / 2 + (ce[3]) / 2) / 2
    expected = lam * sum(ce) / 4 + (1 - lam) * l_mom
    assert MoMLoss("ce", lam)(LOGITS, TARGETS, SENT).item() == pytest.approx(expected, rel=1e-6)
    for base, plain in [("ce", CrossEntropy()), ("focal", FocalLoss(2.0)), ("dice", DiceLoss(1.0, 1.0))]:
        assert MoMLoss(base, 1.0)(LOGITS, TARGETS, SENT).item() == pytest.approx(plain(LOGITS, TARGETS).item(), rel=1e-6)
    mom = MoMLoss("wce1", 1.0)
    mom.fit_counts(torch.tensor([6, 3, 1]))
    wce = WeightedCrossEntropy("inverse_frequency")
    wce.fit_counts(torch.tensor([6, 3, 1]))
    assert mom(LOGITS, TARGETS, SENT).item() == pytest.approx(wce(LOGITS, TARGETS).item(), rel=1e-6)


@pytest.mark.parametrize("make", [CrossEntropy, lambda: FocalLoss(2.0), lambda: DiceLoss(1.0, 1.0),
                                  lambda: MoMLoss("focal", 0.5)])
def test_all_outside_batch_is_finite(make):
    logits = torch.randn(5, 3, requires_grad=True)
    targets = torch.zeros(5, dtype=torch.long)
    loss = make()(logits, targets, torch.tensor([0, 0, 0, 1, 1]))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()


def test_viterbi_matches_brute_force_and_torchcrf():
    from torchcrf import CRF

    torch.manual_seed(0)
    k, t = 3, 4
    crf = CRF(k, batch_first=True)
    em = torch.randn(2, t, k)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    ours = viterbi_decode(em, mask, crf.start_transitions, crf.end_transitions, crf.transitions)
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
    assert free == [[2, 0, 4]]
    start = zeros.masked_fill(~start_ok, -1e4)
    trans = torch.zeros(5, 5).masked_fill(~trans_ok, -1e4)
    path = viterbi_decode(em, torch.ones(1, 3, dtype=torch.bool), start, zeros, trans)[0]
    tags = [labels[i] for i in path]
    assert not tags[0].startswith("I-")
    for a, b in zip(tags, tags[1:]):
        assert not b.startswith("I-") or a[2:] == b[2:]

"""Training-data regimes: which training set a run sees, beyond a random partition.

Order of application (``LowResourceDataModule.setup``): select the partition (random, or an
imbalance sample) -> project labels (train, dev and test) -> resample -> undersample ->
augment (``data/augmentation.py``). Nothing here touches dev or test except the label projection. Every random choice
comes from a generator keyed by (dataset, size, partition, seed, ...) — never by loss or model.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from ner_lightning.data.corpus import OUTSIDE, UNTYPED, Sentence, split_tag
from ner_lightning.data.sampling import partition_rng

# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------


def entity_tokens(s: Sentence) -> int:
    return sum(t != OUTSIDE for t in s.tags)


def training_set_stats(sentences: Sequence[Sentence]) -> dict:
    """Sentences, tokens, B/I/O shares and per-type token counts of a training set."""
    prefixes: Counter = Counter()
    types: Counter = Counter()
    for s in sentences:
        for tag in s.tags:
            p, t = split_tag(tag)
            prefixes[p] += 1
            if t:
                types[t] += 1
    n = sum(prefixes.values())
    return {
        "sentences": len(sentences),
        "tokens": n,
        "sentences_with_entities": sum(entity_tokens(s) > 0 for s in sentences),
        "entity_token_share": (prefixes["B"] + prefixes["I"]) / n if n else 0.0,
        "bio_shares": {p: prefixes[p] / n if n else 0.0 for p in ("B", "I", "O")},
        "type_tokens": dict(sorted(types.items())),
    }


# --------------------------------------------------------------------------------------------
# Imbalance generator (AUC-2T paper, "imbalanced data generator")
# --------------------------------------------------------------------------------------------


def share_bounds(sentences: Sequence[Sentence], size: int) -> tuple[float, float]:
    """Exact smallest and largest entity-token share of any ``size``-sentence subset.

    The share of a subset is a ratio of sums, Σe/Σl; for a candidate ratio λ the best subset
    minimises Σ(e − λl), i.e. takes the ``size`` smallest values of e − λl (Dinkelbach), and
    the optimum λ* is the root of that minimum, found by bisection.
    """
    e = np.array([entity_tokens(s) for s in sentences], dtype=float)
    ln = np.array([len(s) for s in sentences], dtype=float)

    def extreme(sign: float) -> float:
        lo, hi = 0.0, 1.0
        for _ in range(60):
            lam = (lo + hi) / 2
            vals = np.sort(sign * (e - lam * ln))[:size]
            if vals.sum() <= 0:  # some subset has sign*(share - lam) <= 0
                (hi, lo) = (lam, lo) if sign > 0 else (hi, lam)
            else:
                (lo, hi) = (lam, hi) if sign > 0 else (lo, lam)
        return (lo + hi) / 2

    return extreme(+1.0), extreme(-1.0)


def imbalance_sample(
    sentences: Sequence[Sentence],
    size: int,
    entity_share: float,
    tolerance: float,
    partition: int,
    seed: int,
    dataset: str,
    max_steps: int = 200_000,
) -> list[Sentence]:
    """``size`` sentences whose entity-token share is ``entity_share`` ± ``tolerance``·share.

    Starts from a uniform random sample and makes random swaps (one selected sentence for one
    unselected) that bring the share closer to the target, until it is within tolerance. All
    randomness comes from (dataset, size, share, partition, seed). An unreachable target is an
    error that states the reachable range.
    """
    if not 0.0 < entity_share < 1.0:
        raise ValueError(f"data.imbalance.entity_share must be in (0, 1), got {entity_share}")
    if size > len(sentences):
        raise ValueError(f"size={size} is larger than {dataset}/train ({len(sentences)} sentences)")
    tol = tolerance * entity_share
    rng = partition_rng(dataset, "train", size, f"share={entity_share}", partition, seed)
    e = np.array([entity_tokens(s) for s in sentences])
    ln = np.array([len(s) for s in sentences])
    chosen = rng.choice(len(sentences), size=size, replace=False)
    selected = np.zeros(len(sentences), dtype=bool)
    selected[chosen] = True
    se, sl = int(e[chosen].sum()), int(ln[chosen].sum())
    ratio = e / np.maximum(ln, 1)
    for _ in range(max_steps):
        share = se / sl
        if abs(share - entity_share) <= tol:
            break
        want_more = share < entity_share
        inside = np.flatnonzero(selected)
        outside = np.flatnonzero(~selected)
        # draw a removal candidate with a ratio on the wrong side and an addition on the right side
        out_c = inside[(ratio[inside] < share) if want_more else (ratio[inside] > share)]
        in_c = outside[(ratio[outside] > share) if want_more else (ratio[outside] < share)]
        if len(out_c) == 0 or len(in_c) == 0:
            break
        i, j = int(rng.choice(out_c)), int(rng.choice(in_c))
        ne, nl = se - e[i] + e[j], sl - ln[i] + ln[j]
        if abs(ne / nl - entity_share) < abs(share - entity_share):
            selected[i], selected[j] = False, True
            se, sl = int(ne), int(nl)
    share = se / sl
    if abs(share - entity_share) > tol:
        lo, hi = share_bounds(sentences, size)
        raise ValueError(
            f"data.imbalance.entity_share={entity_share:.2%} (±{tol:.2%}) is not reachable with "
            f"size={size} sentences of {dataset}/train: reachable shares are {lo:.2%} to {hi:.2%}"
            + ("" if lo - tol <= entity_share <= hi + tol else "; choose a share in that range or another size")
        )
    return [s for s, keep in zip(sentences, selected, strict=True) if keep]


# --------------------------------------------------------------------------------------------
# Entity-type projection and label schemes
# --------------------------------------------------------------------------------------------


def project_entity_types(sentences: Sequence[Sentence], keep: Sequence[str]) -> list[Sentence]:
    """Tags of types not in ``keep`` become ``O`` (AUC-2T paper Table 3 per-type setting)."""
    kept = set(keep)

    def tag(t: str) -> str:
        return t if t == OUTSIDE or split_tag(t)[1] in kept else OUTSIDE

    return [replace(s, tags=tuple(tag(t) for t in s.tags)) for s in sentences]


def untyped(sentences: Sequence[Sentence]) -> list[Sentence]:
    """Collapse entity types: ``B-X`` -> ``B-ENT``, ``I-X`` -> ``I-ENT`` (AUC-2T Table 2 setting)."""

    def tag(t: str) -> str:
        return t if t == OUTSIDE else f"{t[0]}-{UNTYPED}"

    return [replace(s, tags=tuple(tag(t) for t in s.tags)) for s in sentences]


# --------------------------------------------------------------------------------------------
# Sentence-level resampling (Wang & Wang 2022, section 3.2, eqs. 1-4)
# --------------------------------------------------------------------------------------------

RESAMPLING_METHODS = ("sC", "sCR", "sCRD", "nsCRD")


def type_counts(s: Sentence) -> Counter:
    """c(t, s): entity tokens of each type in a sentence."""
    return Counter(split_tag(t)[1] for t in s.tags if t != OUTSIDE)


def type_rareness(sentences: Sequence[Sentence], log=math.log) -> dict[str, float]:
    """r_t = −log(Σ_s c(t, s) / N), N = all training tokens (paper: natural log)."""
    n = sum(len(s) for s in sentences)
    totals: Counter = Counter()
    for s in sentences:
        totals.update(type_counts(s))
    return {t: -log(c / n) for t, c in totals.items()}


def resampling_counts(sentences: Sequence[Sentence], method: str, variant: str = "paper") -> list[int]:
    """Integer repeat count f(s) of every training sentence.

    ``variant="paper"`` (eqs. 1-4), with r_t natural-log rareness and l_s the sentence length:
    sC: 1 + Σc;  sCR: 1 + ⌈√(Σ r·c)⌉;  sCRD: 1 + ⌈Σ r·c / √l⌉;  nsCRD: 1 + ⌈Σ r·√c / √l⌉.

    ``variant="released"`` (the authors' released code): w_t = −log2(share of tokens of type
    t); entity-free sentences are kept once; otherwise f = ⌈g⌉ with g = 1 + Σc (sC),
    √(1 + Σ c·w) (sCR), (1 + Σ c·w)/√l (sCRD), (1 + Σ √c·w)/√l (nsCRD).
    """
    if method not in RESAMPLING_METHODS:
        raise ValueError(f"data.resample must be one of {RESAMPLING_METHODS} or none, got {method!r}")
    if variant not in ("paper", "released"):
        raise ValueError(f"data.resample_variant must be 'paper' or 'released', got {variant!r}")
    r = type_rareness(sentences, math.log if variant == "paper" else math.log2)
    out = []
    for s in sentences:
        c = type_counts(s)
        root_l = math.sqrt(len(s))
        if variant == "paper":
            if method == "sC":
                f = 1 + sum(c.values())
            elif method == "sCR":
                f = 1 + math.ceil(math.sqrt(sum(r[t] * k for t, k in c.items())))
            elif method == "sCRD":
                f = 1 + math.ceil(sum(r[t] * k for t, k in c.items()) / root_l)
            else:
                f = 1 + math.ceil(sum(r[t] * math.sqrt(k) for t, k in c.items()) / root_l)
        elif not c:
            f = 1
        else:
            g: float  # f(s) before rounding up
            if method == "sC":
                g = 1 + sum(c.values())
            elif method == "sCR":
                g = math.sqrt(1 + sum(r[t] * k for t, k in c.items()))
            elif method == "sCRD":
                g = (1 + sum(r[t] * k for t, k in c.items())) / root_l
            else:
                g = (1 + sum(r[t] * math.sqrt(k) for t, k in c.items())) / root_l
            f = max(1, math.ceil(g))
        out.append(int(f))
    return out


def resample(sentences: Sequence[Sentence], method: str, variant: str = "paper") -> list[Sentence]:
    """Each sentence repeated f(s) times (copies adjacent; the loader shuffles)."""
    counts = resampling_counts(sentences, method, variant)
    return [s for s, k in zip(sentences, counts, strict=True) for _ in range(k)]


# --------------------------------------------------------------------------------------------
# Balanced undersampling (Akkasi et al. 2018)
# --------------------------------------------------------------------------------------------


def balanced_undersample(sentences: Sequence[Sentence], ratio: float = 3.0) -> list[Sentence]:
    """Keep entity tokens plus the nearest context until ``ratio`` × entity tokens are kept.

    Per sentence with e > 0 entity tokens the budget is min(len, ⌈ratio·e⌉) tokens. All entity
    tokens are kept; then context grows one token at a time around the mentions, in rounds:
    for each mention in order, the nearest unkept token on its left, then on its right,
    until the budget is met or the sentence is used up. The kept tokens are joined in their
    original order into one training sequence (id ``<id>#u``); mentions stay whole, so the tags
    remain valid IOB2. Entity-free sentences are dropped.
    """
    out = []
    for s in sentences:
        ent = [i for i, t in enumerate(s.tags) if t != OUTSIDE]
        if not ent:
            continue
        budget = min(len(s), math.ceil(ratio * len(ent)))
        kept = set(ent)
        spans = mention_spans(s.tags)
        left = [a - 1 for a, _ in spans]
        right = [b for _, b in spans]
        while len(kept) < budget:
            progressed = False
            for k in range(len(spans)):
                for side in (left, right):
                    while 0 <= side[k] < len(s) and side[k] in kept:
                        side[k] += -1 if side is left else 1
                    if len(kept) < budget and 0 <= side[k] < len(s):
                        kept.add(side[k])
                        progressed = True
            if not progressed:
                break
        idx = sorted(kept)
        out.append(Sentence(f"{s.id}#u", tuple(s.tokens[i] for i in idx), tuple(s.tags[i] for i in idx)))
    return out


def mention_spans(tags: Sequence[str]) -> list[tuple[int, int]]:
    """[start, end) of each IOB2 mention."""
    spans, start = [], None
    for i, t in enumerate(list(tags) + [OUTSIDE]):
        if start is not None and not t.startswith("I-"):
            spans.append((start, i))
            start = None
        if t.startswith("B-") or (t.startswith("I-") and start is None):
            start = i
    return spans

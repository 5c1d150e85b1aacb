"""Statistics over partitions, as the seed papers state their claims (scipy, no hand-made
distributions): bootstrap standard errors and confidence intervals of a mean, paired
comparisons (mean difference with its bootstrap CI, paired bootstrap, Wilcoxon signed-rank
and paired t-test p-values) Holm's correction across the comparisons of one table, and the power of a paired t-test
(the effect it detects, the partitions it needs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats


@dataclass
class Estimate:
    """Mean of a metric over n runs, its bootstrap standard error and percentile CI."""

    n: int
    mean: float
    se: float
    low: float
    high: float


def bootstrap_mean(values, resamples: int = 10_000, seed: int = 0, level: float = 0.95) -> Estimate:
    """Non-parametric bootstrap of the mean (``scipy.stats.bootstrap``, percentile interval).
    SE and CI are NaN below two values, and collapse to the mean when all values agree."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return Estimate(0, math.nan, math.nan, math.nan, math.nan)
    mean = float(x.mean())
    if len(x) < 2:
        return Estimate(1, mean, math.nan, math.nan, math.nan)
    if np.all(x == x[0]):
        return Estimate(len(x), mean, 0.0, mean, mean)
    res = stats.bootstrap(
        (x,),
        np.mean,
        n_resamples=resamples,
        confidence_level=level,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    ci = res.confidence_interval
    return Estimate(len(x), mean, float(res.standard_error), float(ci.low), float(ci.high))


@dataclass
class Comparison:
    """Paired comparison of method x against baseline y on the same partitions."""

    n: int
    diff: Estimate  # of the per-partition differences x − y
    p_bootstrap: float
    p_wilcoxon: float
    p_ttest: float
    p_holm: float = math.nan  # the chosen test's p after Holm's correction across a table

    def p(self, test: str) -> float:
        """p-value of ``test``: wilcoxon (exact signed-rank; cannot reach 0.05 below 6 pairs),
        bootstrap (anti-conservative with few pairs) or ttest (paired t, the MoM paper's)."""
        return {"wilcoxon": self.p_wilcoxon, "bootstrap": self.p_bootstrap, "ttest": self.p_ttest}[test]


def paired_compare(x, y, resamples: int = 10_000, seed: int = 0, level: float = 0.95) -> Comparison:
    """x[i] and y[i] come from the same partition. The paired bootstrap p-value is two-sided,
    2·min(P*(d̄* ≤ 0), P*(d̄* ≥ 0)) over the bootstrap distribution of the mean difference
    (the test that rejects exactly when the percentile CI excludes 0)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape:
        raise ValueError("paired samples must have the same length")
    d = x - y
    est = bootstrap_mean(d, resamples, seed, level)
    if len(d) < 2:
        return Comparison(len(d), est, math.nan, math.nan, math.nan)
    if np.all(d == d[0]):
        p_boot = 1.0 if d[0] == 0 else 0.0
    else:
        dist = stats.bootstrap(
            (d,), np.mean, n_resamples=resamples, method="percentile", rng=np.random.default_rng(seed)
        ).bootstrap_distribution
        p_boot = min(1.0, 2 * min(float(np.mean(dist <= 0)), float(np.mean(dist >= 0))))
    p_wil = float(stats.wilcoxon(x, y).pvalue) if np.any(d != 0) else 1.0
    p_t = float(stats.ttest_rel(x, y).pvalue) if np.any(d != d[0]) else (1.0 if d[0] == 0 else 0.0)
    return Comparison(len(d), est, p_boot, p_wil, p_t)


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (NaN stays NaN and is not counted):
    p̃_(i) = max_{j ≤ i} min(1, (m − j + 1)·p_(j)) for the sorted p_(1) ≤ … ≤ p_(m)."""
    idx = [i for i, p in enumerate(pvalues) if not math.isnan(p)]
    order = sorted(idx, key=lambda i: pvalues[i])
    m, out, running = len(order), [math.nan] * len(pvalues), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


POWER = 0.8  # the power at which a claim's detectable effect is stated


def detectable_effect(sd: float, n: int, alpha: float, tests: int) -> float:
    """The smallest true distance of mean Δ from the claim's bound that a one-sided paired t-test
    finds with probability ``POWER`` at level α / ``tests`` (the first, strictest step of Holm over
    ``tests`` one-sided tests), for differences with standard deviation ``sd`` over ``n``
    partitions: the noncentrality at which the noncentral t exceeds the critical value with
    probability ``POWER``, times sd / √n."""
    df = n - 1
    critical = stats.t.ppf(1 - alpha / tests, df)
    noncentrality = optimize.brentq(lambda nc: stats.nct.sf(critical, df, nc) - POWER, 0.0, 1e3)
    return float(noncentrality * sd / math.sqrt(n))


def partitions_needed(distance: float, sd: float, alpha: float, tests: int, most: int = 100_000) -> int | None:
    """The fewest partitions at which :func:`detectable_effect` reaches ``distance`` (the paper's
    effect beyond the claim's bound) for differences with standard deviation ``sd``; None when
    the paper's effect does not reach beyond the bound, or needs more than ``most``."""
    if not distance > 0:
        return None
    if sd == 0:
        return 2
    low, high = 2, 2
    while detectable_effect(sd, high, alpha, tests) > distance:
        low, high = high, high * 2
        if high > most:
            return None
    while low < high:  # the smallest n in [low, high] that detects it
        mid = (low + high) // 2
        low, high = (mid + 1, high) if detectable_effect(sd, mid, alpha, tests) > distance else (low, mid)
    return high


def t_interval(mean: float, sd: float, n: int, side_level: float) -> tuple[float, float]:
    """The two-sided t-interval of a mean whose each side has error ``side_level`` (0.025 for a
    95 % interval; a one-sided test's level for the interval that matches it)."""
    half = float(stats.t.isf(side_level, n - 1)) * sd / math.sqrt(n)
    return mean - half, mean + half


def _tails(d: np.ndarray):
    """One-sided paired t-test p-values of mean Δ: ``above(b)`` of H0 "mean Δ ≤ b", ``below(b)``
    of H0 "mean Δ ≥ b"."""
    n, mean = len(d), float(np.mean(d))
    se = float(np.std(d, ddof=1) / math.sqrt(n))

    def above(bound: float) -> float:
        if se == 0:
            return 0.0 if mean > bound else 1.0
        return float(stats.t.sf((mean - bound) / se, n - 1))

    def below(bound: float) -> float:
        if se == 0:
            return 0.0 if mean < bound else 1.0
        return float(stats.t.cdf((mean - bound) / se, n - 1))

    return above, below


def t_test(d: np.ndarray, relation: str, margin: float, alpha: float) -> tuple[float, float, float]:
    """The claim's p-value and the two-sided (1 − α) paired t-interval of mean Δ."""
    above, below = _tails(d)
    p = {">": lambda: above(0.0), ">>": lambda: above(margin), "≈": lambda: max(above(-margin), below(margin))}[
        relation
    ]()
    return (p, *t_interval(float(np.mean(d)), float(np.std(d, ddof=1)), len(d), alpha / 2))


def p_against(d: np.ndarray, relation: str, margin: float) -> float:
    """The p-value of the claim's reverse, i.e. of H0 "the claim may hold" against Δ on the
    other side: Δ < 0 (``>``), Δ < margin (``>>``), |Δ| > margin (``≈``: the two directions,
    Bonferroni)."""
    above, below = _tails(d)
    return {
        ">": lambda: below(0.0),
        ">>": lambda: below(margin),
        "≈": lambda: min(1.0, 2 * min(above(margin), below(-margin))),
    }[relation]()


def wilcoxon_directions(deltas, relation: str, margin: float) -> tuple[float, float]:
    """Wilcoxon signed-rank one-sided p of a claim on paired differences and of its reverse, on
    the differences less the claim's bound (``>``: 0, ``>>``: the margin; ``≈``: the larger of the
    two TOST p, and the reverse's Bonferroni pair)."""
    d = np.asarray(deltas, dtype=float)

    def one(shift: float, side: str) -> float:
        x = d - shift
        return 1.0 if not np.any(x) else float(stats.wilcoxon(x, alternative=side).pvalue)

    if relation == "≈":
        return (
            max(one(-margin, "greater"), one(margin, "less")),
            min(1.0, 2 * min(one(margin, "greater"), one(-margin, "less"))),
        )
    bound = margin if relation == ">>" else 0.0
    return one(bound, "greater"), one(bound, "less")

"""Group-sequential tests: a claim judged at looks declared before the first run, stopping as
soon as it is decided, with its type-I error kept at α by an alpha-spending function
(Lan & DeMets 1983).

At look k of K, with n_k of the final n_K partitions judged (information fraction
t_k = n_k / n_K), a one-sided test has spent α(t_k) in all:

* O'Brien–Fleming type: α(t) = 2 − 2 Φ(z_{1−α/2} / √t) — almost nothing early, nearly α at the end;
* Pocock type: α(t) = α ln(1 + (e − 1) t) — evenly.

The critical values c_k on the z scale solve, under H0 (Z_k of the looks jointly normal,
corr(Z_i, Z_j) = √(t_i / t_j), i ≤ j),
P(Z_1 < c_1, …, Z_{k−1} < c_{k−1}, Z_k ≥ c_k) = α(t_k) − α(t_{k−1}). A look's paired t-test is
compared at the same nominal level, p_k < 1 − Φ(c_k) (``tests/test_study.py`` simulates the
type-I error of that rule with the t-test at small n).
"""
from __future__ import annotations

import math

import numpy as np
from scipy import optimize, stats

SPENDING = ("obrien_fleming", "pocock")


def spent(t: float, alpha: float, kind: str = "obrien_fleming") -> float:
    """α spent by information fraction ``t`` (0 < t ≤ 1) under the Lan–DeMets spending function ``kind``."""
    if not 0 < t <= 1:
        raise ValueError(f"information fraction {t} is not in (0, 1]")
    if kind == "obrien_fleming":
        return float(2 - 2 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / math.sqrt(t)))
    if kind == "pocock":
        return float(alpha * math.log(1 + (math.e - 1) * t))
    raise ValueError(f"spending {kind!r} is not one of {SPENDING}")


def _below(bounds: list[float], fractions: list[float]) -> float:
    """P(Z_1 < c_1, …, Z_k < c_k) under H0 for looks at ``fractions``."""
    t = np.asarray(fractions, dtype=float)
    if len(t) == 1:
        return float(stats.norm.cdf(bounds[0]))
    cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    return float(stats.multivariate_normal.cdf(np.asarray(bounds), mean=np.zeros(len(t)), cov=cov, abseps=1e-7,
                                               releps=1e-5, rng=np.random.default_rng(0)))


def boundaries(fractions: list[float], alpha: float, kind: str = "obrien_fleming") -> list[float]:
    """One-sided critical values c_k (z scale) of looks at information ``fractions`` (increasing,
    the last 1) for a total one-sided level ``alpha`` spent by ``kind``."""
    fractions = [float(f) for f in fractions]
    if not fractions or fractions[-1] != 1.0 or any(b <= a for a, b in zip(fractions, fractions[1:])):
        raise ValueError(f"looks at {fractions}: fractions must increase to 1")
    bounds: list[float] = []
    previous, kept = 0.0, 1.0  # α spent so far; P(no crossing so far)
    for k, t in enumerate(fractions):
        now = spent(t, alpha, kind)
        step = now - previous
        if step <= 0:
            bounds.append(math.inf)
        elif k == 0:
            bounds.append(float(stats.norm.isf(step)))
        else:
            target = kept - step  # P(no crossing up to and including look k)
            bounds.append(float(optimize.brentq(lambda c: _below(bounds + [c], fractions[:k + 1]) - target,
                                                -10.0, 40.0, xtol=1e-10)))
        kept = _below(bounds, fractions[:k + 1]) if k else float(stats.norm.cdf(bounds[0]))
        previous = now
    return bounds


def nominal_levels(fractions: list[float], alpha: float, kind: str = "obrien_fleming") -> list[float]:
    """The one-sided p-value below which look k rejects: 1 − Φ(c_k)."""
    return [float(stats.norm.sf(c)) for c in boundaries(fractions, alpha, kind)]

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
compared at the same nominal level, p_k < 1 − Φ(c_k): ``z_nominal`` boundaries. With few
partitions that rule spends slightly more than α — the looks' t statistics are not jointly
normal (MoM Table 6's design, looks at 4 / 7 / 10, α / 6 per direction: 0.00876 ± 0.00007
against 0.00833 over 10⁶ null studies).

``t_simulated`` boundaries are exact for the t statistic: under H0 a paired t statistic does not
depend on the differences' SD, so the joint law of the looks' t statistics (n_k − 1 degrees of
freedom each, sharing their first n_k differences) is that of standard normal data. Each c_k is
the quantile of that law, over ``studies`` simulated null studies with a fixed seed, that spends
α(t_k) − α(t_{k−1}) among the studies not stopped before (:func:`t_boundaries`); a look rejects
when t_k ≥ c_k, i.e. p_k < P(T_{n_k − 1} ≥ c_k) (:func:`t_levels`). ``python -m
ner_lightning.report.sequential`` checks a design's per-direction type-I error on independent
null studies (:func:`type_one_error`).
"""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
from scipy import optimize, stats

SPENDING = ("obrien_fleming", "pocock")
BOUNDARIES = ("t_simulated", "z_nominal")
CHUNK = 200_000  # null studies simulated at a time


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
    return float(
        stats.multivariate_normal.cdf(
            np.asarray(bounds), mean=np.zeros(len(t)), cov=cov, abseps=1e-7, releps=1e-5, rng=np.random.default_rng(0)
        )
    )


def boundaries(fractions: list[float], alpha: float, kind: str = "obrien_fleming") -> list[float]:
    """One-sided critical values c_k (z scale) of looks at information ``fractions`` (increasing,
    the last 1) for a total one-sided level ``alpha`` spent by ``kind``."""
    fractions = [float(f) for f in fractions]
    if not fractions or fractions[-1] != 1.0 or any(b <= a for a, b in pairwise(fractions)):
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
            bounds.append(
                float(
                    optimize.brentq(
                        lambda c, k=k, target=target: _below(bounds + [c], fractions[: k + 1]) - target,
                        -10.0,
                        40.0,
                        xtol=1e-10,
                    )
                )
            )
        kept = _below(bounds, fractions[: k + 1]) if k else float(stats.norm.cdf(bounds[0]))
        previous = now
    return bounds


def nominal_levels(fractions: list[float], alpha: float, kind: str = "obrien_fleming") -> list[float]:
    """The one-sided p-value below which look k rejects: 1 − Φ(c_k)."""
    return [float(stats.norm.sf(c)) for c in boundaries(fractions, alpha, kind)]


def null_t(stages: list[int], studies: int, seed: int, shift: float = 0.0) -> np.ndarray:
    """t statistics (``studies`` × looks) of paired differences N(``shift``, 1) judged at the
    cumulative partition counts ``stages``, each study's looks sharing their first n_k differences."""
    stages = [int(n) for n in stages]
    rng, out = np.random.default_rng(seed), np.empty((studies, len(stages)))
    idx = np.asarray(stages) - 1
    n = np.asarray(stages, dtype=float)
    for start in range(0, studies, CHUNK):
        x = rng.standard_normal((min(CHUNK, studies - start), stages[-1])) + shift
        s1, s2 = np.cumsum(x, axis=1)[:, idx], np.cumsum(x * x, axis=1)[:, idx]
        mean = s1 / n
        sd = np.sqrt(np.maximum(s2 - n * mean * mean, 0.0) / (n - 1))
        out[start : start + len(x)] = mean * np.sqrt(n) / sd
    return out


def t_boundaries(
    stages: list[int], alpha: float, kind: str = "obrien_fleming", studies: int = 2_000_000, seed: int = 0
) -> list[float]:
    """One-sided critical values c_k on the t scale for looks at ``stages`` partitions spending
    ``alpha`` by ``kind`` (module docstring): c_k leaves α(t_k) − α(t_{k−1}) of ``studies``
    simulated null studies at or above it among those below every earlier c_j."""
    if stages[0] < 2 or any(b <= a for a, b in pairwise(stages)):
        raise ValueError(f"stages {stages} must increase from at least 2 partitions")
    t = null_t(stages, studies, seed)
    alive, bounds, previous = np.ones(studies, dtype=bool), [], 0.0
    for k, n_k in enumerate(stages):
        now = spent(n_k / stages[-1], alpha, kind)
        crossings = int(round((now - previous) * studies))
        values = np.sort(t[alive, k])[::-1]
        if crossings <= 0:
            bounds.append(math.inf)
        else:
            bounds.append(float((values[crossings - 1] + values[crossings]) / 2))
            alive &= t[:, k] < bounds[-1]
        previous = now
    return bounds


def t_levels(stages: list[int], bounds: list[float]) -> list[float]:
    """The one-sided p-value below which look k rejects: P(T_{n_k − 1} ≥ c_k)."""
    return [float(stats.t.sf(c, n - 1)) for n, c in zip(stages, bounds, strict=True)]


def z_nominal_bounds(stages: list[int], alpha: float, kind: str = "obrien_fleming") -> list[float]:
    """The ``z_nominal`` rule's critical values on the t scale: c_k = F⁻¹_{T, n_k − 1}(Φ(z_k))."""
    levels = nominal_levels([n / stages[-1] for n in stages], alpha, kind)
    return [float(stats.t.isf(level, n - 1)) for n, level in zip(stages, levels, strict=True)]


def crossed(t: np.ndarray, bounds: list[float]) -> np.ndarray:
    """Which simulated studies (rows of t statistics at the looks) cross some look's bound."""
    return np.asarray((t >= np.asarray(bounds)).any(axis=1))


def type_one_error(
    stages: list[int], bounds: list[float], studies: int = 1_000_000, seed: int = 1
) -> tuple[float, float]:
    """The per-direction type-I error of the looks' ``bounds`` over ``studies`` null studies
    (independent of the ones :func:`t_boundaries` calibrated on when ``seed`` differs) and its SE."""
    rate = float(crossed(null_t(stages, studies, seed), bounds).mean())
    return rate, math.sqrt(rate * (1 - rate) / studies)


def power(stages: list[int], bounds: list[float], effect: float, studies: int = 100_000, seed: int = 2) -> float:
    """The chance of crossing some look's bound when the true mean difference is ``effect`` SDs."""
    return float(crossed(null_t(stages, studies, seed, effect), bounds).mean())


def detectable(
    stages: list[int], bounds: list[float], target: float = 0.8, studies: int = 100_000, seed: int = 2
) -> float:
    """The true mean difference (in SDs) that the looks detect with probability ``target``."""
    return float(optimize.brentq(lambda e: power(stages, bounds, e, studies, seed) - target, 0.0, 50.0, xtol=1e-4))


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m ner_lightning.report.sequential",
        description="the per-direction type-I error of a group-sequential design of "
        "paired t-tests, both boundary rules, over independent null studies",
    )
    ap.add_argument("--stages", type=int, nargs="+", required=True, help="partitions judged at each look")
    ap.add_argument("--alpha", type=float, required=True, help="one-sided level per direction (α / 2m)")
    ap.add_argument("--spending", choices=SPENDING, default="obrien_fleming")
    ap.add_argument("--studies", type=int, default=1_000_000, help="null studies to check on")
    ap.add_argument("--calibration-studies", type=int, default=2_000_000)
    ap.add_argument("--calibration-seed", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1, help="seed of the checking studies (not the calibration's)")
    args = ap.parse_args(argv)
    designs = {
        "t_simulated": t_boundaries(
            args.stages, args.alpha, args.spending, args.calibration_studies, args.calibration_seed
        ),
        "z_nominal": z_nominal_bounds(args.stages, args.alpha, args.spending),
    }
    print(
        f"looks at {args.stages} partitions, {args.spending} spending of α = {args.alpha:.6g} per direction, "
        f"{args.studies} null studies (seed {args.seed})"
    )
    print("| boundaries | t critical values | type-I error ± SE | within α + 3 SE |")
    print("|---|---|---|---|")
    for name, bounds in designs.items():
        rate, se = type_one_error(args.stages, bounds, args.studies, args.seed)
        print(
            f"| {name} | {', '.join(f'{c:.4f}' for c in bounds)} | {rate:.5f} ± {se:.5f} | "
            f"{'yes' if rate <= args.alpha + 3 * se else 'no'} |"
        )


if __name__ == "__main__":
    main()

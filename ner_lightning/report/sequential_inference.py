"""Estimates after a group-sequential stop: the stage-wise ordering's median-unbiased estimate,
confidence interval and p-value (Jennison & Turnbull 2000, §8.4; Tsiatis, Rosner & Mehta 1984),
and the repeated confidence interval of the stopping look (ch. 9), beside the naive mean,
t-interval and p of the stopping look.

A claim judged at looks of n_1 < … < n_K partitions stops at the first look k where its paired
t statistic T_k = (mean_k − b) / (sd_k / √n_k) reaches c_k (the claim's direction) or −c_k (its
reverse), c_k = t⁻¹_{n_k − 1}(1 − level_k) — ``b`` is the claim's bound (0, or the margin of
``>>``). Outcomes (stopping look, T there) are ordered stage-wise: a stop in the claim's direction
at an earlier look is more extreme than any later outcome, a stop in the reverse direction less,
and within one look a larger T is more extreme. The law of the T_k depends on Δ and the SD σ only
through θ = (Δ − b) / σ, so inference on θ is exact without knowing σ:

    F(θ) = P_θ(an outcome at least as extreme as the observed one)
         = Σ_{j < k*} P_θ(stop at look j in the claim's direction) + P_θ(no stop before k*, T_{k*} ≥ t*).

F increases with θ. The median-unbiased estimate solves F(θ̂) = ½, the (1 − α) interval
F(θ_L) = α/2 and F(θ_U) = 1 − α/2, and the stage-wise p of the claim is F(0) (of its reverse,
1 − F(0)): the test of Δ ≤ b, the margin, not of Δ ≤ 0. At the first look F is closed-form,
P(T_1 ≥ t*) under a noncentral t (n_1 − 1 degrees of freedom, noncentrality θ√n_1); later it is
estimated on ``studies`` simulated studies — each look's mean and SD of standard normal
differences — with common random numbers (the same draws shifted by θ, so every simulated T_k
grows with θ and F is monotone), each root by bisection, and a p comes with its Monte-Carlo SE.

These statements are on θ, the (Δ − b)/σ scale, where they are exact whatever σ. On the Δ scale
the module gives the **repeated confidence interval** (Jennison & Turnbull 2000, ch. 9) of the
stopping look, mean_k ± c_k · sd_k / √n_k: the intervals of all looks hold Δ together with
probability 1 − 2α_d (α_d the direction's total α) whatever the data made the study stop — the
boundaries are exact for the t statistic, whose law at the true Δ is the null one — so the one
reported covers Δ with probability at least that, and it is centred on the mean, not on b.
A θ interval times a look's SD is no such interval (σ is estimated after the data chose the
look), and the module gives none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats


@dataclass(frozen=True)
class Design:
    """The looks (partitions judged at each) and each look's one-sided level per direction."""

    stages: tuple[int, ...]
    levels: tuple[float, ...]

    @property
    def critical(self) -> np.ndarray:
        """c_k on the t scale."""
        return np.array([stats.t.ppf(1 - a, n - 1) for n, a in zip(self.stages, self.levels, strict=True)])


class NullDraws:
    """``studies`` simulated studies of standard normal differences, as the statistics the looks
    need: each look's mean and SD (a shift θ of every difference moves the mean by θ only)."""

    def __init__(self, stages: Sequence[int], studies: int = 200_000, seed: int = 0):
        z = np.random.default_rng(seed).standard_normal((studies, max(stages)), dtype=np.float32)
        self.stages = tuple(stages)
        self.means = np.stack([z[:, :n].mean(1) for n in stages], 1)
        self.sds = np.stack([z[:, :n].std(1, ddof=1) for n in stages], 1)

    def t(self, theta: float) -> np.ndarray:
        """T_k of every simulated study at standardised effect θ, ``(studies, K)``."""
        return (theta + self.means) * np.sqrt(np.asarray(self.stages)) / self.sds

    def u(self, theta: float) -> np.ndarray:
        """Each look's standardised mean (mean_k − b) / σ at θ, ``(studies, K)`` (the naive estimate)."""
        return theta + self.means


def outcomes(t: np.ndarray, critical: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each study's stopping look (0-based; the last when it never stops) and its T there."""
    crossed = np.abs(t) >= critical
    crossed[:, -1] = True  # the last look ends every study
    look = crossed.argmax(1)
    return look, t[np.arange(len(t)), look]


def tail_many(theta: float, design: Design, draws: NullDraws, looks: np.ndarray, t_obs: np.ndarray) -> np.ndarray:
    """F(θ) of observed outcomes (their looks 0-based, their T): the share of simulated studies
    whose outcome is at least as extreme, stage-wise."""
    last = int(np.max(looks))
    t = draws.t(theta)[:, : last + 1]
    critical, total = design.critical[: last + 1], len(t)
    out = np.zeros(len(looks))
    stopped = np.zeros(total, dtype=bool)
    up_before = 0.0
    for k in range(last + 1):
        at = looks == k
        if at.any():
            running = np.sort(t[~stopped, k])
            out[at] = up_before + (len(running) - np.searchsorted(running, t_obs[at], side="left")) / total
        up, down = ~stopped & (t[:, k] >= critical[k]), ~stopped & (t[:, k] <= -critical[k])
        up_before += float(np.count_nonzero(up)) / total
        stopped |= up | down
    return out


def tail(theta: float, design: Design, draws: NullDraws, look: int, t_obs: float) -> float:
    """F(θ) of one observed outcome (:func:`tail_many`)."""
    return float(tail_many(theta, design, draws, np.array([look]), np.array([t_obs]))[0])


def _solve(target: float, design: Design, draws: NullDraws, look: int, t_obs: float) -> float:
    """θ with F(θ) = ``target`` (bisection: F is monotone in θ)."""
    scale = 1 / math.sqrt(design.stages[look])
    low, high = t_obs * scale - 12 * scale, t_obs * scale + 12 * scale
    for _ in range(40):
        mid = (low + high) / 2
        if tail(mid, design, draws, look, t_obs) < target:
            low = mid
        else:
            high = mid
        if high - low < 1e-5 * scale:
            break
    return (low + high) / 2


def first_look_tail(theta: float, n: int, t_obs: float) -> float:
    """F(θ) of a stop at the first look: P(T ≥ t*) for T noncentral t (n − 1 df, noncentrality θ√n)."""
    return float(stats.nct.sf(t_obs, n - 1, theta * math.sqrt(n)))


def _solve_first(target: float, n: int, t_obs: float) -> float:
    scale = 1 / math.sqrt(n)
    low, high = t_obs * scale - 20 * scale, t_obs * scale + 20 * scale
    return float(optimize.brentq(lambda th: first_look_tail(th, n, t_obs) - target, low, high, xtol=1e-10))


def repeated_interval(design: Design, look: int, mean: float, sd: float) -> list[float]:
    """The repeated confidence interval of look ``look`` (0-based) on the Δ scale: mean ± c_k · sd / √n_k."""
    half = float(design.critical[look]) * sd / math.sqrt(design.stages[look])
    return [mean - half, mean + half]


def adjusted(
    design: Design,
    look: int,
    mean: float,
    sd: float,
    bound: float = 0.0,
    alpha: float = 0.05,
    draws: NullDraws | None = None,
    final: bool | None = None,
) -> dict:
    """After a stop at ``look`` (0-based) with ``mean`` and ``sd`` of the differences there (module
    docstring): ``theta`` (the median-unbiased estimate of (Δ − ``bound``)/σ) and its (1 − ``alpha``)
    ``theta_interval``, the stage-wise ``p`` of Δ ≤ ``bound`` and ``p_reverse`` with their
    Monte-Carlo ``p_se`` (0 where ``exact``), and the look's ``repeated_interval`` on the Δ scale.
    ``design``: the looks up to the stop; ``final``: whether the stop is the study's last look
    (default: the design's last), where a study ends whether it crosses or not."""
    n = design.stages[look]
    t_obs = (mean - bound) / (sd / math.sqrt(n))
    last = final if final is not None else look == len(design.stages) - 1
    if not last and abs(t_obs) < design.critical[look]:
        raise ValueError(f"look {look + 1} is not the last and its t ({t_obs:.3f}) crosses no boundary: no stop")
    quantiles = (0.5, alpha / 2, 1 - alpha / 2)
    if look == 0:  # nothing earlier could have stopped it: closed form
        thetas = [_solve_first(q, n, t_obs) for q in quantiles]
        p, p_se, method = float(stats.t.sf(t_obs, n - 1)), 0.0, "exact"
    else:
        draws = draws or NullDraws(design.stages[: look + 1])
        thetas = [_solve(q, design, draws, look, t_obs) for q in quantiles]
        p = tail(0.0, design, draws, look, t_obs)
        p_se, method = (
            math.sqrt(max(p * (1 - p), 0.0) / len(draws.means)),
            f"simulated over {len(draws.means):,} studies",
        )
    return {
        "theta": thetas[0],
        "theta_interval": thetas[1:],
        "p": p,
        "p_reverse": 1 - p,
        "p_se": p_se,
        "method": method,
        "bound": bound,
        "repeated_interval": repeated_interval(design, look, mean, sd),
        "look": look + 1,
    }


def repeated_coverage(design: Design, delta: float, sigma: float, bound: float, studies: int, seed: int = 0) -> float:
    """The share of ``studies`` simulated studies (normal differences N(Δ, σ), stopped by the claim's t
    test against ``bound``) whose :func:`repeated_interval` at the stopping look holds Δ."""
    x = np.random.default_rng(seed).normal(delta, sigma, (studies, design.stages[-1]))
    n = np.asarray(design.stages)
    means = np.stack([x[:, :k].mean(1) for k in design.stages], 1)
    sds = np.stack([x[:, :k].std(1, ddof=1) for k in design.stages], 1)
    look, _ = outcomes((means - bound) / (sds / np.sqrt(n)), design.critical)
    rows = np.arange(studies)
    half = design.critical[look] * sds[rows, look] / np.sqrt(n[look])
    return float(np.mean(np.abs(means[rows, look] - delta) <= half))


if __name__ == "__main__":  # the coverage figures of docs/results/replication.md
    stages, critical = (5, 10, 15, 20), (3.8774, 2.9575, 2.7263, 2.6200)  # the confirmatory design, α_d 0.025
    confirmatory = Design(stages, tuple(float(stats.t.sf(c, n - 1)) for c, n in zip(critical, stages, strict=True)))
    for delta, sigma, bound in ((-0.053, 0.029, 0.05), (0.03, 0.03, 0.05), (0.0, 1.0, 0.0), (0.6, 1.0, 0.0)):
        share = repeated_coverage(confirmatory, delta, sigma, bound, 100_000)
        print(
            f"Δ {delta:+g}, σ {sigma:g}, b {bound:g}: repeated CI at the stop holds Δ in {share:.4f} "
            f"(claimed ≥ 0.95; SE {math.sqrt(0.95 * 0.05 / 100_000):.4f})"
        )

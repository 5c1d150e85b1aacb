"""Estimates after a group-sequential stop: the stage-wise ordering's median-unbiased estimate,
confidence interval and p-value (Jennison & Turnbull 2000, §8.4; Tsiatis, Rosner & Mehta 1984),
beside the naive mean, t-interval and p of the stopping look.

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
1 − F(0)). On the page each θ is shown as Δ = b + θ·sd, the stopping look's SD (a plug-in: the
θ-scale statements are the exact ones). F is estimated on ``studies`` simulated studies — each
look's mean and SD of standard normal differences — with common random numbers (the same draws
shifted by θ, so every simulated T_k grows with θ and F is monotone), each root by bisection.

After a stop at the first look nothing earlier could have stopped: the p is the t-test's and θ̂
the median-unbiased estimate of a noncentral t (at few partitions a little nearer 0 than
mean / sd). The stopping rule biases the *mean* of the naive estimate over studies, not the
*median* of this one, which ``tests/test_sequential_inference.py`` checks over 10⁵ simulated
studies of the confirmatory design.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


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
    """The stage-wise estimate of a claim stopped at ``look`` (0-based) with ``mean`` and ``sd``
    of its differences there (module docstring): ``estimate``, ``interval`` (1 − ``alpha``), ``p``
    (the claim's direction) and ``p_reverse``, in Δ units. ``design``: the looks up to the stop;
    ``final``: whether the stop is the study's last look (default: the design's last), where a
    study ends whether it crosses or not."""
    draws = draws or NullDraws(design.stages[: look + 1])
    t_obs = (mean - bound) / (sd / math.sqrt(design.stages[look]))
    last = final if final is not None else look == len(design.stages) - 1
    if not last and abs(t_obs) < design.critical[look]:
        raise ValueError(f"look {look + 1} is not the last and its t ({t_obs:.3f}) crosses no boundary: no stop")
    thetas = [_solve(q, design, draws, look, t_obs) for q in (0.5, alpha / 2, 1 - alpha / 2)]
    p = tail(0.0, design, draws, look, t_obs)
    estimate, low, high = (bound + theta * sd for theta in thetas)
    return {"estimate": estimate, "interval": [low, high], "p": p, "p_reverse": 1 - p, "look": look + 1}

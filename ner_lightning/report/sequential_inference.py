"""Estimates after a group-sequential stop: the stage-wise ordering's median-unbiased estimate,
confidence interval and p-value (Jennison & Turnbull 2000, §8.4; Tsiatis, Rosner & Mehta 1984),
beside the naive mean, t-interval and p of the stopping look.

A claim judged at looks of n_1 < … < n_K partitions stops at the first look k where its paired
t statistic T_k = (mean_k − b) / (sd_k / √n_k) reaches c_k (the claim's direction) or −c_k (its
reverse), c_k = t⁻¹_{n_k − 1}(1 − level_k) — ``b`` is the claim's bound (0, or the margin of
``>>``). Outcomes (stopping look, mean there) are ordered stage-wise: a stop in the claim's
direction at any earlier look is more extreme than every later outcome, a stop in the reverse
direction at an earlier look less extreme than every later one, and within one look — and among
all outcomes that reach the last look — a larger mean is more extreme. With the SD σ taken as the
stopping look's (the usual plug-in), θ = (Δ − b) / σ and the observed u* = (mean* − b) / σ,

    F(θ) = P_θ(an outcome at least as extreme as the observed one), e.g. for a stop in the claim's
           direction at look k*: Σ_{j < k*} P_θ(stop up at j) + P_θ(stop up at k*, u_{k*} ≥ u*).

F increases with θ. The median-unbiased estimate solves F(θ̂) = ½, the (1 − α) interval
F(θ_L) = α/2 and F(θ_U) = 1 − α/2, and the stage-wise p of the claim is F(0) (of its reverse,
1 − F(0)); each θ becomes Δ = b + θ·σ. F is estimated on ``studies`` simulated studies — each
look's mean and SD of standard normal differences, with the design's t-statistic stopping rule —
with common random numbers (the same draws shifted by θ, so every simulated T_k and mean grows
with θ and F is monotone), and each root found by bisection.

After a stop at the first look nothing earlier could have stopped, so the estimate is the naive
mean and the interval the fixed-sample one at known σ: the stopping rule biases the *mean* of the
naive estimate over studies, not the *median* of this one, which ``tests/test_sequential_inference.py``
checks over 10⁵ simulated studies of the confirmatory design.
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
        """Each look's standardised mean (mean_k − b) / σ at θ, ``(studies, K)``."""
        return theta + self.means


KINDS = ("up", "down", "end")  # a stop in the claim's direction, in the reverse one, at the last look


def outcomes(t: np.ndarray, critical: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each study's stopping look (0-based; the last when it never stops) and its kind
    (an index of :data:`KINDS`)."""
    crossed = np.abs(t) >= critical
    crossed[:, -1] = True  # the last look ends every study
    look = crossed.argmax(1)
    t_stop = t[np.arange(len(t)), look]
    kind = np.where(look == t.shape[1] - 1, 2, np.where(t_stop > 0, 0, 1))
    return look, kind


def tail_many(
    theta: float, design: Design, draws: NullDraws, looks: np.ndarray, kinds: np.ndarray, u_obs: np.ndarray
) -> np.ndarray:
    """F(θ) of observed outcomes (their looks 0-based, :data:`KINDS` indices, standardised means):
    the share of simulated studies whose outcome is at least as extreme, stage-wise."""
    last = int(np.max(looks))
    t, u = draws.t(theta)[:, : last + 1], draws.u(theta)[:, : last + 1]
    critical, total = design.critical[: last + 1], len(t)
    out = np.zeros(len(looks))
    stopped = np.zeros(total, dtype=bool)
    up_before = down_before = 0.0
    for k in range(last + 1):
        up, down = ~stopped & (t[:, k] >= critical[k]), ~stopped & (t[:, k] <= -critical[k])
        groups = {0: u[up, k], 1: u[down, k], 2: u[~stopped, k]}
        for kind, values in groups.items():
            at = (looks == k) & (kinds == kind)
            if not at.any():
                continue
            if kind == 1:  # at least as extreme as a reverse stop: all but the lower ones
                below = np.searchsorted(np.sort(values), u_obs[at], side="left") / total
                out[at] = 1 - down_before - below
            else:
                above = (len(values) - np.searchsorted(np.sort(values), u_obs[at], side="left")) / total
                out[at] = up_before + above
        up_before += float(np.count_nonzero(up)) / total
        down_before += float(np.count_nonzero(down)) / total
        stopped |= up | down
    return out


def tail(theta: float, design: Design, draws: NullDraws, look: int, kind: int, u_obs: float) -> float:
    """F(θ) of one observed outcome (:func:`tail_many`)."""
    return float(tail_many(theta, design, draws, np.array([look]), np.array([kind]), np.array([u_obs]))[0])


def _solve(target: float, design: Design, draws: NullDraws, look: int, kind: int, u_obs: float) -> float:
    """θ with F(θ) = ``target`` (bisection: F is monotone in θ)."""
    scale = 1 / math.sqrt(design.stages[look])
    low, high = u_obs - 12 * scale, u_obs + 12 * scale
    for _ in range(40):
        mid = (low + high) / 2
        if tail(mid, design, draws, look, kind, u_obs) < target:
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
    ``final``: whether the stop is the study's last look (default: the design's last), whose
    outcomes are ordered by their mean alone, crossing or not."""
    draws = draws or NullDraws(design.stages[: look + 1])
    u_obs = (mean - bound) / sd
    t_obs = u_obs * math.sqrt(design.stages[look])
    if final if final is not None else look == len(design.stages) - 1:
        kind = 2
    elif abs(t_obs) >= design.critical[look]:
        kind = 0 if t_obs > 0 else 1
    else:
        raise ValueError(f"look {look + 1} is not the last and its t ({t_obs:.3f}) crosses no boundary: no stop")
    thetas = [_solve(q, design, draws, look, kind, u_obs) for q in (0.5, alpha / 2, 1 - alpha / 2)]
    p = tail(0.0, design, draws, look, kind, u_obs)
    estimate, low, high = (bound + theta * sd for theta in thetas)
    return {"estimate": estimate, "interval": [low, high], "p": p, "p_reverse": 1 - p, "look": look + 1}

"""What a reviewer asks of a study's verdicts beyond its registered rule, computed from its cells
(``ner-lightning study FILE --show``) and labelled post hoc on the page; none of it changes a
verdict:

* **estimates after the stop** — for each one-sided claim, at the look it stopped at (or the last):
  the repeated confidence interval of that look on the Δ scale, at the coverage the claim's
  registered per-direction α gives (1 − 2α_d); the stage-wise median-unbiased estimate of
  (Δ − b)/σ with its interval at the same coverage, and the stage-wise p of Δ ≤ b (b the margin),
  exact at the first look and simulated (with its SE) later (``sequential_inference``); beside the
  naive mean and t-interval;
* **the robust test's reach** — the exact one-sided Wilcoxon signed-rank p cannot fall below
  1 / 2ⁿ at n partitions; where that is above the look's level it could not have decided the claim.
  It is a descriptive second analysis with no boundaries of its own: its p is shown, not judged;
* **influence** — the partition whose removal moves the mean most, with the mean, SD and the
  claim's t and one-sided p (both directions, against the claim's bound) without it, and the range
  of the leave-one-out means;
* **the scorer** — per method, the predicted test spans that only the lenient scorer counts
  (lenient − strict predicted spans: spans that start with I- or change type inside), their share
  of the lenient ones and how many of them are correct (lenient − strict correct spans), from
  every judged cell's ``results.json``;
* **resumed cells** — the cells a claim read that resumed from a checkpoint.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from pathlib import Path

from scipy import stats

from ner_lightning.report.claim_spec import family, family_alpha, family_directions, grids_of
from ner_lightning.report.claims import claim_runs
from ner_lightning.report.runs import lookup, partition_label
from ner_lightning.report.sequential_inference import Design, NullDraws, adjusted

ONE_SIDED = (">", ">>")


def influence(deltas: dict[str, float], bound: float = 0.0) -> dict:
    """Leave-one-out: the partition whose removal moves the mean most, its Δ, the mean and SD
    without it, the paired t without it against ``bound`` and its one-sided p in the claim's
    direction and the reverse, and the range of the leave-one-out means."""
    if len(deltas) < 3:
        return {}
    values = list(deltas.values())
    mean = statistics.fmean(values)
    loo = {p: statistics.fmean([v for q, v in deltas.items() if q != p]) for p in deltas}
    worst = max(loo, key=lambda p: abs(loo[p] - mean))
    rest = [v for q, v in deltas.items() if q != worst]
    sd = statistics.stdev(rest)
    t = (loo[worst] - bound) / (sd / math.sqrt(len(rest))) if sd > 0 else math.nan
    return {
        "partition": worst,
        "delta": deltas[worst],
        "mean_without": loo[worst],
        "sd_without": sd,
        "t_without": t,
        "p_without": float(stats.t.sf(t, len(rest) - 1)),
        "p_reverse_without": float(stats.t.cdf(t, len(rest) - 1)),
        "loo_range": [min(loo.values()), max(loo.values())],
    }


def bound_of(claim: dict) -> float:
    """b of the claim's test: its margin for ``>>``, else 0."""
    return float(claim.get("margin") or 0.0) if claim["relation"] == ">>" else 0.0


def direction_alpha(plan: dict, claims: list[dict], claim: dict) -> float:
    """The claim's registered α per direction: its family's α over the family's 2m directions."""
    name = family(claim)
    return family_alpha(plan, name) / family_directions(claims)[name]


def stopped_estimate(
    record: dict, cid: str, claim: dict, look: int, draws: dict, alpha_d: float = 0.025
) -> dict | None:
    """The stage-wise estimate of claim ``cid`` at its stopping ``look`` (0-based), its intervals
    at coverage 1 − 2 ``alpha_d``, or None for a two-sided (≈) claim or a fixed design."""
    plan = record["plan"]
    s = record["looks"][look]["claims"][cid]
    if not plan["sequential"] or claim["relation"] not in ONE_SIDED or not s["sd"] > 0:
        return None  # a fixed design, a two-sided claim, or differences without spread
    levels = tuple(record["looks"][j]["claims"][cid]["level"] for j in range(look + 1))
    stages = tuple(plan["stages"][: look + 1])
    if stages not in draws:
        draws[stages] = NullDraws(stages)
    final = look == len(plan["stages"]) - 1
    design = Design(stages, levels)
    got = adjusted(design, look, s["mean"], s["sd"], bound_of(claim), 2 * alpha_d, draws[stages], final)
    # t-exact boundaries give the coverage; z-nominal ones spend a little more than α (report.sequential)
    return {**got, "coverage": 1 - 2 * alpha_d, "coverage_exact": plan.get("boundaries") == "t_simulated"}


def scorer_shares(claim: dict, folder: Path, partitions: set[str]) -> dict[str, dict]:
    """Per value of the claim's key (method, baseline): strict and lenient predicted test spans
    summed over the judged partitions, and the share only the lenient scorer counts."""
    runs = [r for r in claim_runs({**claim, "runs": grids_of(claim)}, folder) if partition_label(r) in partitions]
    out: dict[str, dict] = {}
    for r in runs:
        value = str(lookup(r, claim["key"]))
        test = r.get("test") or {}
        if value not in (str(claim["method"]), str(claim["baseline"])) or "lenient" not in test:
            continue
        sums = out.setdefault(value, {"strict": 0, "lenient": 0, "strict_correct": 0, "lenient_correct": 0})
        sums["strict"] += int(test["micro"]["predicted"])
        sums["lenient"] += int(test["lenient"]["micro"]["predicted"])
        sums["strict_correct"] += int(test["micro"]["correct"])
        sums["lenient_correct"] += int(test["lenient"]["micro"]["correct"])
    for sums in out.values():
        only = sums["lenient"] - sums["strict"]
        sums["lenient_only"] = only
        sums["share"] = only / sums["lenient"] if sums["lenient"] else math.nan
        sums["lenient_only_correct"] = (sums["lenient_correct"] - sums["strict_correct"]) / only if only else math.nan
    return out


def diagnose(
    record: dict, claims: list[dict], folder: Path, partitions_at: Callable[[int], list[int]]
) -> dict[str, dict]:
    """Each judged claim's post-hoc diagnostics (module docstring), by claim id;
    ``partitions_at(n)``: the partitions a look of n judges."""
    by_id = {str(c["id"]): c for c in claims}
    draws: dict = {}
    out = {}
    for cid, verdict in record["verdicts"].items():
        look = verdict["look"] - 1
        s, claim = record["looks"][look]["claims"][cid], by_id[cid]
        level = s.get("level")
        partitions = {str(p) for p in partitions_at(verdict["partitions"])}
        alpha_d = direction_alpha(record["plan"], claims, claim)
        out[cid] = {
            "look": verdict["look"],
            "n": s["n"],
            "naive": {"mean": s["mean"], "interval": s.get("t_interval")},
            "adjusted": stopped_estimate(record, cid, claim, look, draws, alpha_d),
            "alpha_d": alpha_d,
            "level": level,
            "p": s.get("p"),
            "p_reverse": s.get("p_reverse"),
            "wilcoxon": {
                "min_p": 0.5 ** s["n"],
                "level": level,
                "can_reach": level is None or 0.5 ** s["n"] < level,
                "p": (s.get("robust") or {}).get("p"),
            },
            "influence": influence(s.get("deltas") or {}, bound_of(claim)),
            "scorer": scorer_shares(claim, folder, partitions),
            "resumed": s.get("resumed") or [],
        }
    return out

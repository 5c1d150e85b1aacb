"""What a reviewer asks of a study's verdicts beyond its registered rule, computed from its cells
(``ner-lightning study FILE --show``) and labelled post hoc on the page; none of it changes a
verdict:

* **estimates after the stop** — for each one-sided claim, at the look it stopped at (or the last),
  the stage-wise median-unbiased estimate, 95 % interval and p (``sequential_inference``) beside
  the naive mean and t-interval;
* **the robust test's reach** — the exact one-sided Wilcoxon signed-rank p cannot fall below
  1 / 2ⁿ at n partitions; where that is above the look's level it could not have decided the claim.
  It is a descriptive second analysis: its p-values are read against boundaries computed for the
  t statistic, not its own;
* **influence** — the leave-one-out means of each claim's Δ and the partition whose removal moves
  the mean most, with the SD without it;
* **the scorer** — per method, the predicted test spans that only the lenient scorer counts
  (lenient − strict predicted spans, over lenient: spans that start with I- or change type inside),
  from every judged cell's ``results.json``;
* **resumed cells** — the cells a claim read that resumed from a checkpoint.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from pathlib import Path

from ner_lightning.report.claim_spec import grids_of
from ner_lightning.report.claims import claim_runs
from ner_lightning.report.runs import lookup, partition_label
from ner_lightning.report.sequential_inference import Design, NullDraws, adjusted

ONE_SIDED = (">", ">>")


def influence(deltas: dict[str, float]) -> dict:
    """Leave-one-out: the partition whose removal moves the mean most, its Δ, the mean and SD
    without it, and the range of the leave-one-out means."""
    if len(deltas) < 3:
        return {}
    values = list(deltas.values())
    mean = statistics.fmean(values)
    loo = {p: statistics.fmean([v for q, v in deltas.items() if q != p]) for p in deltas}
    worst = max(loo, key=lambda p: abs(loo[p] - mean))
    rest = [v for q, v in deltas.items() if q != worst]
    return {
        "partition": worst,
        "delta": deltas[worst],
        "mean_without": loo[worst],
        "sd_without": statistics.stdev(rest),
        "loo_range": [min(loo.values()), max(loo.values())],
    }


def stopped_estimate(record: dict, cid: str, claim: dict, look: int, draws: dict) -> dict | None:
    """The stage-wise estimate of claim ``cid`` at its stopping ``look`` (0-based), or None for a
    two-sided (≈) claim or a fixed design."""
    plan = record["plan"]
    s = record["looks"][look]["claims"][cid]
    if not plan["sequential"] or claim["relation"] not in ONE_SIDED or not s["sd"] > 0:
        return None  # a fixed design, a two-sided claim, or differences without spread
    levels = tuple(record["looks"][j]["claims"][cid]["level"] for j in range(look + 1))
    stages = tuple(plan["stages"][: look + 1])
    if stages not in draws:
        draws[stages] = NullDraws(stages)
    bound = float(claim.get("margin") or 0.0) if claim["relation"] == ">>" else 0.0
    final = look == len(plan["stages"]) - 1
    return adjusted(Design(stages, levels), look, s["mean"], s["sd"], bound, 0.05, draws[stages], final)


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
        sums = out.setdefault(value, {"strict": 0, "lenient": 0})
        sums["strict"] += int(test["micro"]["predicted"])
        sums["lenient"] += int(test["lenient"]["micro"]["predicted"])
    for sums in out.values():
        sums["share"] = 1 - sums["strict"] / sums["lenient"] if sums["lenient"] else math.nan
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
        out[cid] = {
            "look": verdict["look"],
            "n": s["n"],
            "naive": {"mean": s["mean"], "interval": s.get("t_interval")},
            "adjusted": stopped_estimate(record, cid, claim, look, draws),
            "wilcoxon": {
                "min_p": 0.5 ** s["n"],
                "level": level,
                "can_reach": level is None or 0.5 ** s["n"] < level,
                "p": (s.get("robust") or {}).get("p"),
            },
            "influence": influence(s.get("deltas") or {}),
            "scorer": scorer_shares(claim, folder, partitions),
            "resumed": s.get("resumed") or [],
        }
    return out

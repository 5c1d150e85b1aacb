"""The verdict rule of a claims file (``ner_lightning.report.claim_spec``): each claim judged
from its runs, the same way for every claim.

Relations: ``>`` — method better than baseline, H0 Δ ≤ 0, one-sided paired t-test; ``>>`` —
better by more than ``margin``, H0 Δ ≤ margin; ``≈`` — equivalent within ±``margin``, TOST,
H0 |Δ| ≥ margin (p = the larger one-sided p). With ``interaction`` Δ is a difference of
differences; with ``average_over`` the mean of the per-value differences of a partition; with
``select_on_dev`` runs that differ only in that key are first reduced, per partition, to the one
with the best dev score (test is never read).

Δ is method − baseline per pair (partition, initialisation seed), paired on the same training
sentences and initialisation; with several seeds per partition Δ per partition is the mean over
its seeds, and the partitions are the replicates (n). The rule (:func:`symmetric_verdicts`): the
claim and its reverse (Δ on the other side of 0, of the ≫ margin, outside the ≈ band:
``report.stats.p_against``) are both tested one-sided and Holm-adjusted together within the claim's
**family** (its ``family`` key, by default its paper):

* **replicated** — the claim's adjusted p < α;
* **not replicated** — its reverse's adjusted p < α;
* **smaller than reported** — neither, and the t-interval of mean Δ at the level the rule spends
  on each direction (Bonferroni's α / 2m: :func:`interval_at`) lies wholly below the paper's own
  effect (``paper_delta``, a number the paper reports for this setting);
* **underpowered** — neither, that interval still holds the paper's Δ, and that Δ lies beyond the
  claim's bound (``paper_distance``) by less than the effect this design detects with 80 % power
  (``report.stats.detectable_effect``); both labels say whether the interval excludes 0;
* **inconclusive (no comparable paper Δ)** — neither, and the claim's paper Δ is not a number
  reported for its setting (``claim_spec.comparable_delta``);
* **inconclusive** — neither otherwise;
* **vacuous** — the claim's ``vacuous`` key says why the comparison cannot test the statement
  (it is left out of its family's adjustment).

Holm over the family's 2m directional nulls bounds the chance of *any* false verdict of either
kind in a family by α. Rows whose runs differ in a setting other than ``key``, the replicates and
the claim's ``pool`` keys are refused. The table of a file: ``report/claims_table.py``; a study
of a file's grids: ``ner_lightning.study``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ner_lightning import run_store
from ner_lightning.report.checks import duplicates, pooled_differences, unpaired_rows
from ner_lightning.report.claim_spec import family, load_claims, paper_distance, scored_metric
from ner_lightning.report.runs import group, labels, load_runs, partition_label, select_on_dev
from ner_lightning.report.stats import (
    bootstrap_mean,
    detectable_effect,
    holm,
    p_against,
    t_interval,
    t_test,
    wilcoxon_directions,
)
from ner_lightning.report.tables import paired_by_partition


@dataclass
class Judged:
    claim: dict
    n: int  # partitions
    mean: float
    t_low: float
    t_high: float
    boot_low: float
    boot_high: float
    p: float  # one-sided (or TOST) p of the claim's hypothesis
    p_reverse: float  # p of its reverse (``report.stats.p_against``)
    sd: float  # standard deviation of the paired differences
    resumed: list[str] = field(default_factory=list)  # folders of resumed runs, relative to the claims file
    seeds: tuple[int, int] = (1, 1)  # fewest and most initialisation seeds of a partition
    p_holm: float = math.nan  # the claim's p, Holm-adjusted with its family's 2m directions
    verdict: str = ""
    detectable: float = math.nan  # :func:`detectable_effect` at the family's strictest level
    deltas: tuple[float, ...] = ()  # Δ of each partition (the replicates)
    labels: tuple[str, ...] = ()  # the partition of each Δ


def symmetric_adjusted(p_for: list[float], p_reverse: list[float], families: list[str]) -> tuple[list, list]:
    """Holm within each family over its 2m one-sided p-values (each claim's and its reverse's):
    the adjusted p of every claim and of its reverse."""
    adj_for, adj_reverse = [math.nan] * len(p_for), [math.nan] * len(p_for)
    for name in dict.fromkeys(families):
        members = [i for i, f in enumerate(families) if f == name]
        adjusted = holm([p for i in members for p in (p_for[i], p_reverse[i])])
        for k, i in enumerate(members):
            adj_for[i], adj_reverse[i] = adjusted[2 * k], adjusted[2 * k + 1]
    return adj_for, adj_reverse


def symmetric_verdicts(p_for: list[float], p_reverse: list[float], families: list[str], alpha: float) -> list[str]:
    """Both directions of every claim tested and adjusted alike (:func:`symmetric_adjusted`):
    *replicated* when the claim's adjusted p < α, *not replicated* when the reverse's is, else
    *inconclusive*. Holm controls the family-wise error over all 2m directional nulls, so the
    chance of any false verdict of either kind in a family is at most α (``tests/test_claims.py``
    simulates it)."""
    adj_for, adj_reverse = symmetric_adjusted(p_for, p_reverse, families)
    return [verdict(a, r, alpha) for a, r in zip(adj_for, adj_reverse, strict=True)]


def verdict(p_claim: float, p_reverse: float, level: float, undecided: str = "") -> str:
    """The three-decision rule on a claim's and its reverse's (adjusted) p at ``level``:
    *replicated*, *not replicated*, else ``undecided`` (:func:`undecided_verdict`) or *inconclusive*."""
    if p_claim < level:
        return "replicated"
    if p_reverse < level:
        return "not replicated"
    return undecided or "inconclusive"


def interval_at(j: Judged, level: float) -> tuple[float, float]:
    """The paired t-interval of mean Δ that matches one-sided tests at ``level`` (a look's level,
    Bonferroni's α / 2m): each side has error ``level``."""
    return t_interval(j.mean, j.sd, j.n, level)


def undecided_verdict(claim: dict, low: float, high: float, detectable: float) -> str:
    """What an undecided claim's t-interval at the level its design spends (:func:`interval_at`)
    says of the paper's own Δ: *smaller than reported* when it lies wholly below it (a ``>`` or
    ``>>`` claim); *underpowered* when it holds it and the paper's Δ lies beyond the claim's bound
    by less than ``detectable``; each says whether the interval excludes 0. A Δ that is not a
    number the paper reports for the claim's setting (``claim_spec.comparable_delta``) gives
    "inconclusive (no comparable paper Δ)"; no Δ at all, ""."""
    distance = paper_distance(claim)
    if distance is None:
        return "inconclusive (no comparable paper Δ)" if claim.get("paper_delta") is not None else ""
    delta = float(claim["paper_delta"])
    zero = "0 excluded" if low > 0 or high < 0 else "the opposite direction not excluded"
    if claim["relation"] != "≈" and high < delta:
        return f"smaller than reported; {zero}"
    return f"underpowered; {zero}" if low <= delta <= high and 0 < distance < detectable else ""


def wilcoxon_p(j: Judged) -> tuple[float, float]:
    """The robust second analysis a study may register (``stats.wilcoxon_directions``) of a claim."""
    return wilcoxon_directions(j.deltas, j.claim["relation"], float(j.claim.get("margin") or 0.0))


def verdict_kind(label: str) -> str:
    """A verdict label without its qualifier: "smaller than reported; 0 excluded" -> "smaller than reported"."""
    return label.split(";")[0].split(" (")[0]


def claim_runs(spec: dict, root: Path, loaded: dict | None = None) -> list[dict]:
    """The runs a claim or figure reads: its ``runs`` glob patterns under ``root``, filtered by
    ``where``. ``loaded``: folders already read (one table's claims share their sweeps)."""
    if "runs" not in spec:
        raise SystemExit(
            f"claim {spec.get('id')}: it names grid {spec.get('grid')!r}, not runs — a study file: "
            "judge it with `ner-lightning study FILE`"
        )
    folders = [match for pattern in spec["runs"] for match in run_store.glob(root, pattern)]
    if not folders:
        raise SystemExit(f"{spec.get('id', spec.get('name'))}: no folder matches {spec['runs']} under {root}")
    loaded = {} if loaded is None else loaded
    if tuple(folders) not in loaded:
        loaded[tuple(folders)] = load_runs(folders)[0]
    runs = loaded[tuple(folders)]
    for key, value in (spec.get("where") or {}).items():
        runs = [r for r, v in zip(runs, labels(runs, key), strict=True) if v == str(value)]
    return runs


def _deltas(claim: dict, runs: list[dict], pool: list[str]) -> tuple[dict, list[dict]]:
    """method − baseline per pair (partition label, init seed) and the runs of both rows."""
    key = claim["key"]
    rows = group(runs, [key])
    missing = [v for v in (claim["method"], claim["baseline"]) if (str(v),) not in rows]
    if missing:
        raise SystemExit(
            f"claim {claim['id']}: no runs with {key}={', '.join(map(str, missing))} after "
            f"{claim.get('where') or 'no filter'}; rows: {', '.join(k[0] for k in rows)}"
        )
    method, base = (str(claim["method"]),), (str(claim["baseline"]),)
    pair = rows[method] + rows[base]
    problems = (
        pooled_differences(pair, [key], pool)
        + duplicates(pair, [key])
        + unpaired_rows(rows, [(method, base)], [key], pool)
    )
    if problems:
        raise SystemExit(f"claim {claim['id']}: " + "; ".join(problems))
    pairs = paired_by_partition(rows[method], rows[base], claim["metric"])
    return {k: a - b for k, (a, b) in pairs.items()}, pair


def _deltas_per(
    claim: dict, runs: list[dict], pool: list[str], key: str, values: tuple = ()
) -> dict[str, tuple[dict, list[dict]]]:
    """:func:`_deltas` for each value of ``key`` separately (those in ``values``, or every one)."""
    split = labels(runs, key)
    return {
        v: _deltas(claim, [r for r, s in zip(runs, split, strict=True) if s == v], pool + [key])
        for v in (tuple(map(str, values)) or sorted(set(split)))
    }


def judge(
    claim: dict,
    alpha: float,
    resamples: int,
    seed: int,
    root: Path,
    drop_resumed: bool = False,
    loaded: dict | None = None,
    partitions: Collection[str] | None = None,
) -> Judged:
    """Δ of one claim from its runs (glob patterns relative to the claims file's folder). With
    ``interaction: {key, with, without}``, Δ is a difference of differences per partition:
    (method − baseline at key=with) − (method − baseline at key=without); with ``average_over``,
    the mean over that key's values of method − baseline per partition. Δ of a partition is the
    mean over its seeds. ``partitions``: only the runs of these partition labels (a study's look)."""
    runs = claim_runs(claim, root, loaded)
    if partitions is not None:
        runs = [r for r in runs if partition_label(r) in partitions]
    if drop_resumed:  # a sensitivity check: the partitions of resumed runs left out
        runs = [r for r in runs if not r.get("resumed_from")]
    pool = list(claim.get("pool") or [])
    inter, average = claim.get("interaction"), claim.get("average_over")
    if claim.get("select_on_dev"):
        splits = [k for k in ((inter or {}).get("key"), average) if k]
        runs, _ = select_on_dev(runs, claim["select_on_dev"], [claim["key"], *splits])
        pool.append(claim["select_on_dev"])
    if inter:
        per = _deltas_per(claim, runs, pool, inter["key"], (inter["with"], inter["without"]))
        d_with, d_without = (per[str(inter[side])][0] for side in ("with", "without"))
        deltas = {k: d_with[k] - d_without[k] for k in sorted(set(d_with) & set(d_without))}
    elif average:
        per = _deltas_per(claim, runs, pool, average)
        shared = sorted(set.intersection(*(set(d) for d, _ in per.values())))
        deltas = {k: float(np.mean([d[k] for d, _ in per.values()])) for k in shared}
    else:
        per = {"": _deltas(claim, runs, pool)}
        deltas = per[""][0]
    used = [r for _, rs in per.values() for r in rs]
    by_partition: dict[str, list[float]] = {}
    for (part, _), value in deltas.items():
        by_partition.setdefault(part, []).append(value)
    deltas = {part: float(np.mean(values)) for part, values in by_partition.items()}
    seeds = [len(values) for values in by_partition.values()] or [0]
    if len(deltas) < 2:
        raise SystemExit(f"claim {claim['id']}: {len(deltas)} paired partitions; a verdict needs at least 2")
    d = np.asarray(list(deltas.values()), dtype=float)
    margin = float(claim.get("margin") or 0.0)
    p, low, high = t_test(d, claim["relation"], margin, alpha)
    boot = bootstrap_mean(d, resamples, seed, 1 - alpha)
    resumed = sorted(os.path.relpath(r["_dir"], root) for r in used if r.get("resumed_from"))
    mean, sd, span = float(np.mean(d)), float(np.std(d, ddof=1)), (min(seeds), max(seeds))
    reverse = p_against(d, claim["relation"], margin)
    replicates = (tuple(d.tolist()), tuple(deltas))
    judged = Judged(claim, len(d), mean, low, high, boot.low, boot.high, p, reverse, sd, resumed, span)
    return dataclasses.replace(judged, deltas=replicates[0], labels=replicates[1])


def decide(judged: list[Judged], alpha: float, one_family: bool = False) -> None:
    """Each claim's adjusted p, detectable Δ and verdict by the rule of this module's docstring,
    within its family (``one_family``: every claim of the file in one family)."""
    active = [j for j in judged if not j.claim.get("vacuous")]
    families = ["all claims" if one_family else family(j.claim) for j in active]
    adj_for, adj_reverse = symmetric_adjusted([j.p for j in active], [j.p_reverse for j in active], families)
    sizes = Counter(families)
    for j, a, r, name in zip(active, adj_for, adj_reverse, families, strict=True):
        j.p_holm, j.detectable = a, detectable_effect(j.sd, j.n, alpha, 2 * sizes[name])
        j.verdict = verdict(
            a, r, alpha, undecided_verdict(j.claim, *interval_at(j, alpha / (2 * sizes[name])), j.detectable)
        )
    for j in judged:
        if j.claim.get("vacuous"):
            j.verdict = "vacuous"


def judge_all(
    path: Path, scoring: str = "paper", drop_resumed: bool = False, loaded: dict | None = None, one_family: bool = False
) -> tuple[dict, list[Judged]]:
    """Every claim of the file judged (:func:`decide`). ``scoring``: ``paper`` reads each claim's
    metric under its paper's scorer (:func:`scorer`), ``other`` under the other one, ``strict``
    / ``lenient`` every claim so; ``drop_resumed`` leaves out the runs that resumed from a
    checkpoint (and so their partitions); ``loaded``: see :func:`claim_runs`."""
    loaded = {} if loaded is None else loaded
    settings, claims = load_claims(path)
    claims = [{**c, "metric": scored_metric(c, settings, scoring)} for c in claims]
    judged = [
        judge(c, settings["alpha"], settings["resamples"], settings["seed"], Path(path).parent, drop_resumed, loaded)
        for c in claims
    ]
    decide(judged, settings["alpha"], one_family)
    return settings, judged

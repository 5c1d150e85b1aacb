"""Claims as data: a YAML file of claims, each judged by one written rule
(``python -m ner_lightning.report --claims FILE``).

A claim names the runs it reads (sweep folders, their exports or cell folders: glob patterns
relative to the claims file), a filter (``where``), the key
whose two values it compares (``key``: ``method`` against ``baseline``), a metric and a relation:

* ``>``  — method better than baseline: H0 Δ ≤ 0, one-sided paired t-test;
* ``>>`` — better by more than ``margin``: H0 Δ ≤ margin;
* ``≈``  — equivalent within ±``margin``: TOST, H0 |Δ| ≥ margin (p = the larger one-sided p).

With ``interaction: {key, with, without}`` Δ is a difference of differences (does ``key`` change
method − baseline?), e.g. AUC-2T − CE with sCRD resampling minus without it. With
``average_over: KEY`` Δ per partition is the mean of the per-``KEY`` differences on the partitions
every value shares (a macro average, e.g. over main corpora as in MUNCHABLES' Table 2). With
``select_on_dev: KEY`` runs that differ only in ``KEY`` are first reduced, per partition, to the one
with the best dev score (SingleAux's auxiliary corpus, MUNCHABLES §4.1; test is never read).

Δ is method − baseline per pair (partition, initialisation seed), paired on the same training
sentences and initialisation; with several seeds per partition (``init_seed=42,43,44``) Δ per
partition is the mean over its seeds, and the partitions are the replicates (n; the seeds only
make each partition's Δ less noisy). The rule (:func:`symmetric_verdicts`): the claim and its
reverse (Δ on the other side of 0, of the ≫ margin, outside the ≈ band: :func:`p_against`) are
both tested one-sided and Holm-adjusted together within the claim's **family** (its ``family``
key, by default its paper):

* **replicated** — the claim's adjusted p < α;
* **not replicated** — its reverse's adjusted p < α;
* **smaller than reported** — neither, and the two-sided (1 − α) t-interval of mean Δ lies
  wholly below the paper's own effect (``paper_delta``: the paper's method − baseline);
* **underpowered** — neither, the interval still holds the paper's Δ, and that Δ lies beyond the
  claim's bound (:func:`paper_distance`) by less than the effect this design detects with 80 %
  power (:func:`detectable_effect`);
* **inconclusive** — neither otherwise;
* **vacuous** — the claim's ``vacuous`` key says why the comparison cannot test the statement
  (it is left out of its family's adjustment).

Holm over the family's 2m directional nulls bounds the chance of *any* false verdict of either
kind in a family by α. Each claim is read under its paper's scorer (``papers: {NAME: {scorer:
strict | lenient}}``; strict spans where a paper says nothing); the table adds the verdict under
the other scorer and under one family of every claim of the file as sensitivity columns, and
the number of partitions (:func:`partitions_needed`) at which the paper's own effect would be
found with 80 % power.

Under the table, the note on resumed runs says which verdicts change when those runs (and their
partitions) are left out, and the note on the earlier rule (Holm over the file for
"replicated", an unadjusted interval for "not replicated": :func:`earlier_verdict`) which
verdicts this rule changes.

The percentile bootstrap interval is printed as a second column; cells that resumed from a
checkpoint are counted and listed (they end as uninterrupted ones would; the list lets a reader
check). Rows whose runs differ in a setting other than ``key``, the replicates and the claim's
``pool`` keys (e.g. ``head_lr`` when each method was tuned on its own) are refused.

A claims file may also name the grids its claims need (``grids`` and a claim's ``grid`` instead
of ``runs``): ``ner-lightning study FILE`` then runs them and judges (``ner_lightning.study``).
"""
from __future__ import annotations

import copy
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection

import numpy as np
import yaml
from scipy import optimize, stats

from ner_lightning import run_store
from ner_lightning.report.checks import duplicates, pooled_differences, unpaired_rows
from ner_lightning.report.runs import group, labels, load_runs, partition_label, select_on_dev
from ner_lightning.report.stats import bootstrap_mean, holm
from ner_lightning.report.tables import paired_by_partition

RELATIONS = (">", ">>", "≈")
FIELDS = ("id", "paper", "source", "statement", "relation", "runs", "key", "method", "baseline", "metric")


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
    p_reverse: float  # p of its reverse (:func:`p_against`)
    sd: float  # standard deviation of the paired differences
    resumed: list[str] = field(default_factory=list)  # folders of resumed runs, relative to the claims file
    seeds: tuple[int, int] = (1, 1)  # fewest and most initialisation seeds of a partition
    p_holm: float = math.nan  # the claim's p, Holm-adjusted with its family's 2m directions
    verdict: str = ""
    detectable: float = math.nan  # :func:`detectable_effect` at the family's strictest level


SCORERS = ("strict", "lenient")


def load_claims(path: Path) -> tuple[dict, list[dict]]:
    """The file's settings (``alpha``, ``resamples``, ``seed``, ``names``, ``figures``, ``papers``,
    ``grids``, ``study``) and its claims, checked."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    claims = data.get("claims") or []
    if not claims:
        raise SystemExit(f"{path}: no claims (a top-level `claims:` list)")
    grids = data.get("grids") or {}
    papers = {str(k): dict(v or {}) for k, v in (data.get("papers") or {}).items()}
    for name, paper in papers.items():
        if paper.get("scorer", "strict") not in SCORERS:
            raise SystemExit(f"{path}: papers.{name}.scorer {paper['scorer']!r} is not one of {SCORERS}")
    for i, c in enumerate(claims):
        missing = [f for f in FIELDS if f not in c and not (f == "runs" and "grid" in c)]
        if missing:
            raise SystemExit(f"{path}: claim {c.get('id', i + 1)} lacks {', '.join(missing)}")
        for grid in grids_of(c):
            if grid not in grids:
                raise SystemExit(f"{path}: claim {c['id']}: grid {grid!r} is not one of the file's grids "
                                 f"({', '.join(grids) or 'none: add a top-level `grids:` map'})")
        if c["relation"] not in RELATIONS:
            raise SystemExit(f"{path}: claim {c['id']}: relation {c['relation']!r} is not one of {RELATIONS}")
        if c["relation"] != ">" and not c.get("margin"):
            raise SystemExit(f"{path}: claim {c['id']}: relation {c['relation']} needs a positive margin")
    settings = {"alpha": float(data.get("alpha", 0.05)), "resamples": int(data.get("resamples", 10_000)),
                "seed": int(data.get("seed", 0)), "names": {str(k): str(v) for k, v in (data.get("names") or {}).items()},
                "figures": list(data.get("figures") or []), "papers": papers, "grids": grids,
                "study": dict(data.get("study") or {})}
    return settings, claims


def grids_of(claim: dict) -> list[str]:
    """The grids a study's claim reads: its ``grid``, one name or a list (rows that need their own
    overrides, e.g. a tuned λ for one loss only)."""
    grid = claim.get("grid")
    return [] if grid is None else [str(g) for g in grid] if isinstance(grid, list) else [str(grid)]


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
    n, mean = len(d), float(np.mean(d))
    half = float(stats.t.ppf(1 - alpha / 2, n - 1)) * float(np.std(d, ddof=1) / math.sqrt(n))
    above, below = _tails(d)
    p = {">": lambda: above(0.0), ">>": lambda: above(margin),
         "≈": lambda: max(above(-margin), below(margin))}[relation]()
    return p, mean - half, mean + half


def p_against(d: np.ndarray, relation: str, margin: float) -> float:
    """The p-value of the claim's reverse, i.e. of H0 "the claim may hold" against Δ on the
    other side: Δ < 0 (``>``), Δ < margin (``>>``), |Δ| > margin (``≈``: the two directions,
    Bonferroni)."""
    above, below = _tails(d)
    return {">": lambda: below(0.0), ">>": lambda: below(margin),
            "≈": lambda: min(1.0, 2 * min(above(margin), below(-margin)))}[relation]()


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


def paper_distance(claim: dict) -> float | None:
    """How far the paper's own Δ (``paper_delta``) lies beyond the claim's bound: Δ (``>``),
    Δ − margin (``>>``), margin − |Δ| (``≈``); None when the claim states no paper Δ."""
    if claim.get("paper_delta") is None:
        return None
    delta, margin = float(claim["paper_delta"]), float(claim.get("margin") or 0.0)
    return {">": delta, ">>": delta - margin, "≈": margin - abs(delta)}[claim["relation"]]


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
    return [verdict(a, r, alpha) for a, r in zip(adj_for, adj_reverse)]


def verdict(p_claim: float, p_reverse: float, level: float, undecided: str = "") -> str:
    """The three-decision rule on a claim's and its reverse's (adjusted) p at ``level``:
    *replicated*, *not replicated*, else ``undecided`` (:func:`undecided_verdict`) or *inconclusive*."""
    if p_claim < level:
        return "replicated"
    if p_reverse < level:
        return "not replicated"
    return undecided or "inconclusive"


def undecided_verdict(claim: dict, t_low: float, t_high: float, detectable: float) -> str:
    """What an undecided claim's (1 − α) t-interval says of the paper's own Δ: *smaller than
    reported* when it lies wholly below it (a ``>`` or ``>>`` claim); *underpowered* when it holds
    it and the paper's Δ lies beyond the claim's bound by less than ``detectable``; else ""."""
    distance = paper_distance(claim)
    if distance is None:
        return ""
    delta = float(claim["paper_delta"])
    if claim["relation"] != "≈" and t_high < delta:
        return "smaller than reported"
    return "underpowered" if t_low <= delta <= t_high and 0 < distance < detectable else ""


def _runs(spec: dict, root: Path, loaded: dict | None = None) -> list[dict]:
    """The runs a claim or figure reads: its ``runs`` glob patterns under ``root``, filtered by
    ``where``. ``loaded``: folders already read (one table's claims share their sweeps)."""
    if "runs" not in spec:
        raise SystemExit(f"claim {spec.get('id')}: it names grid {spec.get('grid')!r}, not runs — a study file: "
                         "judge it with `ner-lightning study FILE`")
    folders = [match for pattern in spec["runs"] for match in run_store.glob(root, pattern)]
    if not folders:
        raise SystemExit(f"{spec.get('id', spec.get('name'))}: no folder matches {spec['runs']} under {root}")
    loaded = {} if loaded is None else loaded
    if tuple(folders) not in loaded:
        loaded[tuple(folders)] = load_runs(folders)[0]
    runs = loaded[tuple(folders)]
    for key, value in (spec.get("where") or {}).items():
        runs = [r for r, v in zip(runs, labels(runs, key)) if v == str(value)]
    return runs


def _deltas(claim: dict, runs: list[dict], pool: list[str]) -> tuple[dict, list[dict]]:
    """method − baseline per pair (partition label, init seed) and the runs of both rows."""
    key = claim["key"]
    rows = group(runs, [key])
    missing = [v for v in (claim["method"], claim["baseline"]) if (str(v),) not in rows]
    if missing:
        raise SystemExit(f"claim {claim['id']}: no runs with {key}={', '.join(map(str, missing))} after "
                         f"{claim.get('where') or 'no filter'}; rows: {', '.join(k[0] for k in rows)}")
    method, base = (str(claim["method"]),), (str(claim["baseline"]),)
    pair = rows[method] + rows[base]
    problems = (duplicates(pair, [key]) + pooled_differences(pair, [key], pool)
                + unpaired_rows(rows, [(method, base)], [key], pool))
    if problems:
        raise SystemExit(f"claim {claim['id']}: " + "; ".join(problems))
    pairs = paired_by_partition(rows[method], rows[base], claim["metric"])
    return {k: a - b for k, (a, b) in pairs.items()}, pair


def _deltas_per(claim: dict, runs: list[dict], pool: list[str], key: str,
                values: tuple = ()) -> dict[str, tuple[dict, list[dict]]]:
    """:func:`_deltas` for each value of ``key`` separately (those in ``values``, or every one)."""
    split = labels(runs, key)
    return {v: _deltas(claim, [r for r, s in zip(runs, split) if s == v], pool + [key])
            for v in (tuple(map(str, values)) or sorted(set(split)))}


def judge(claim: dict, alpha: float, resamples: int, seed: int, root: Path, drop_resumed: bool = False,
          loaded: dict | None = None, partitions: Collection[str] | None = None) -> Judged:
    """Δ of one claim from its runs (glob patterns relative to the claims file's folder). With
    ``interaction: {key, with, without}``, Δ is a difference of differences per partition:
    (method − baseline at key=with) − (method − baseline at key=without); with ``average_over``,
    the mean over that key's values of method − baseline per partition. Δ of a partition is the
    mean over its seeds. ``partitions``: only the runs of these partition labels (a study's look)."""
    runs = _runs(claim, root, loaded)
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
    return Judged(claim, len(d), float(np.mean(d)), low, high, boot.low, boot.high, p,
                  p_against(d, claim["relation"], margin), float(np.std(d, ddof=1)), resumed, (min(seeds), max(seeds)))


def earlier_verdict(j: Judged, p_file: float, alpha: float) -> str:
    """The rule this module used before the symmetric one, kept to say which verdicts changed:
    *replicated* when the claim's p Holm-adjusted over every claim of the file (``p_file``) < α,
    *not replicated* when the unadjusted two-sided (1 − α) t-interval lies wholly on the other
    side of the bound, *inconclusive* otherwise."""
    relation, margin = j.claim["relation"], float(j.claim.get("margin") or 0.0)
    if p_file < alpha:
        return "replicated"
    if relation == ">" and j.t_high <= 0 or relation == ">>" and j.t_high <= margin:
        return "not replicated"
    if relation == "≈" and (j.t_low >= margin or j.t_high <= -margin):
        return "not replicated"
    return "inconclusive"


def lenient(metric: str) -> str:
    """The same score under lenient (conlleval) span rules: ``test.micro.f1`` -> ``test.lenient.micro.f1``."""
    split, _, rest = metric.partition(".")
    return metric if rest.startswith("lenient.") else f"{split}.lenient.{rest}"


def strict(metric: str) -> str:
    """The same score under strict span rules: ``test.lenient.micro.f1`` -> ``test.micro.f1``."""
    split, _, rest = metric.partition(".")
    return f"{split}.{rest.removeprefix('lenient.')}"


def scorer(claim: dict, settings: dict) -> str:
    """The span scorer of the claim's paper (``papers: {NAME: {scorer: ...}}``; strict if unstated)."""
    return str(settings["papers"].get(claim["paper"], {}).get("scorer", "strict"))


def decide(judged: list[Judged], alpha: float, one_family: bool = False) -> None:
    """Each claim's adjusted p, detectable Δ and verdict by the rule of this module's docstring,
    within its family (``one_family``: every claim of the file in one family)."""
    active = [j for j in judged if not j.claim.get("vacuous")]
    families = ["all claims" if one_family else family(j.claim) for j in active]
    adj_for, adj_reverse = symmetric_adjusted([j.p for j in active], [j.p_reverse for j in active], families)
    sizes = Counter(families)
    for j, a, r, name in zip(active, adj_for, adj_reverse, families):
        j.p_holm, j.detectable = a, detectable_effect(j.sd, j.n, alpha, 2 * sizes[name])
        j.verdict = verdict(a, r, alpha, undecided_verdict(j.claim, j.t_low, j.t_high, j.detectable))
    for j in judged:
        if j.claim.get("vacuous"):
            j.verdict = "vacuous"


def judge_all(path: Path, scoring: str = "paper", drop_resumed: bool = False, loaded: dict | None = None,
              one_family: bool = False) -> tuple[dict, list[Judged]]:
    """Every claim of the file judged (:func:`decide`). ``scoring``: ``paper`` reads each claim's
    metric under its paper's scorer (:func:`scorer`), ``other`` under the other one, ``strict``
    / ``lenient`` every claim so; ``drop_resumed`` leaves out the runs that resumed from a
    checkpoint (and so their partitions); ``loaded``: see :func:`_runs`."""
    loaded = {} if loaded is None else loaded
    settings, claims = load_claims(path)
    chosen = {"paper": lambda c: scorer(c, settings), "strict": lambda c: "strict", "lenient": lambda c: "lenient",
              "other": lambda c: SCORERS[1 - SCORERS.index(scorer(c, settings))]}[scoring]
    claims = [{**c, "metric": (lenient if chosen(c) == "lenient" else strict)(c["metric"])} for c in claims]
    judged = [judge(c, settings["alpha"], settings["resamples"], settings["seed"], Path(path).parent, drop_resumed,
                    loaded) for c in claims]
    decide(judged, settings["alpha"], one_family)
    return settings, judged


def family(claim: dict) -> str:
    """The claim's family for :func:`symmetric_verdicts`: its ``family`` key, else its paper."""
    return str(claim.get("family") or claim["paper"])


def _relation(claim: dict) -> str:
    margin = claim.get("margin")
    return {">": ">", ">>": f"> by {margin}", "≈": f"≈ ±{margin}"}[claim["relation"]]


def _difference(claim: dict, name) -> str:
    d = f"{name(claim['method'])} − {name(claim['baseline'])}"
    inter = claim.get("interaction")
    if inter:
        d = f"({d}) at {name(inter['with'])} − at {name(inter['without'])}"
    return f"{d} ({strict(claim['metric'])}, {_relation(claim)})"


def _replicates(j: Judged) -> str:
    low, high = j.seeds
    return str(j.n) if high == 1 else f"{j.n} × {low}" if low == high else f"{j.n} × {low}–{high}"


def _needed(j: Judged, alpha: float, tests: int) -> str:
    distance = paper_distance(j.claim)
    if distance is None:
        return "—"
    if distance <= 0:
        return "none (the paper's Δ is not beyond the bound)"
    n = partitions_needed(distance, j.sd, alpha, tests)
    return str(n) if n is not None else "> 100000"


def claims_table(path: Path, fmt: str = "md", plots: Path | None = None, only: Collection[str] | None = None) -> str:
    """The claims table, every verdict computed by the rule in this module's docstring (and with
    ``plots``, the forest plot of every claim's Δ there). With ``only``, just the rows of those
    claims (:func:`selected`), judged with their whole families, without the notes."""
    head, rows, note = _table(path, plots)
    return _render(head, rows, note, fmt, only)


def selected(claim_id: str, only: Collection[str]) -> bool:
    """Whether ``--only`` names a claim: by its id's first word ("6a" for "6a (20)") or that word's
    number ("6" for 6a, 6b and 6c)."""
    word = str(claim_id).split()[0]
    return word in only or word.rstrip("abcdefghijklmnopqrstuvwxyz") in only


BLOCK = re.compile(r"<!-- claims table: (?P<file>\S+?)(?: only=(?P<only>\S+))? -->\n"
                   r"(?:(?P<body>(?:(?!<!-- (?:end )?claims table).)*?)\n)?<!-- end claims table -->", re.S)


def table_blocks(text: str, claims_file: str) -> list[tuple[list[str] | None, str]]:
    """The claims tables a document holds for ``claims_file`` (a file name beside the document):
    ``<!-- claims table: FILE[ only=ID,ID] -->`` … ``<!-- end claims table -->``, each as (only, body)."""
    blocks = [(_only(m), m["body"] or "") for m in BLOCK.finditer(text) if m["file"] == claims_file]
    opened = len(re.findall(rf"<!-- claims table: {re.escape(claims_file)}[ -]", text))
    if opened != len(blocks):
        raise SystemExit(f"{opened} claims tables of {claims_file} open but {len(blocks)} close with "
                         "'<!-- end claims table -->': end each block before the next one starts")
    return blocks


def _only(block: re.Match) -> list[str] | None:
    """A table block's ``only=`` ids (None: the whole table)."""
    return block["only"].split(",") if block["only"] else None


def update_tables(doc: Path, claims: Path) -> int:
    """Rewrite every claims table of ``claims`` in ``doc`` (:func:`table_blocks`) with what the
    command prints now (the claims judged once); returns how many there were."""
    head, rows, note = _table(claims, None)

    def block(m: re.Match) -> str:
        if m["file"] != Path(claims).name:
            return m[0]
        return m[0].split("\n", 1)[0] + "\n" + _render(head, rows, note, "md", _only(m)) + "\n<!-- end claims table -->"

    text = Path(doc).read_text()
    count = len(table_blocks(text, Path(claims).name))
    Path(doc).write_text(BLOCK.sub(block, text))
    return count


def _render(head: list[str], rows: list[list[str]], note: str, fmt: str, only: Collection[str] | None) -> str:
    if only is not None:
        unknown = [o for o in only if not any(selected(r[0], [o]) for r in rows)]
        if unknown:
            raise SystemExit(f"no claim {', '.join(unknown)} in the claims file (asked for by --only or a "
                             f"table block's only=): name a claim id's first word or its number")
        rows, note = [r for r in rows if selected(r[0], only)], ""
    if fmt == "latex":
        esc = lambda s: "".join(LATEX.get(ch, ch) for ch in s)  # noqa: E731
        lines = ["\\begin{tabular}{" + "l" * len(head) + "}", "\\toprule", " & ".join(map(esc, head)) + " \\\\",
                 "\\midrule"] + [" & ".join(map(esc, r)) + " \\\\" for r in rows] + ["\\bottomrule", "\\end{tabular}"]
        return "\n".join(lines) + (f"\n% {note}" if note else "")
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out) + (f"\n\n{note}" if note else "")


def _table(path: Path, plots: Path | None) -> tuple[list[str], list[list[str]], str]:
    """The claims table's header, rows and note (resumed runs, the earlier rule)."""
    loaded: dict = {}  # the runs, read once for every reading of the claims
    settings, judged = judge_all(path, loaded=loaded)
    try:
        other = judge_all(path, "other", loaded=loaded)[1]
    except SystemExit:  # runs without lenient scores (results.json written by hand)
        other = None
    one = [copy.copy(j) for j in judged]
    decide(one, settings["alpha"], one_family=True)
    if plots is not None:
        forest_plot(judged, settings, plots)
        for spec in settings["figures"]:
            figure(spec, settings, Path(path).parent, plots)
    name = lambda v: settings["names"].get(str(v), str(v))  # noqa: E731
    alpha, level = settings["alpha"], round(100 * (1 - settings["alpha"]))
    head = ["claim", "paper", "source", "statement", "Δ = method − baseline", "n (partitions × seeds)",
            f"mean Δ [t {level}% CI]", f"bootstrap {level}% CI", "p (Holm in family)", "verdict", "family", "scorer",
            f"detectable Δ ({round(100 * POWER)}% power)", "paper's Δ", "partitions for the paper's Δ",
            "verdict, other scorer", "verdict, one family of all claims"]
    sizes = Counter(family(j.claim) for j in judged if not j.claim.get("vacuous"))
    rows = []
    for k, (j, o) in enumerate(zip(judged, one)):
        c = j.claim
        paper = c.get("paper_delta")
        rows.append([str(c["id"]), c["paper"], c["source"], c["statement"], _difference(c, name), _replicates(j),
                     f"{j.mean:+.3f} [{j.t_low:+.3f}, {j.t_high:+.3f}]", f"[{j.boot_low:+.3f}, {j.boot_high:+.3f}]",
                     "—" if c.get("vacuous") else f"{j.p_holm:.4f}",
                     f"{j.verdict}: {c['vacuous']}" if c.get("vacuous") else j.verdict,
                     family(c), scorer(c, settings), "—" if c.get("vacuous") else f"{j.detectable:.3f}",
                     "—" if paper is None else f"{float(paper):+.3f}",
                     "—" if c.get("vacuous") else _needed(j, alpha, 2 * sizes[family(c)]),
                     "—" if other is None else other[k].verdict, o.verdict])
    resumed = sorted({d for j in judged for d in j.resumed})
    note = (f"{len(resumed)} of the runs read resumed from a checkpoint: " + ", ".join(resumed)
            + ". " + _without_resumed(path, judged, loaded)) if resumed else "No run read resumed from a checkpoint."
    note += " " + _against_earlier_rule(judged, other, settings)
    return head, rows, note


def _against_earlier_rule(judged: list[Judged], other: list[Judged] | None, settings: dict) -> str:
    """Which verdicts differ from the earlier rule's (:func:`earlier_verdict`, strict scoring)."""
    if other is None:
        strict_judged = judged
    else:
        strict_judged = [j if scorer(j.claim, settings) == "strict" else o for j, o in zip(judged, other)]
    p_file = holm([j.p for j in strict_judged])
    changed = [f"{j.claim['id']} ({before} -> {j.verdict})" for j, s, p in zip(judged, strict_judged, p_file)
               if (before := earlier_verdict(s, p, settings["alpha"])) != j.verdict]
    return (f"Against the earlier rule (strict scoring, Holm over all {len(judged)} claims for replicated, an "
            f"unadjusted interval for not replicated), {len(changed)} of {len(judged)} verdicts differ: "
            + "; ".join(changed) + ".") if changed else "Every verdict is the earlier rule's."


def _without_resumed(path: Path, judged: list[Judged], loaded: dict) -> str:
    """Which verdicts change when the resumed runs (and their partitions) are left out."""
    try:
        _, without = judge_all(path, drop_resumed=True, loaded=loaded)
    except SystemExit as err:  # a claim left with fewer than 2 partitions
        return f"Without them, not every claim can be judged ({err})."
    changed = [f"{j.claim['id']} ({j.verdict} -> {w.verdict}, n {j.n} -> {w.n})"
               for j, w in zip(judged, without) if j.verdict != w.verdict]
    return ("Without them, the verdicts of " + "; ".join(changed) + " change.") if changed else \
        "Without them, no verdict changes."


LATEX = {"_": "\\_", "%": "\\%", "&": "\\&", "#": "\\#", "≈": "$\\approx$", "≫": "$\\gg$", "±": "$\\pm$",
         "−": "$-$", "–": "--", "Δ": "$\\Delta$", "λ": "$\\lambda$", "γ": "$\\gamma$", "β": "$\\beta$"}
VERDICT_COLOURS = {"replicated": "tab:green", "not replicated": "tab:red", "inconclusive": "tab:gray",
                   "smaller than reported": "tab:brown", "underpowered": "tab:orange", "vacuous": "tab:purple"}


def forest_plot(judged: list[Judged], settings: dict, out: Path) -> list[Path]:
    """Every claim's mean Δ with its t-interval (thick) and bootstrap interval (thin), coloured by
    verdict; the claimed bound (0, the ≫ margin, the ≈ band) drawn on each row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from ner_lightning.report.plots import _save

    name = lambda v: settings["names"].get(str(v), str(v))  # noqa: E731
    fig, ax = plt.subplots(figsize=(7.5, 0.6 + 0.24 * len(judged)))
    for row, j in enumerate(judged):
        y, c, colour = len(judged) - 1 - row, j.claim, VERDICT_COLOURS[j.verdict]
        ax.plot([j.boot_low, j.boot_high], [y, y], color=colour, lw=0.8)
        ax.plot([j.t_low, j.t_high], [y, y], color=colour, lw=2.5, solid_capstyle="butt")
        ax.plot(j.mean, y, "o", color=colour, ms=3.5)
        margin = float(c.get("margin") or 0.0)
        if c["relation"] == ">>":
            ax.plot(margin, y, "|", color="black", ms=7)
        elif c["relation"] == "≈":
            ax.plot([-margin, margin], [y, y], "|", color="black", ms=7)
    ax.axvline(0, color="black", lw=0.6)
    ax.set_yticks(range(len(judged)), [f"{j.claim['id']}: {name(j.claim['method'])} − {name(j.claim['baseline'])}"
                                       for j in reversed(judged)], fontsize=6)
    ax.set_ylim(-0.7, len(judged) - 0.3)
    ax.set_xlabel("paired difference Δ (method − baseline) over partitions")
    level = round(100 * (1 - settings["alpha"]))
    handles = [Line2D([], [], color=col, lw=2.5, label=v) for v, col in VERDICT_COLOURS.items()]
    handles += [Line2D([], [], color="black", marker="|", ls="", ms=7, label="claimed margin (≫ / ≈)")]
    ax.legend(handles=handles, fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(f"claims (each under its paper's scorer): mean Δ, paired t {level}% CI (thick), "
                 f"bootstrap {level}% CI (thin)", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, Path(out), "claims_forest")


def figure(spec: dict, settings: dict, root: Path, out: Path) -> list[Path]:
    """A curve of the claims file's ``figures`` list: runs (glob patterns), ``where``, the method
    key, the x key (optionally placed at the mean of ``x_at``, labelled ``x_label``), the metric and
    the paper's reported values as references. The x axis is logarithmic."""
    from ner_lightning.report.plots import metric_vs

    runs = _runs(spec, root)
    return metric_vs(runs, spec["key"], spec["x"], [spec["metric"]], Path(out), spec["name"], settings["resamples"],
                     settings["seed"], True, settings["names"], spec.get("references"),
                     spec.get("reference_label", "paper"), spec.get("x_at"), spec.get("x_label"))

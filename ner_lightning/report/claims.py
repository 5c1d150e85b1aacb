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

Δ is method − baseline per partition, paired on the same training sentences and initialisation.
The p-values of every claim in the file are Holm-adjusted together (one claim family). Verdict:

* **replicated** — adjusted p < α;
* **not replicated** — the two-sided (1 − α) paired t-interval of Δ lies wholly on the other side:
  at or below 0 (``>``), at or below the margin (``>>``: the difference, if any, is smaller than
  claimed), wholly outside ±margin (``≈``);
* **inconclusive** — otherwise: the interval crosses 0 or the margin, or it does not but the
  claim's p, adjusted for every claim of the file, stays above α.

A second verdict column judges every claim by a symmetric rule (:func:`symmetric_verdicts`):
the claim and its reverse are both tested one-sided and Holm-adjusted together within the
claim's family (its ``family`` key, by default its paper), so "not replicated" needs the same
adjusted evidence as "replicated" and the family-wise chance of any false verdict is at most α.
Then the distance from the claim's bound (0, the margin) that its n and observed SD detect with
80 % power at the strictest Holm level of its family (:func:`detectable_effect`): a claimed
effect below it cannot be told from none by this design. The last column is the symmetric
verdict with every score read under lenient span rules (seqeval's default mode, conlleval's),
the scorer the AUC-2T and OVA-AUC papers' citation of seqeval implies.

Under the table, the note on resumed runs says which symmetric verdicts change when those runs
(and their partitions) are left out.

The percentile bootstrap interval is printed as a second column; cells that resumed from a
checkpoint are counted and listed (they end as uninterrupted ones would; the list lets a reader
check). Rows whose runs differ in a setting other than ``key``, the replicates and the claim's
``pool`` keys (e.g. ``head_lr`` when each method was tuned on its own) are refused.
"""
from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml
from scipy import optimize, stats

from ner_lightning import run_store
from ner_lightning.report.checks import duplicates, pooled_differences, unpaired_rows
from ner_lightning.report.runs import group, labels, load_runs, select_on_dev
from ner_lightning.report.stats import bootstrap_mean, holm
from ner_lightning.report.tables import paired_by_partition

RELATIONS = (">", ">>", "≈")
FIELDS = ("id", "paper", "source", "statement", "relation", "runs", "key", "method", "baseline", "metric")


@dataclass
class Judged:
    claim: dict
    n: int
    mean: float
    t_low: float
    t_high: float
    boot_low: float
    boot_high: float
    p: float  # one-sided (or TOST) p of the claim's hypothesis
    p_reverse: float  # p of its reverse (:func:`p_against`)
    sd: float  # standard deviation of the paired differences
    resumed: list[str] = field(default_factory=list)  # folders of resumed runs, relative to the claims file
    p_holm: float = math.nan
    verdict: str = ""
    symmetric: str = ""  # the verdict of :func:`symmetric_verdicts` within the claim's family


def load_claims(path: Path) -> tuple[dict, list[dict]]:
    """The file's settings (``alpha``, ``resamples``, ``seed``) and its claims, checked."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    claims = data.get("claims") or []
    if not claims:
        raise SystemExit(f"{path}: no claims (a top-level `claims:` list)")
    for i, c in enumerate(claims):
        missing = [f for f in FIELDS if f not in c]
        if missing:
            raise SystemExit(f"{path}: claim {c.get('id', i + 1)} lacks {', '.join(missing)}")
        if c["relation"] not in RELATIONS:
            raise SystemExit(f"{path}: claim {c['id']}: relation {c['relation']!r} is not one of {RELATIONS}")
        if c["relation"] != ">" and not c.get("margin"):
            raise SystemExit(f"{path}: claim {c['id']}: relation {c['relation']} needs a positive margin")
    settings = {"alpha": float(data.get("alpha", 0.05)), "resamples": int(data.get("resamples", 10_000)),
                "seed": int(data.get("seed", 0)), "names": {str(k): str(v) for k, v in (data.get("names") or {}).items()},
                "figures": list(data.get("figures") or [])}
    return settings, claims


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


def symmetric_verdicts(p_for: list[float], p_reverse: list[float], families: list[str], alpha: float) -> list[str]:
    """Both directions of every claim tested and adjusted alike: within each family, Holm over
    its 2m one-sided p-values (each claim's and its reverse's). *replicated* when the claim's
    adjusted p < α, *not replicated* when the reverse's is, else *inconclusive*. Holm controls the
    family-wise error over all 2m directional nulls, so the chance of any false verdict of either
    kind in a family is at most α (``tests/test_claims.py`` simulates it)."""
    out = [""] * len(p_for)
    for name in dict.fromkeys(families):
        members = [i for i, f in enumerate(families) if f == name]
        adjusted = holm([p for i in members for p in (p_for[i], p_reverse[i])])
        for k, i in enumerate(members):
            out[i] = ("replicated" if adjusted[2 * k] < alpha else
                      "not replicated" if adjusted[2 * k + 1] < alpha else "inconclusive")
    return out


def _runs(spec: dict, root: Path, loaded: dict | None = None) -> list[dict]:
    """The runs a claim or figure reads: its ``runs`` glob patterns under ``root``, filtered by
    ``where``. ``loaded``: folders already read (one table's claims share their sweeps)."""
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
          loaded: dict | None = None) -> Judged:
    """Δ of one claim from its runs (glob patterns relative to the claims file's folder). With
    ``interaction: {key, with, without}``, Δ is a difference of differences per partition:
    (method − baseline at key=with) − (method − baseline at key=without); with ``average_over``,
    the mean over that key's values of method − baseline per partition."""
    runs = _runs(claim, root, loaded)
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
    if len(deltas) < 2:
        raise SystemExit(f"claim {claim['id']}: {len(deltas)} paired partitions; a verdict needs at least 2")
    d = np.asarray(list(deltas.values()), dtype=float)
    margin = float(claim.get("margin") or 0.0)
    p, low, high = t_test(d, claim["relation"], margin, alpha)
    boot = bootstrap_mean(d, resamples, seed, 1 - alpha)
    resumed = sorted(os.path.relpath(r["_dir"], root) for r in used if r.get("resumed_from"))
    return Judged(claim, len(d), float(np.mean(d)), low, high, boot.low, boot.high, p,
                  p_against(d, claim["relation"], margin), float(np.std(d, ddof=1)), resumed)


def verdict(j: Judged, alpha: float) -> str:
    relation, margin = j.claim["relation"], float(j.claim.get("margin") or 0.0)
    if j.p_holm < alpha:
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


def judge_all(path: Path, scoring: str = "strict", drop_resumed: bool = False,
              loaded: dict | None = None) -> tuple[dict, list[Judged]]:
    """Every claim of the file judged by both rules; ``scoring="lenient"`` reads each claim's
    metric under lenient span rules instead (:func:`lenient`); ``drop_resumed`` leaves out the
    runs that resumed from a checkpoint (and so their partitions); ``loaded``: see :func:`_runs`."""
    loaded = {} if loaded is None else loaded
    settings, claims = load_claims(path)
    if scoring == "lenient":
        claims = [{**c, "metric": lenient(c["metric"])} for c in claims]
    judged = [judge(c, settings["alpha"], settings["resamples"], settings["seed"], Path(path).parent, drop_resumed,
                    loaded) for c in claims]
    for j, p in zip(judged, holm([j.p for j in judged])):
        j.p_holm = p
        j.verdict = verdict(j, settings["alpha"])
    symmetric = symmetric_verdicts([j.p for j in judged], [j.p_reverse for j in judged],
                                   [family(j.claim) for j in judged], settings["alpha"])
    for j, v in zip(judged, symmetric):
        j.symmetric = v
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
    return f"{d} ({claim['metric']}, {_relation(claim)})"


def claims_table(path: Path, fmt: str = "md", plots: Path | None = None) -> str:
    """The claims table, every verdict computed by the rule in this module's docstring (and with
    ``plots``, the forest plot of every claim's Δ there)."""
    loaded: dict = {}  # the runs, read once for the three readings of the claims
    settings, judged = judge_all(path, loaded=loaded)
    try:
        lenient_verdicts = [j.symmetric for j in judge_all(path, "lenient", loaded=loaded)[1]]
    except SystemExit:  # runs without lenient scores (results.json written by hand)
        lenient_verdicts = ["—"] * len(judged)
    if plots is not None:
        forest_plot(judged, settings, plots)
        for spec in settings["figures"]:
            figure(spec, settings, Path(path).parent, plots)
    name = lambda v: settings["names"].get(str(v), str(v))  # noqa: E731
    level = round(100 * (1 - settings["alpha"]))
    head = ["claim", "paper", "source", "statement", "Δ = method − baseline", "n", f"mean Δ [t {level}% CI]",
            f"bootstrap {level}% CI", "p (Holm)", "verdict", "symmetric verdict (family)",
            f"detectable Δ ({round(100 * POWER)}% power)", "lenient scoring: symmetric verdict"]
    sizes = Counter(family(j.claim) for j in judged)
    rows = []
    for j, lenient_verdict in zip(judged, lenient_verdicts):
        c = j.claim
        mde = detectable_effect(j.sd, j.n, settings["alpha"], 2 * sizes[family(c)])
        rows.append([str(c["id"]), c["paper"], c["source"], c["statement"],
                     _difference(c, name), str(j.n),
                     f"{j.mean:+.3f} [{j.t_low:+.3f}, {j.t_high:+.3f}]", f"[{j.boot_low:+.3f}, {j.boot_high:+.3f}]",
                     f"{j.p_holm:.4f}", j.verdict, f"{j.symmetric} ({family(c)})", f"{mde:.3f}", lenient_verdict])
    resumed = sorted({d for j in judged for d in j.resumed})
    note = (f"{len(resumed)} of the runs read resumed from a checkpoint: " + ", ".join(resumed)
            + ". " + _without_resumed(path, judged, loaded)) if resumed else "No run read resumed from a checkpoint."
    if fmt == "latex":
        esc = lambda s: "".join(LATEX.get(ch, ch) for ch in s)  # noqa: E731
        lines = ["\\begin{tabular}{" + "l" * len(head) + "}", "\\toprule", " & ".join(map(esc, head)) + " \\\\",
                 "\\midrule"] + [" & ".join(map(esc, r)) + " \\\\" for r in rows] + ["\\bottomrule", "\\end{tabular}"]
        return "\n".join(lines) + f"\n% {note}"
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out) + f"\n\n{note}"


def _without_resumed(path: Path, judged: list[Judged], loaded: dict) -> str:
    """Which symmetric verdicts change when the resumed runs (and their partitions) are left out."""
    try:
        _, without = judge_all(path, drop_resumed=True, loaded=loaded)
    except SystemExit as err:  # a claim left with fewer than 2 partitions
        return f"Without them, not every claim can be judged ({err})."
    changed = [f"{j.claim['id']} ({j.symmetric} -> {w.symmetric}, n {j.n} -> {w.n})"
               for j, w in zip(judged, without) if j.symmetric != w.symmetric]
    return ("Without them, the symmetric verdicts of " + "; ".join(changed) + " change.") if changed else \
        "Without them, no symmetric verdict changes."


LATEX = {"_": "\\_", "%": "\\%", "&": "\\&", "#": "\\#", "≈": "$\\approx$", "≫": "$\\gg$", "±": "$\\pm$",
         "−": "$-$", "–": "--", "Δ": "$\\Delta$", "λ": "$\\lambda$", "γ": "$\\gamma$", "β": "$\\beta$"}
VERDICT_COLOURS = {"replicated": "tab:green", "not replicated": "tab:red", "inconclusive": "tab:gray"}


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
    ax.set_title(f"claims: mean Δ, paired t {level}% CI (thick), bootstrap {level}% CI (thin)", fontsize=8)
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

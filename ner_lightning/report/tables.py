"""Tables of a sweep: a summary per group, paired comparisons against a baseline, and
paper-style method × column tables (Markdown, LaTeX booktabs or CSV)."""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Sequence

from ner_lightning.report.checks import unpaired_rows
from ner_lightning.report.runs import (
    baseline_value,
    group,
    labels,
    lookup,
    pair_id,
    parse_baseline,
    partition_label,
    sort_key,
)
from ner_lightning.report.stats import Comparison, Estimate, bootstrap_mean, holm, paired_compare


def values(runs: list[dict], metric: str) -> list[float]:
    return [v for v in (lookup(r, metric) for r in runs) if v is not None]


def _num(x: float, digits: int = 4) -> str:
    return "–" if x is None or math.isnan(x) else f"{x:.{digits}f}"


def summary_table(runs: list[dict], by: list[str], metrics: list[str], resamples: int, seed: int) -> str:
    """One row per group: mean ± bootstrap SE [95 % CI] per metric, n, partitions missing
    (present elsewhere in the table but not in this row), mean wall time."""
    rows = group(runs, by)
    every = sorted({partition_label(r) for r in runs}, key=lambda p: (len(p), p))
    head = by + [f"{m} mean ± SE [95% CI]" for m in metrics] + ["n", "missing partitions", "wall time (s)"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, rs in rows.items():
        cells = []
        for m in metrics:
            e = bootstrap_mean(values(rs, m), resamples, seed)
            cells.append("–" if e.n == 0 else f"{_num(e.mean)} ± {_num(e.se)} [{_num(e.low)}, {_num(e.high)}]")
        have = {partition_label(r) for r in rs}
        missing = ",".join(p for p in every if p not in have) or "–"
        wall = statistics.fmean(r["wall_time_s"] for r in rs)
        out.append("| " + " | ".join(list(key) + cells + [str(len(rs)), missing, f"{wall:.0f}"]) + " |")
    return "\n".join(out)


def baseline_row_value(runs: list[dict], baseline: str) -> str:
    """``--baseline KEY=VALUE``'s VALUE as the runs' rows write it (for tables and figures)."""
    key, _, value = baseline.partition("=")
    return baseline_value(value, set(labels(runs, key)))


def paired_by_partition(method: list[dict], base: list[dict], metric: str) -> dict[tuple, tuple[float, float]]:
    """(method value, baseline value) per pair (partition, init seed) both rows have, in order. A
    partition index whose sentences differ between the rows (another seed, size or regime) is
    refused: those runs are not paired."""
    mine = {(partition_label(r), pair_id(r)[1]): r for r in method}
    theirs = {(partition_label(r), pair_id(r)[1]): r for r in base}
    pairs = {}
    for k in sorted(set(mine) & set(theirs)):
        a, b = mine[k], theirs[k]
        if a["partition"]["sha256"] != b["partition"]["sha256"]:
            raise SystemExit(
                f"refusing to pair {a.get('_dir', '?')} with {b.get('_dir', '?')}: partition {k[0]} "
                "holds different sentences (sha256 differs) — compare rows with the same size/regime"
            )
        va, vb = lookup(a, metric), lookup(b, metric)
        if va is not None and vb is not None:
            pairs[k] = (va, vb)
    return pairs


def paired_values(method: list[dict], base: list[dict], metric: str) -> tuple[list[float], list[float]]:
    """The paired values of :func:`paired_by_partition` as two lists."""
    pairs = list(paired_by_partition(method, base, metric).values())
    return [a for a, _ in pairs], [b for _, b in pairs]


TESTS = ("wilcoxon", "bootstrap", "ttest")


def comparisons(
    runs: list[dict],
    by: list[str],
    metrics: list[str],
    baseline: str,
    resamples: int,
    seed: int,
    test: str = "wilcoxon",
    pool: Sequence[str] = (),
) -> list[tuple[tuple, str, Comparison]]:
    """Every row against the baseline row with the same other ``by`` values, per metric; the
    p-values of ``test`` get Holm's correction across all comparisons of a metric. Rows whose
    runs differ in more than the ``by`` keys (say, typed vs untyped labels) are refused."""

    if test not in TESTS:
        raise SystemExit(f"--test must be one of {TESTS}, got {test!r}")
    at, value = parse_baseline(baseline, by)
    rows = group(runs, by)
    value = baseline_value(value, {k[at] for k in rows})
    pairs = [(key, key[:at] + (value,) + key[at + 1 :]) for key in rows]
    pairs = [(key, ref) for key, ref in pairs if key[at] != value and ref in rows]
    problems = unpaired_rows(rows, pairs, by, pool)
    if problems:
        raise SystemExit(
            f"refusing paired differences against {baseline}: rows differ in more than {','.join(by)}, "
            "so a difference would measure those settings too:\n"
            + "\n".join(problems)
            + "\nrerun them on the same settings (a grid sweep puts objectives that need different labels "
            "on data.label_scheme=untyped), or compare rows with the same settings"
        )
    found = []
    for key, ref in pairs:
        rs = rows[key]
        for m in metrics:
            found.append((key, m, paired_compare(*paired_values(rs, rows[ref], m), resamples=resamples, seed=seed)))
    for m in metrics:
        mine = [c for _, metric, c in found if metric == m]
        for c, p in zip(mine, holm([c.p(test) for c in mine]), strict=True):
            c.p_holm = p
    return found


def comparison_table(found, by: list[str], baseline: str, alpha: float, test: str = "wilcoxon") -> str:
    head = by + [
        "metric",
        f"mean diff vs {baseline} [95% CI]",
        "pairs",
        "p bootstrap",
        "p Wilcoxon",
        "p t-test",
        f"p {test}, Holm",
        f"significant (α={alpha})",
    ]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, m, c in found:
        d = c.diff
        sig = "–" if math.isnan(c.p_holm) else ("yes" if c.p_holm < alpha else "no")
        diff = "–" if d.n == 0 else f"{d.mean:+.4f} [{_num(d.low)}, {_num(d.high)}]"
        out.append(
            "| "
            + " | ".join(
                list(key)
                + [m, diff, str(c.n), _num(c.p_bootstrap), _num(c.p_wilcoxon), _num(c.p_ttest), _num(c.p_holm), sig]
            )
            + " |"
        )
    few = min((c.n for _, _, c in found if 2 <= c.n < 6), default=None)
    if few is not None:
        out.append(
            f"\nRows with fewer than 6 pairs (fewest: {few}): the exact Wilcoxon p cannot fall below "
            f"2/2^n = {2 / 2**few:.4f}, and the paired bootstrap p is 0 whenever every difference has "
            "one sign; read the t-test, or run more partitions."
        )
    return "\n".join(out)


def paper_table(
    runs: list[dict],
    method_key: str,
    column_key: str,
    metric: str,
    baseline: str | None,
    alpha: float,
    resamples: int,
    seed: int,
    fmt: str = "md",
    test: str = "wilcoxon",
    pool: Sequence[str] = (),
) -> str:
    """Methods × columns (sizes, shares, corpora …): mean with its bootstrap SE as in the
    papers, best in bold and second underlined per column, † = differs from the baseline
    method (its value of ``method_key``; ``test``, Holm-corrected within the table, α)."""
    cells = group(runs, [method_key, column_key])
    methods = list(dict.fromkeys(k[0] for k in cells))
    columns = sorted({k[1] for k in cells}, key=lambda c: sort_key((c,)))
    est = {k: bootstrap_mean(values(rs, metric), resamples, seed) for k, rs in cells.items()}
    marks: dict[tuple, bool] = {}
    if baseline:
        found = comparisons(
            runs, [method_key, column_key], [metric], f"{method_key}={baseline}", resamples, seed, test, pool
        )
        marks = {key: c.p_holm < alpha for key, _, c in found if not math.isnan(c.p_holm)}
    rank = {}
    for col in columns:
        order = sorted((m for m in methods if (m, col) in est and est[(m, col)].n), key=lambda m: -est[(m, col)].mean)
        rank.update({(m, col): i for i, m in enumerate(order)})
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow([method_key, column_key, "mean", "se", "ci_low", "ci_high", "n", "differs_from_baseline"])
        for (m, col), e in est.items():
            w.writerow([m, col, e.mean, e.se, e.low, e.high, e.n, marks.get((m, col), "")])
        return buf.getvalue().rstrip("\n")
    latex = fmt == "latex"

    def cell(m: str, col: str) -> str:
        e = est.get((m, col))
        return _table_cell(e, rank.get((m, col)), bool(marks.get((m, col))), latex) if e is not None else "–"

    head = [method_key] + [f"{column_key}={c}" for c in columns]
    if latex:
        lines = ["\\begin{tabular}{l" + "r" * len(columns) + "}", "\\toprule", " & ".join(head) + " \\\\", "\\midrule"]
        lines += [" & ".join([m.replace("_", "\\_")] + [cell(m, c) for c in columns]) + " \\\\" for m in methods]
        return "\n".join(lines + ["\\bottomrule", "\\end{tabular}"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * (len(columns) + 1)]
    lines += ["| " + " | ".join([m] + [cell(m, c) for c in columns]) + " |" for m in methods]
    return "\n".join(lines)


def _table_cell(e: Estimate, rank: int | None, marked: bool, latex: bool) -> str:
    """A :func:`paper_table` cell: mean with its SE, bold if first, underlined if second, † if
    it differs from the baseline."""
    if e.n == 0:
        return "–"
    text, se = f"{e.mean:.4f}", _num(e.se)
    if latex:
        text = {0: f"\\textbf{{{text}}}", 1: f"\\underline{{{text}}}"}.get(rank, text) if rank is not None else text
        return text + f"$_{{{se}}}$" + ("$^\\dagger$" if marked else "")
    text = {0: f"**{text}**", 1: f"<u>{text}</u>"}.get(rank, text) if rank is not None else text
    return text + f"<sub>{se}</sub>" + (" †" if marked else "")


def corpus_average_table(runs: list[dict], by: list[str], metric: str, over: str, resamples: int, seed: int) -> str:
    """Averages over main corpora (``over``, e.g. ``dataset``), the MUNCHABLES paper's Table 2 MA./MI.
    AVG. columns: per row (``by`` without ``over``) and partition index, the macro average is the
    mean of ``metric`` over the corpora and the micro average pools their span counts (``metric``
    ``<split>.micro.f1``); then mean ± bootstrap SE [95 % CI] over the partitions that have every
    corpus."""
    rest = [k for k in by if k != over]
    corpora = sorted({str(lookup(r, over)) for r in runs})
    head = rest + [f"macro avg of {metric}", "micro avg (pooled counts)", "n", "partitions left out"]
    out = [f"Averages over {over} = {', '.join(corpora)}:\n", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    micro = metric.endswith(".micro.f1")
    for key, rs in group(runs, rest).items():
        by_part: dict[str, dict[str, dict]] = {}
        for r in rs:
            by_part.setdefault(partition_label(r), {})[str(lookup(r, over))] = r
        macro_v, micro_v, partial = [], [], []
        for part, per in sorted(by_part.items()):
            if set(per) != set(corpora):
                partial.append(part)
                continue
            macro_v.append(statistics.fmean(lookup(r, metric) for r in per.values()))
            if micro:
                base = metric[: -len(".f1")]
                c, p, g = (
                    sum(lookup(r, f"{base}.{n}") or 0 for r in per.values())
                    for n in ("correct", "predicted", "support")
                )
                micro_v.append(2 * c / (p + g) if p + g else 0.0)
        cells = []
        for vals in (macro_v, micro_v if micro else []):
            e = bootstrap_mean(vals, resamples, seed)
            cells.append("–" if e.n == 0 else f"{_num(e.mean)} ± {_num(e.se)} [{_num(e.low)}, {_num(e.high)}]")
        out.append("| " + " | ".join(list(key) + cells + [str(len(macro_v)), ",".join(partial) or "–"]) + " |")
    return "\n".join(out)

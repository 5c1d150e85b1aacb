"""Aggregate the ``results.json`` of one or more sweep folders into a markdown table.

    python -m ner_lightning.report multirun/2026-11-22/17-04-43-949171 --by loss,size
    python -m ner_lightning.report DIR [DIR ...] --by data.resample --metrics test.macro.f1,test.micro.f1
    python -m ner_lightning.report DIR --by loss,size --metrics test.macro.f1 --paired-test loss=mom

Rows group the runs by the given config keys (dotted paths into the resolved config; ``loss``
means the loss config's name as overridden on the command line). Each metric is reported as
mean ± sample standard deviation [min, max] over the runs of a row (usually the partitions),
with n and the mean wall time. Failed cells (``failure.json``) are counted and listed.

``--paired-test KEY=VALUE`` adds the MoM paper's test: a paired t-test (``scipy.stats.ttest_rel``,
two-sided, α = ``--alpha``) of every row against the row that has KEY=VALUE and the same other
``--by`` values, pairing runs on the same partition (sha256) and initialisation seed.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from scipy import stats


def load_runs(dirs: list[Path]) -> tuple[list[dict], list[Path]]:
    runs, failed = [], []
    for d in dirs:
        for path in sorted(Path(d).rglob("results.json")):
            runs.append(json.loads(path.read_text()))
        failed += sorted(Path(d).rglob("failure.json"))
    return runs, failed


def lookup(run: dict, key: str):
    if key in ("loss", "model", "dataset"):  # the group option chosen on the command line
        for o in run.get("overrides", []):
            if o.startswith(f"{key}="):
                return o.split("=", 1)[1]
        if key == "dataset":
            return run["config"]["dataset"]["name"]
    node = run if key.startswith(("test.", "dev.", "training_set.", "partition.", "throughput.", "compute.")) else run["config"]
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def fmt(values: list[float]) -> str:
    if not values:
        return "–"
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.4f} ± {sd:.4f} [{min(values):.4f}, {max(values):.4f}]"


def table(runs: list[dict], by: list[str], metrics: list[str]) -> str:
    rows: dict[tuple, list[dict]] = {}
    for r in runs:
        rows.setdefault(tuple(str(lookup(r, k)) for k in by), []).append(r)
    head = "| " + " | ".join(by + metrics + ["n", "wall time (s)"]) + " |"
    out = [head, "|" + "---|" * (len(by) + len(metrics) + 2)]
    for key in sorted(rows, key=lambda k: [int(x) if x.isdigit() else x for x in k]):
        rs = rows[key]
        cells = [fmt([v for v in (lookup(r, m) for r in rs) if v is not None]) for m in metrics]
        wall = statistics.fmean(r["wall_time_s"] for r in rs)
        out.append("| " + " | ".join(list(key) + cells + [str(len(rs)), f"{wall:.0f}"]) + " |")
    return "\n".join(out)


def pair_id(run: dict) -> tuple:
    """Runs pair when they trained on the same sentences with the same initialisation."""
    init = lookup(run, "compute.init_seed")
    return run["partition"]["sha256"], init if init is not None else run["config"].get("seed")


def paired_tests(runs: list[dict], by: list[str], metrics: list[str], reference: str, alpha: float) -> str:
    """Paired t-test of every row against its reference row (see the module docstring)."""
    key, _, value = reference.partition("=")
    if key not in by or not value:
        raise SystemExit(f"--paired-test {reference!r}: give KEY=VALUE with KEY one of --by ({','.join(by)})")
    at = by.index(key)
    rows: dict[tuple, dict] = {}
    for r in runs:
        rows.setdefault(tuple(str(lookup(r, k)) for k in by), {})[pair_id(r)] = r
    head = by + ["metric", f"mean difference (row − {value})", "t", "p", "pairs", f"significant at {alpha}"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in sorted(rows, key=lambda k: [int(x) if x.isdigit() else x for x in k]):
        ref = row[:at] + (value,) + row[at + 1:]
        if row[at] == value or ref not in rows:
            continue
        common = sorted(set(rows[row]) & set(rows[ref]), key=str)
        for m in metrics:
            pairs = [(lookup(rows[row][p], m), lookup(rows[ref][p], m)) for p in common]
            pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
            diff = statistics.fmean(x - y for x, y in pairs) if pairs else math.nan
            t, pval = stats.ttest_rel([x for x, _ in pairs], [y for _, y in pairs]) if len(pairs) > 1 else (math.nan, math.nan)
            sig = "yes" if pval < alpha else ("no" if not math.isnan(pval) else "–")
            out.append("| " + " | ".join(list(row) + [m, f"{diff:+.4f}", f"{t:.3f}", f"{pval:.4f}", str(len(pairs)), sig]) + " |")
    return "\n".join(out)


def mixed_settings(runs: list[dict], by: list[str], keys=("data.label_scheme", "dataset")) -> list[str]:
    """Settings that differ between runs but do not define rows: their rows are not comparable
    (e.g. a two-task loss switches to untyped labels, whose spans are easier to get right)."""
    notes = []
    for key in keys:
        values = sorted({str(lookup(r, key)) for r in runs})
        if key not in by and len(values) > 1:
            notes.append(f"note: runs differ in {key} ({', '.join(values)}) — add it to --by; "
                         "rows with different values are not comparable")
    return notes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--by", default="loss,size", help="comma-separated config keys that define a row")
    ap.add_argument("--metrics", default="test.micro.f1,test.macro.f1")
    ap.add_argument("--paired-test", metavar="KEY=VALUE", help="paired t-test of every row against this one, e.g. loss=mom")
    ap.add_argument("--alpha", type=float, default=0.05, help="significance level of --paired-test")
    args = ap.parse_args()
    runs, failed = load_runs(args.dirs)
    if not runs and not failed:
        raise SystemExit(f"no results.json under {', '.join(map(str, args.dirs))}")
    by = args.by.split(",")
    print(table(runs, by, args.metrics.split(",")))
    if args.paired_test:
        print(f"\nPaired t-test against {args.paired_test} (scipy.stats.ttest_rel, pairs = same partition and init seed):\n")
        print(paired_tests(runs, by, args.metrics.split(","), args.paired_test, args.alpha))
    for note in mixed_settings(runs, by):
        print(f"\n{note}")
    if failed:
        print(f"\n{len(failed)} failed cell(s):")
        for f in failed:
            print(f"- {f.parent.name}: {json.loads(f.read_text())['error'].splitlines()[0]}")


if __name__ == "__main__":
    main()

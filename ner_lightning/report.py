"""Aggregate the ``results.json`` of one or more sweep folders into a markdown table.

    python -m ner_lightning.report multirun/2026-11-22/17-04-43-949171 --by loss,size
    python -m ner_lightning.report DIR [DIR ...] --by data.resample --metrics test.macro.f1,test.micro.f1

Rows group the runs by the given config keys (dotted paths into the resolved config; ``loss``
means the loss config's name as overridden on the command line). Each metric is reported as
mean ± sample standard deviation [min, max] over the runs of a row (usually the partitions),
with n and the mean wall time. Failed cells (``failure.json``) are counted and listed.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


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
    node = run if key.startswith(("test.", "dev.", "training_set.", "partition.", "throughput.")) else run["config"]
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
    args = ap.parse_args()
    runs, failed = load_runs(args.dirs)
    if not runs and not failed:
        raise SystemExit(f"no results.json under {', '.join(map(str, args.dirs))}")
    by = args.by.split(",")
    print(table(runs, by, args.metrics.split(",")))
    for note in mixed_settings(runs, by):
        print(f"\n{note}")
    if failed:
        print(f"\n{len(failed)} failed cell(s):")
        for f in failed:
            print(f"- {f.parent.name}: {json.loads(f.read_text())['error'].splitlines()[0]}")


if __name__ == "__main__":
    main()

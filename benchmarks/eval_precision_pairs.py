"""Same weights, two evaluation precisions: per-epoch dev F1 of cells that trained identically
(fp32) but evaluated in fp32 (``--fp32`` sweep) and in bf16 (the other sweeps).

    python benchmarks/eval_precision_pairs.py --fp32 multirun/perf/group_by_length \\
        multirun/perf/bf16_eval multirun/perf/bf16_eval_ova

Cells pair by (loss, partition) among the fp32 sweep's ``data.group_by_length=True`` cells.
Epochs are compared while both cells still trained (identical weights until one of them stops
early). Prints a markdown table: epochs compared, mean and largest |difference| of dev strict
and lenient micro-F1, the selected epoch and the test F1 of each (when the bf16 cell finished).
"""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path


def curve(cell: Path) -> dict[int, tuple[float, float]]:
    rows = csv.DictReader((cell / "csv" / "metrics.csv").open())
    return {int(r["epoch"]): (float(r["val/f1"]), float(r["val/f1_lenient"])) for r in rows if r.get("val/f1")}


def keys(cell: Path) -> dict[str, str]:
    return dict(p.split("=", 1) for p in cell.name.split("_", 1)[1].split(",") if "=" in p)


def result(cell: Path) -> dict | None:
    f = cell / "results.json"
    return json.loads(f.read_text()) if f.is_file() else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fp32", required=True, type=Path)
    ap.add_argument("bf16", nargs="+", type=Path)
    args = ap.parse_args()
    fp32 = {(k["loss"], k["partition"]): c for c in args.fp32.iterdir() if c.is_dir() and "=" in c.name
            for k in [keys(c)] if k.get("data.group_by_length") == "True"}
    print("| loss | partition | epochs | mean Δ dev F1 (bf16 − fp32) | max abs Δ dev F1 | max abs Δ lenient | "
          "selected epoch fp32 / bf16 | test F1 fp32 / bf16 |")
    print("|---|---:|---:|---:|---:|---:|---|---|")
    for sweep in args.bf16:
        for cell in sorted(c for c in sweep.iterdir() if c.is_dir() and "=" in c.name):
            k = keys(cell)
            ref = fp32.get((k["loss"], k["partition"]))
            if ref is None or not (cell / "csv" / "metrics.csv").is_file():
                continue
            a, b = curve(ref), curve(cell)
            common = sorted(set(a) & set(b))
            if not common:
                continue
            d = [b[e][0] - a[e][0] for e in common]
            dl = [b[e][1] - a[e][1] for e in common]
            ra, rb = result(ref), result(cell)
            sel = f"{ra['best_epoch']} / {rb['best_epoch']}" if ra and rb else "– (running)"
            test = (f"{ra['test']['micro']['f1']:.4f} / {rb['test']['micro']['f1']:.4f}" if ra and rb and rb["test"]
                    else "–")
            print(f"| {k['loss']} | {k['partition']} | {len(common)} | {sum(d) / len(d):+.4f} | "
                  f"{max(map(abs, d)):.4f} | {max(map(abs, dl)):.4f} | {sel} | {test} |")


if __name__ == "__main__":
    main()

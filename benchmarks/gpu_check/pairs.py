"""Two grid parts of the GPU check side by side (their JSON from gpu_check/summary.py): each one's
cells per minute, and the cells both finished paired by (size, partition): test-F1 differences with
a t interval (scipy), the largest difference and how many chose the same epoch.

    python benchmarks/gpu_check/pairs.py A.json B.json   # differences are A - B
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from scipy import stats


def paired(a: dict, b: dict) -> dict:
    cells_a = {(c["size"], c["partition"]): c for c in a["cells"]}
    cells_b = {(c["size"], c["partition"]): c for c in b["cells"]}
    keys = sorted(set(cells_a) & set(cells_b))
    diffs = [cells_a[k]["test_f1"] - cells_b[k]["test_f1"] for k in keys]
    out = {"rate_a": a.get("cells_per_min"), "rate_b": b.get("cells_per_min"), "paired": len(keys)}
    if len(diffs) >= 2:
        mean, sem = statistics.mean(diffs), statistics.stdev(diffs) / len(diffs) ** 0.5
        half = stats.t.ppf(0.975, len(diffs) - 1) * sem
        out.update(mean_f1_b=round(statistics.mean(cells_b[k]["test_f1"] for k in keys), 4),
                   mean_diff=round(mean, 4), ci95=[round(mean - half, 4), round(mean + half, 4)],
                   max_abs_diff=round(max(map(abs, diffs)), 4),
                   same_best_epoch=sum(cells_a[k]["best_epoch"] == cells_b[k]["best_epoch"] for k in keys))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    args = ap.parse_args()
    a, b = (json.loads(p.read_text()) for p in (args.a, args.b))
    for part in (a, b):  # summaries written before cells_per_min existed
        part.setdefault("cells_per_min", round(60 * part["cells_done"] / part["wall_s"], 2))
    print(json.dumps(paired(a, b)))


if __name__ == "__main__":
    main()

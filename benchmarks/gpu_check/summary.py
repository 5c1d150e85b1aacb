"""One part of the GPU check as JSON, from a sweep folder's results.json files (no torch import, a
second): what finished, at which precision, in which lockstep group, its selected epoch and test
F1, and — for a grid — the rate and its extrapolation to the AUC-2T paper's Table 2 grid.

The extrapolation of a complete slice (every cell to its end, early stopping included) weighs the
sizes: each cell's wall-clock span (``results.json`` timeline), its mean per size fitted as a line
in the size, gives the cost of every Table 2 size; the slice's wall time scales by Table 2's cost
over the slice's (``table2_hours_by_size``), and again by the full protocol's 30 epochs over the
epochs the slice's cells trained (``table2_hours_at_30_epochs``, early stopping would end sooner).

    python benchmarks/gpu_check/summary.py SWEEP OUT.json --wall 123.4 --exit 0 [--expected 96]
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

TABLE2_CELLS = 12 * 30 * 4  # 12 sizes x 30 partitions x 4 methods
TABLE2_SIZES = (20, 50, 100, 150, 200, 250, 300, 350, 400, 450, 500, 1000)
FULL_EPOCHS = 30  # conf/trainer/default.yaml max_epochs


def table2_by_size(cells: list[dict], wall: float) -> dict | None:
    """Table 2's hours from a slice of two or more sizes (module docstring); None with fewer."""
    spans: dict[int, list[float]] = {}
    for c in cells:
        if c["span_s"] is not None:
            spans.setdefault(c["size"], []).append(c["span_s"])
    if len(spans) < 2:
        return None
    sizes = sorted(spans)
    means = [statistics.fmean(spans[s]) for s in sizes]
    slope, intercept = statistics.linear_regression(sizes, means)

    def cost(size: int) -> float:
        return max(intercept + slope * size, min(means))  # never below the cheapest size measured

    hours = wall * 30 * 4 * sum(cost(s) for s in TABLE2_SIZES) / sum(cost(c["size"]) for c in cells) / 3600
    epochs = statistics.fmean(c["epochs"] for c in cells)
    return {
        "table2_hours_by_size": round(hours, 2),
        "table2_hours_at_30_epochs": round(hours * FULL_EPOCHS / epochs, 2),
        "span_s_by_size": {str(s): round(m, 1) for s, m in zip(sizes, means, strict=True)},
        "mean_epochs": round(epochs, 1),
    }


def summarise(sweep: Path, wall: float, exit_code: int, expected: int | None) -> dict:
    cells = []
    for path in sorted(sweep.glob("*/results.json")):
        r = json.loads(path.read_text())
        cells.append({
            "size": r["partition"]["size"], "partition": r["partition"]["partition"],
            "objective": r["objective"].rsplit(".", 1)[-1], "precision": r.get("precision"),
            "lockstep_cells": (r.get("lockstep") or {}).get("cells"), "epochs": r["epochs"],
            "best_epoch": r["best_epoch"], "test_f1": r["test"]["micro"]["f1"] if r.get("test") else None,
            "phase_s": r.get("phase_s"),
            "span_s": round(r["timeline"]["ended"] - r["timeline"]["started"], 2) if r.get("timeline") else None,
        })
    statuses = [json.loads(f.read_text()).get("status") for f in sweep.glob("*/failure.json")]
    interrupted = statuses.count("interrupted")  # stopped by the part's time limit: resumable, not failed
    out = {"sweep": str(sweep), "exit": exit_code, "wall_s": round(wall, 1), "cells_done": len(cells),
           "cells_failed": len(statuses) - interrupted, "cells_interrupted": interrupted,
           "cells_expected": expected,
           "cells_per_min": round(60 * len(cells) / wall, 2) if wall > 0 else None, "cells": cells}
    if expected and cells and wall > 0:
        # Every cell done: the part's wall time per cell. Cut short: cells done per second, a lower
        # bound on the rate (the cells in flight at the limit count for nothing).
        out["table2_hours_at_this_rate"] = round(wall * TABLE2_CELLS / len(cells) / 3600, 2)
        out["table2_rate_from"] = "every cell" if len(cells) == expected else "cells done when cut short"
        out.update(table2_by_size(cells, wall) or {})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--wall", type=float, default=0.0)
    ap.add_argument("--exit", type=int, default=0)
    ap.add_argument("--expected", type=int)
    args = ap.parse_args()
    record = summarise(args.sweep, args.wall, args.exit, args.expected)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1))
    brief = {k: v for k, v in record.items() if k != "cells"}
    f1 = [c["test_f1"] for c in record["cells"] if c["test_f1"] is not None]
    brief["test_f1_range"] = [min(f1), max(f1)] if f1 else None
    print(json.dumps(brief))


if __name__ == "__main__":
    main()

"""One part of the GPU check as JSON, from a sweep folder's results.json files (no torch import, a
second): what finished, at which precision, in which lockstep group, its selected epoch and test
F1, and — for a grid — the rate and its extrapolation to the AUC-2T paper's Table 2 grid.

    python benchmarks/gpu_check/summary.py SWEEP OUT.json --wall 123.4 --exit 0 [--expected 96]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

TABLE2_CELLS = 12 * 30 * 4  # 12 sizes x 30 partitions x 4 methods


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

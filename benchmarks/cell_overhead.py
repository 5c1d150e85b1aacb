"""What a cell costs beyond its fit, at this checkout and at an earlier revision, in interleaved
rounds of one invocation: one tiny-encoder cell as a process (its wall time, and the seconds its
``results.json`` accounts for) and a local sweep of eight tiny cells (its wall time). With the tiny
encoder a cell's compute is ~0, so what is measured is the fixed costs: imports, composition,
data, model load, Lightning's loops, writes.

    python benchmarks/cell_overhead.py --baseline 2761632 [--rounds 3] [--out F.json]

The baseline is checked out with ``git worktree`` and run with this environment's Python; both read
the same data folder (``NER_DATA_DIR`` or ``../shared/datasets``).
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from timing import checkouts, timed_process  # benchmarks/timing.py

REPO = Path(__file__).resolve().parents[1]
CELL = ["debug=tiny", "trainer.enable_progress_bar=false"]
SWEEP = ["debug=tiny", "loss=ce,focal", "size=20,50", "partition=0,1", "trainer.enable_progress_bar=false"]


def one_cell(checkout: Path, out: Path, data_dir: str) -> dict:
    _, wall = timed_process([sys.executable, "-m", "ner_lightning.run", f"hydra.run.dir={out}",
                             f"paths.data_dir={data_dir}", *CELL], cwd=checkout)
    res = json.loads((out / "results.json").read_text())
    return {"process_s": wall, "recorded_s": res["wall_time_s"], "phase_s": res["phase_s"]}


def eight_cells(checkout: Path, out: Path, data_dir: str) -> dict:
    _, wall = timed_process([sys.executable, "-m", "ner_lightning.run", "-m", f"hydra.sweep.dir={out}",
                             f"paths.data_dir={data_dir}", *SWEEP], cwd=checkout)
    results = [json.loads(p.read_text()) for p in sorted(out.glob("*/results.json"))]
    if len(results) != 8:
        raise RuntimeError(f"{out}: {len(results)} of 8 cells finished")
    return {"sweep_s": wall, "cells_recorded_s": sum(r["wall_time_s"] for r in results),
            "test_f1": [r["test"]["micro"]["f1"] for r in results]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", required=True, help="git revision to compare with")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None, help="write every round's figures as JSON here")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from ner_lightning.config import compose_config

    tmp = Path(tempfile.mkdtemp(prefix="cell_overhead_"))
    data_dir = str(compose_config([], tmp / "_compose").paths.data_dir)
    with checkouts(REPO, args.baseline, tmp / "baseline") as folders:
        runs: dict[str, list[dict]] = {name: [] for name in folders}
        for r in range(args.rounds):
            for name, checkout in (folders.items() if r % 2 == 0 else reversed(folders.items())):
                out = tmp / "runs" / name.split()[0] / str(r)
                runs[name].append({**one_cell(checkout, out / "cell", data_dir),
                                   **eight_cells(checkout, out / "sweep", data_dir)})
                shutil.rmtree(out, ignore_errors=True)
                print(f"round {r + 1}: {name}: cell {runs[name][-1]['process_s']:.1f} s (recorded "
                      f"{runs[name][-1]['recorded_s']:.1f} s), 8-cell sweep {runs[name][-1]['sweep_s']:.1f} s", flush=True)
    print(f"{'':28}{'cell s':>8}{'recorded':>10}{'accounted':>10}{'8 cells s':>10}")
    medians = {}
    for name, rs in runs.items():
        m = {k: statistics.median(r[k] for r in rs) for k in ("process_s", "recorded_s", "sweep_s")}
        m["accounted"] = statistics.median(r["recorded_s"] / r["process_s"] for r in rs)
        medians[name] = m
        print(f"{name:28}{m['process_s']:8.1f}{m['recorded_s']:10.1f}{m['accounted']:10.0%}{m['sweep_s']:10.1f}")
    a, b = medians.values()
    print(f"medians of {args.rounds} rounds, this / baseline: cell {b['process_s'] / a['process_s']:.2f}x, "
          f"8-cell sweep {b['sweep_s'] / a['sweep_s']:.2f}x; same test F1 in every sweep cell: "
          f"{all(r['test_f1'] == runs[next(iter(runs))][0]['test_f1'] for rs in runs.values() for r in rs)}")
    if args.out:
        Path(args.out).write_text(json.dumps({"runs": runs, "medians": medians, "argv": sys.argv}, indent=2))


if __name__ == "__main__":
    main()

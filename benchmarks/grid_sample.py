"""A fixed grid sample under several launchers, interleaved in rounds: wall time, cells per hour,
where the cells' time went (the sums of their ``phase_s``) and the Table 2 grid it extrapolates to.

    python benchmarks/grid_sample.py --launchers local,parallel --rounds 2 \\
        --out docs/bench_runs/workers_<date>/grid_sample.json
    python benchmarks/grid_sample.py --grid "loss=auc2t size=20,50,100,150,200,250,300,350,400,450,500,1000 \\
        partition=0,1,2,3,4,5,6,7" --extra "trainer=gpu logger=csv trainer.max_epochs=5" --launchers parallel
    python benchmarks/grid_sample.py --launchers parallel,lockstep,lockstep@89b00a3   # a launcher at another commit

A launcher written ``name@REV`` runs from a ``git worktree`` of ``REV`` (its own package and
configs; the data found as this checkout finds it), so a launcher can be compared with its own
earlier self in the same invocation.

Per cell it reports each phase and the seconds *around the step* (set-up — precision, data,
model —, dev scoring, test, writes, unaccounted: everything but training steps and the process's
start-up); the raw file keeps every cell's timeline (wall-clock start and end, its lockstep
group's fit and that fit's own phases).

The default sample is 32 tiny-encoder cells (CE and AUC-2T, sizes 20 and 50, partitions 0–7; the
closest CPU proxy of launch-bound GPU cells). Each launcher runs the sample in a fresh sweep folder
per round (rounds alternate the launchers' order). The extrapolation to the AUC-2T paper's Table 2
grid (12 sizes × 30 partitions × 4 methods = 1,440 cells) scales the sample's wall time by 1,440 /
its cells, so it is meaningful for a sample that keeps the grid's shape (all 12 sizes; ``--epochs-to``
also scales by 30 / the sample's ``trainer.max_epochs``).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from launchers import command  # benchmarks/launchers.py: the same command line per launcher
from timing import checkouts, timed_process, write_raw  # benchmarks/timing.py

ROOT = Path(__file__).resolve().parents[1]

SAMPLE = "loss=ce,auc2t size=20,50 partition=0,1,2,3,4,5,6,7"
TABLE2_CELLS = 12 * 30 * 4


AROUND_THE_STEP = ("precision", "data", "model", "dev", "test", "writes", "unaccounted")


def phase_sums(sweep: Path) -> tuple[int, dict[str, float], list[float], list[dict]]:
    """Finished cells, the sums of their phases, every cell's start-up, and the timeline: each
    cell's wall-clock span (and its lockstep group's fit, whole) in seconds from the sweep's first."""
    sums: dict[str, float] = defaultdict(float)
    startups, done, spans = [], 0, []
    for path in sorted(sweep.glob("*/results.json")):
        r = json.loads(path.read_text())
        done += 1
        for phase, seconds in (r.get("phase_s") or {}).items():
            sums[phase] += seconds
        startups.append((r.get("phase_s") or {}).get("startup", float("nan")))
        if r.get("timeline"):
            group = r.get("lockstep") or {}
            spans.append({"cell": path.parent.name, **r["timeline"], "fit": group.get("fit_timeline"),
                          "fit_phase_s": group.get("fit_phase_s")})
    first = min((s["started"] for s in spans), default=0.0)
    for s in spans:
        s["started"], s["ended"] = round(s["started"] - first, 3), round(s["ended"] - first, 3)
        if s["fit"]:
            s["fit"] = {k: round(v - first, 3) for k, v in s["fit"].items()}
    return done, dict(sums), startups, spans


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", default=SAMPLE)
    ap.add_argument("--extra", default="debug=tiny trainer.max_epochs=10")
    ap.add_argument("--launchers", default="local,parallel")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--epochs-to", type=int, help="also scale the extrapolation to this many epochs per cell")
    ap.add_argument("--root", type=Path, default=Path("/tmp/grid_sample"))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    launchers = args.launchers.split(",")
    runs = []
    env = dict(os.environ, NER_DATA_DIR=os.environ.get("NER_DATA_DIR", str(ROOT.parent / "shared" / "datasets")))
    with contextlib.ExitStack() as stack:
        where = {rev: next(iter(stack.enter_context(checkouts(ROOT, rev, args.root / f"worktree_{rev}")).values()))
                 for rev in {launcher.partition("@")[2] for launcher in launchers} - {""}}
        for rnd in range(args.rounds):
            for launcher in launchers if rnd % 2 == 0 else reversed(launchers):
                runs.append(_round(args, launcher, rnd, where, env))
    _summary(args, launchers, runs)


def _round(args, launcher: str, rnd: int, where: dict, env: dict) -> dict:
    """One run of the sample under ``launcher`` (``name[:overrides][@REV]``) in a fresh sweep folder."""
    name, _, rev = launcher.partition("@")
    sweep = args.root / f"{launcher.replace(':', '_').replace('@', '_at_')}_{rnd}"
    shutil.rmtree(sweep, ignore_errors=True)
    args.root.mkdir(parents=True, exist_ok=True)
    _, wall = timed_process(command(args.grid, args.extra, sweep, name), cwd=where.get(rev), env=env,
                            log=sweep.with_suffix(".log"), check=False)
    done, sums, startups, timeline = phase_sums(sweep)
    print(f"round {rnd}: {launcher} {done} cells in {wall:.1f} s", file=sys.stderr, flush=True)
    return {"launcher": launcher, "round": rnd, "wall_s": wall, "cells": done, "phase_s": sums,
            "startup_s": sorted(startups), "timeline": timeline}


def _summary(args, launchers: list[str], runs: list[dict]) -> None:
    epochs = next((int(a.split("=", 1)[1]) for a in shlex.split(args.extra) if a.startswith("trainer.max_epochs=")), None)
    scale = (args.epochs_to / epochs) if args.epochs_to and epochs else 1.0
    print("| launcher | cells | wall (median) | cells / hour | start-up after each worker's first (median) | "
          "phase sums (s) | Table 2 grid at this rate |\n|---|---|---|---|---|---|---|")
    summary = {}
    for launcher in launchers:
        mine = [r for r in runs if r["launcher"] == launcher]
        wall = statistics.median(r["wall_s"] for r in mine)
        cells = mine[0]["cells"]
        later = statistics.median(s for r in mine for s in r["startup_s"][_workers(launcher):])
        sums = {k: round(statistics.median(r["phase_s"].get(k, 0.0) for r in mine), 1) for k in mine[0]["phase_s"]}
        grid_h = wall * TABLE2_CELLS / max(cells, 1) * scale / 3600
        per_cell = {k: round(statistics.median(r["phase_s"].get(k, 0.0) / max(r["cells"], 1) for r in mine), 3)
                    for k in mine[0]["phase_s"]}
        around = round(sum(per_cell.get(k, 0.0) for k in AROUND_THE_STEP), 3)
        summary[launcher] = {"wall_s": wall, "cells": cells, "later_startup_s": later, "phase_sums_s": sums,
                             "per_cell_s": per_cell, "around_the_step_per_cell_s": around, "table2_hours": grid_h}
        print(f"| {launcher} | {cells} | {wall:.1f} s | {3600 * cells / wall:.0f} | {later:.2f} s | "
              + ", ".join(f"{k} {v}" for k, v in sums.items()) + f" | {grid_h:.2f} h |")
    print("\nper cell (s): " + "; ".join(
        f"{name}: around the step {s['around_the_step_per_cell_s']:.3f} ("
        + ", ".join(f"{k} {s['per_cell_s'].get(k, 0.0):.3f}" for k in AROUND_THE_STEP)
        + f"), train {s['per_cell_s'].get('train', 0.0):.3f}" for name, s in summary.items()))
    if len(launchers) > 1:
        base = summary[launchers[0]]["wall_s"]
        print("\n" + "; ".join(f"{name}: {base / s['wall_s']:.2f}× the speed of {launchers[0]}"
                               for name, s in list(summary.items())[1:]))
    if args.out:
        write_raw(args.out, {"grid": args.grid, "extra": args.extra, "runs": runs, "summary": summary})


def _workers(launcher: str) -> int:
    """Cells that paid a process start-up: one per worker (the sample's first cells)."""
    launcher = launcher.partition("@")[0]
    if not launcher.startswith(("parallel", "lockstep")):
        return 1
    own = dict(o.split("=", 1) for o in launcher.split(":")[1:])
    return int(own.get("hydra.launcher.n_jobs", min(os.cpu_count() or 1, 8)))


if __name__ == "__main__":
    main()

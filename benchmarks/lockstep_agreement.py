"""Lockstep cells against the same cells alone: paired test-F1 differences per partition (mean,
95 % t-interval — which should hold 0, since with dropout a lockstep cell is another draw of the
same experiment) and the wall time of each way, in one invocation:

    python benchmarks/lockstep_agreement.py --out docs/bench_runs/<folder>/lockstep_agreement.json
    python benchmarks/lockstep_agreement.py --extra "trainer=gpu" --alone parallel   # on a GPU (gpu_check/run.sh)

Default: 16 CE cells (size 50, partitions 0–15) of the default encoder; ``--alone`` names the
launcher the cells run alone under (``local``, one after another, or ``parallel``). On a CPU the
lockstep launcher runs MiniLM cells alone (``cpu_max_hidden``): pass
``--lockstep-extra hydra.launcher.cpu_max_hidden=1024`` to group them anyway.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from launchers import command  # noqa: E402  benchmarks/launchers.py: the same command line per launcher
from timing import timed_process, write_raw  # noqa: E402  benchmarks/timing.py

from ner_lightning.report.stats import t_interval  # noqa: E402

GRID = "loss=ce size=50 partition=" + ",".join(str(p) for p in range(16))


def test_f1(sweep: Path) -> dict[int, float]:
    """Test micro-F1 of every finished cell, by partition."""
    out = {}
    for path in sweep.glob("*/results.json"):
        r = json.loads(path.read_text())
        out[r["partition"]["partition"]] = r["test"]["micro"]["f1"]
    return out


def bounded(cmd: list[str], log: Path, timeout: float | None) -> tuple[int, float]:
    """``cmd`` to its end or ``timeout`` seconds, then SIGTERM to its whole process group (the
    launcher's workers too); its exit code (124 when stopped) and wall seconds."""
    if timeout is None:
        return timed_process(cmd, log=log, check=False)
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            rc = 124
    return rc, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", default=GRID)
    ap.add_argument("--extra", default="", help="overrides of both runs (trainer=gpu, trainer.max_epochs=…)")
    ap.add_argument("--lockstep-extra", default="", help="overrides of the lockstep run only")
    ap.add_argument("--alone", default="local", help="the launcher of the cells alone: local or parallel")
    ap.add_argument("--timeout", type=float, help="seconds each way may run (then it is stopped: its finished cells count)")
    ap.add_argument("--root", type=Path, default=Path("/tmp/lockstep_agreement"))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    runs = {}
    for name, launcher, extra in (("alone", args.alone, args.extra), ("lockstep", "lockstep", f"{args.extra} {args.lockstep_extra}")):
        sweep = args.root / name
        shutil.rmtree(sweep, ignore_errors=True)
        args.root.mkdir(parents=True, exist_ok=True)
        rc, wall = bounded(command(args.grid, extra, sweep, launcher), sweep.with_suffix(".log"), args.timeout)
        runs[name] = {"launcher": launcher, "exit": rc, "wall_s": wall, "test_f1": test_f1(sweep)}
        print(f"{name} ({launcher}): {len(runs[name]['test_f1'])} cells in {wall:.1f} s (exit {rc})", file=sys.stderr)
        if args.out:  # as it goes: a run cut short keeps what ran before
            write_raw(args.out, {"grid": args.grid, "extra": args.extra, "runs": runs, "complete": False})
    paired = sorted(set(runs["alone"]["test_f1"]) & set(runs["lockstep"]["test_f1"]))
    deltas = [runs["lockstep"]["test_f1"][p] - runs["alone"]["test_f1"][p] for p in paired]
    mean = statistics.fmean(deltas) if deltas else float("nan")
    sd = statistics.stdev(deltas) if len(deltas) > 1 else float("nan")
    low, high = t_interval(mean, sd, len(deltas), 0.025) if len(deltas) > 1 else (float("nan"), float("nan"))
    ratio = runs["alone"]["wall_s"] / runs["lockstep"]["wall_s"]
    print(f"| cells paired | mean test F1 alone | lockstep − alone (mean) | 95 % interval | holds 0 | wall alone | "
          f"wall lockstep | speed-up |\n|---|---|---|---|---|---|---|---|\n| {len(paired)} | "
          f"{statistics.fmean(runs['alone']['test_f1'][p] for p in paired):.4f} | {mean:+.4f} | [{low:+.4f}, {high:+.4f}] | "
          f"{'yes' if low <= 0 <= high else 'no'} | {runs['alone']['wall_s']:.1f} s | {runs['lockstep']['wall_s']:.1f} s | "
          f"{ratio:.2f}× |")
    if args.out:
        write_raw(args.out, {"grid": args.grid, "extra": args.extra, "lockstep_extra": args.lockstep_extra,
                             "runs": runs, "complete": True, "paired": paired, "deltas": deltas, "mean": mean, "interval_95": [low, high], "speedup": ratio})

if __name__ == "__main__":
    main()

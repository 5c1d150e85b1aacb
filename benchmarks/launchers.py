"""One grid through several launchers, a sweep killed and resumed, and what a sweep prints:
markdown on stdout.

    python benchmarks/launchers.py compare --launchers local,parallel,slurm_local,slurm \\
        --grid "loss=auc2t,ce size=20,50" --extra "trainer.max_epochs=2 data.dev_size=200"
    python benchmarks/launchers.py resume --grid "loss=ce,crf,ce2t size=20,50" --kill-during 4
    python benchmarks/launchers.py console -- python -m ner_lightning.run -m loss=auc2t,ce size=20,50

``compare`` runs the same ``python -m ner_lightning.run -m <grid> <extra>`` once per launcher
(each in its own sweep folder under ``--root``), times it, and tabulates every cell's test
micro-F1 per launcher (same config + seed ⇒ the same scores) and the device it ran on. A
launcher may carry its own overrides after colons, e.g. ``parallel:hydra.launcher.cells_per_gpu=1``
(several cells per GPU against one); ``--out F`` also writes the figures as JSON.
``resume`` runs the grid uninterrupted, then again in a new folder killed (SIGKILL of the whole
process group) while cell ``--kill-during`` runs, reruns the same command there and compares.
``slurm`` needs a SLURM cluster (``benchmarks/slurm_localhost.sh`` starts one on this machine).
``console`` runs the command after ``--`` and counts the console lines per cell outside progress
bars: a bar redraws itself with carriage returns (tqdm) or cursor moves (rich); those updates,
and the metric columns a bar wraps onto following lines in a narrow terminal, count as the bar.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from timing import timed_process  # benchmarks/timing.py

SLURM_LOCALHOST = ["hydra.launcher.partition=debug", "hydra.launcher.gpus_per_node=null",
                   "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=4", "hydra.launcher.timeout_min=60"]


def command(grid: str, extra: str, sweep_dir: Path, launcher: str) -> list[str]:
    """``launcher``: a hydra/launcher name, optionally with its own overrides after colons."""
    launcher, *own = launcher.split(":")
    args = [sys.executable, "-m", "ner_lightning.run", "-m", *shlex.split(grid), *shlex.split(extra),
            f"hydra/launcher={launcher}", *own, f"hydra.sweep.dir={sweep_dir}", "logger=csv",
            "trainer.enable_progress_bar=false"]
    if launcher == "slurm":
        args += SLURM_LOCALHOST
    return args


def cells(sweep_dir: Path) -> dict:
    manifest = json.loads((sweep_dir / "manifest.json").read_text())
    out = {}
    for c in manifest["cells"]:
        f = sweep_dir / c["dir"] / "results.json"
        r = json.loads(f.read_text()) if f.is_file() else None
        out[" ".join(c["overrides"])] = r
    return out


def run(args: list[str], log: Path) -> tuple[int, float]:
    return timed_process(args, log=log, check=False)


def folder(launcher: str) -> str:
    """A launcher spec as a folder name Hydra can take as a path value (no ``:`` or ``=``)."""
    return re.sub(r"[^\w.-]+", "_", launcher)


def compare(ns) -> None:
    root = Path(ns.root)
    timing, scores = {}, {}
    for launcher in ns.launchers.split(","):
        sweep = root / folder(launcher)
        args = command(ns.grid, ns.extra, sweep, launcher)
        print(f"running: {shlex.join(args[1:])}", file=sys.stderr, flush=True)
        rc, wall = run(args, root / f"{folder(launcher)}.log")
        timing[launcher] = (rc, wall)
        scores[launcher] = cells(sweep)
    names = list(timing)
    print(f"Grid `-m {ns.grid} {ns.extra}`, one sweep per launcher (`python benchmarks/launchers.py compare "
          f"--launchers {ns.launchers} --grid \"{ns.grid}\" --extra \"{ns.extra}\"`).\n")
    print("| cell | " + " | ".join(f"test F1 ({n})" for n in names) + " | same |")
    print("|---|" + "---:|" * len(names) + "---|")
    for key in scores[names[0]]:
        vals = [scores[n][key]["test"]["micro"]["f1"] if scores[n].get(key) else None for n in names]
        same = all(v is not None and v == vals[0] for v in vals)
        print(f"| {key} | " + " | ".join("—" if v is None else f"{v:.4f}" for v in vals) + f" | {'yes' if same else 'NO'} |")
    reference = "local" if "local" in timing else names[0]
    print(f"\n| launcher | exit code | wall time (s) | ratio to {reference} | devices (slot / accelerator / threads / pid) |")
    print("|---|---:|---:|---:|---|")
    base = timing[reference][1]
    for n in names:
        rc, wall = timing[n]
        devs = sorted({(str((r or {}).get("device", {}).get("slot")), (r or {}).get("device", {}).get("accelerator"),
                        str((r or {}).get("device", {}).get("threads")), str((r or {}).get("device", {}).get("pid")))
                       for r in scores[n].values() if r})
        ratio = f"{base / wall:.2f}×" if base else "—"
        print(f"| {n} | {rc} | {wall:.0f} | {ratio} | {'; '.join('/'.join(d) for d in devs)} |")
    if ns.out:
        Path(ns.out).write_text(json.dumps({
            "command": " ".join(sys.argv), "grid": ns.grid, "extra": ns.extra,
            "launchers": {n: {"exit_code": timing[n][0], "wall_s": round(timing[n][1], 1),
                              "cells": {k: None if r is None else {
                                  "test_f1": r["test"]["micro"]["f1"], "wall_time_s": r.get("wall_time_s"),
                                  "device": r.get("device"), "throughput": r.get("throughput")}
                                  for k, r in scores[n].items()}} for n in names}}, indent=1))


def resume(ns) -> None:
    root = Path(ns.root)
    whole_dir, cut_dir = root / "uninterrupted", root / "killed_then_resumed"
    rc, wall = run(command(ns.grid, ns.extra, whole_dir, ns.launcher), root / "uninterrupted.log")
    whole = cells(whole_dir)
    args = command(ns.grid, ns.extra, cut_dir, ns.launcher)
    log = (root / "killed.log").open("w")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    target = ns.kill_during - 1
    while proc.poll() is None:
        started = list(cut_dir.glob(f"{target}_*/cell.json"))
        if started and time.time() - started[0].stat().st_mtime > ns.kill_after_s:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.5)
    proc.wait()
    status = subprocess.run([sys.executable, "-m", "ner_lightning.sweep", "status", str(cut_dir)],
                            capture_output=True, text=True).stdout.strip()
    survived = {k for k, r in cells(cut_dir).items() if r}
    rc2, wall2 = run(args, root / "resumed.log")
    said = [line.split("] ", 1)[-1] for line in (root / "resumed.log").read_text().splitlines() if "to run" in line]
    again = cells(cut_dir)
    print(f"Grid `-m {ns.grid} {ns.extra}` ({ns.launcher}); killed with SIGKILL {ns.kill_after_s:.0f} s into cell "
          f"{ns.kill_during} (`python benchmarks/launchers.py resume --grid \"{ns.grid}\" --extra \"{ns.extra}\" "
          f"--kill-during {ns.kill_during}`).\n")
    print(f"- after the kill, `python -m ner_lightning.sweep status`: `{status.splitlines()[0] if status else ''}`")
    print(f"- the rerun of the same command said: `{said[0] if said else '?'}` (exit code {rc2}, {wall2:.0f} s; "
          f"uninterrupted sweep {wall:.0f} s, exit code {rc})\n")
    print("| cell | test F1 uninterrupted | test F1 killed + resumed | same | ran in the rerun |")
    print("|---|---:|---:|---|---|")
    for key, r in whole.items():
        a, b = r["test"]["micro"]["f1"], again[key]["test"]["micro"]["f1"]
        print(f"| {key} | {a:.4f} | {b:.4f} | {'yes' if a == b else 'NO'} | {'no (done)' if key in survived else 'yes'} |")


BAR = re.compile(r"\r|\x1b\[|it/s\]|s/it\]|^\s*(Epoch|Validation|Testing|Sanity Checking)\b")
WRAPPED_METRIC = re.compile(r"^\s{20,}\S.*$")  # a bar's metric column wrapped onto its own line


def console(command: list[str]) -> int:
    """Console lines per cell of a sweep, progress bars left out (see the module docstring)."""
    t0 = time.monotonic()
    proc = subprocess.run(command, capture_output=True, text=True)
    lines = (proc.stdout + proc.stderr).split("\n")
    kept = [line for line in lines if line.strip() and not BAR.search(line) and not WRAPPED_METRIC.match(line)]
    cells = max(1, sum(" | train: " in line for line in kept))
    print("\n".join(kept))
    print(f"\n{len(kept)} lines outside progress bars for {cells} cells: {len(kept) / cells:.1f} per cell "
          f"(exit code {proc.returncode}, {time.monotonic() - t0:.0f} s)")
    return proc.returncode


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("compare")
    c.add_argument("--launchers", default="local,parallel,slurm_local")
    c.add_argument("--out", default=None, help="also write the figures to this JSON file")
    r = sub.add_parser("resume")
    r.add_argument("--launcher", default="local")
    r.add_argument("--kill-during", type=int, default=4, help="cell number (1-based) running when the sweep is killed")
    r.add_argument("--kill-after-s", type=float, default=20.0, help="seconds into that cell")
    for q in (c, r):
        q.add_argument("--grid", default="loss=auc2t,ce size=20,50")
        q.add_argument("--extra", default="trainer.max_epochs=2 trainer.min_epochs=2 data.dev_size=200")
        q.add_argument("--root", default=f"multirun/launchers/{time.strftime('%Y-%m-%d_%H-%M-%S')}")
    k = sub.add_parser("console", help="the command after -- and its console lines per cell")
    k.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    ns = p.parse_args()
    if ns.mode == "console":
        command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
        if not command:
            raise SystemExit(__doc__)
        sys.exit(console(command))
    Path(ns.root).mkdir(parents=True, exist_ok=True)
    compare(ns) if ns.mode == "compare" else resume(ns)


if __name__ == "__main__":
    main()

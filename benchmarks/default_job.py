"""The default job (``python -m ner_lightning.run``, = ``make run``) at this checkout and at an
earlier revision, one after the other in one invocation: wall time, its phases, the selected
epoch and the scores.

    python benchmarks/default_job.py [--baseline 3743ddb] [--out F.json] [overrides ...]

Without ``--baseline``: the default job at this checkout alone, as a process (its wall time beside
the seconds its ``results.json`` accounts for, and their phases).

The baseline is checked out with ``git worktree`` into a temporary folder and run with this
environment's Python (same packages); both read the same data folder. Overrides apply to both.
The two runs are sequential: on a shared VM their times vary by several per cent from run
to run (the same dev forward took 447 s and 476 s in two runs of 2026-11-23).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from timing import checkouts, fit_seconds, timed_process  # benchmarks/timing.py

REPO = Path(__file__).resolve().parents[1]


def run(checkout: Path, out: Path, overrides: list[str]) -> dict:
    from ner_lightning.config import compose_config

    data_dir = compose_config([], out / "_compose").paths.data_dir
    cmd = [sys.executable, "-m", "ner_lightning.run", f"hydra.run.dir={out}", f"paths.data_dir={data_dir}",
           "trainer.enable_progress_bar=false", *overrides]
    _, wall = timed_process(cmd, cwd=checkout)
    res = json.loads((out / "results.json").read_text())
    return {"wall_s": wall, "recorded_s": res["wall_time_s"], "phase_s": res["phase_s"], "best_epoch": res["best_epoch"], "epochs": res["epochs"],
            "dev_f1": res["dev_monitor"], "test_f1": res["test"]["micro"]["f1"],
            "eval_s": res["throughput"]["eval_seconds"], "train_s": res["throughput"]["train_seconds"],
            "precision": res.get("precision"), "throughput": res["throughput"],
            "max_epochs": res["config"]["trainer"]["max_epochs"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default=None, help="git revision to compare with (none: this checkout alone)")
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="default_job_"))
    rows = {}
    with checkouts(REPO, args.baseline, tmp / "baseline") as folders:
        for name, checkout in folders.items():
            print(f"running the default job at {name} ...", flush=True)
            rows[name] = run(checkout, tmp / "runs" / name.split()[0], args.overrides)
    print(f"{'':28}{'wall s':>8}{'recorded s':>11}{'fit s':>7}{'test s':>7}{'eval-in-batches s':>18}{'best epoch':>11}"
          f"{'dev F1':>8}{'test F1':>8}")
    for name, r in rows.items():
        print(f"{name:28}{r['wall_s']:8.1f}{r['recorded_s']:11.1f}{fit_seconds(r['phase_s']):7.0f}{r['phase_s']['test']:7.0f}"
              f"{r['eval_s']:18.0f}{r['best_epoch']:>11}{r['dev_f1']:8.4f}{r['test_f1']:8.4f}")
    for name, r in rows.items():
        print(f"{name}: phases " + ", ".join(f"{k} {v:.1f}" for k, v in r["phase_s"].items()))
    if args.baseline:
        a, b = rows.values()
        print(f"wall time this / baseline: {b['wall_s'] / a['wall_s']:.2f}x; same selected epoch: "
              f"{a['best_epoch'] == b['best_epoch']}")
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "argv": sys.argv}, indent=2))


if __name__ == "__main__":
    main()

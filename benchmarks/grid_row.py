"""Time of one paper grid row — one loss × the AUC-2T paper's 12 training sizes × 30 partitions
(its Table 2) — extrapolated from cells measured here, one after another on this machine.

    python benchmarks/grid_row.py [--measure 20,200,1000] [--partitions 30] [--out F] [overrides ...]

Runs ``python -m ner_lightning.run size=S partition=0 <overrides>`` (with ``default_job.run``;
the default protocol unless overridden: CE, MiniLM, full dev after every epoch, early stopping)
at each measured size, fits
seconds per epoch = a + b·size over those cells (a: the dev evaluation and the epoch's fixed
costs, b: training per sentence) and predicts every size of the row:

    cell(size) = start-up, set-up and test (mean of the measured cells) + epochs × (a + b·size)

at two epoch counts: ``trainer.max_epochs`` for every cell (an upper bound) and the measured
cells' epochs interpolated in size (early stopping; one partition per size, so a rough figure).
A row is ``--partitions`` times the sum over sizes, cells run one at a time on one device.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np
from default_job import REPO, run  # the same subprocess run of one cell and its results.json
from timing import fit_seconds  # benchmarks/timing.py

PAPER_SIZES = (20, 50, 100, 150, 200, 250, 300, 350, 400, 450, 500, 1000)  # AUC-2T paper, Table 2


def device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.processor())
    return f"CPU: {model}, {torch.get_num_threads()} threads"


def run_cell(size: int, out: Path, overrides: list[str]) -> dict:
    r = run(REPO, out, [f"size={size}", "partition=0", *overrides])
    return {"size": size, "wall_s": round(r["wall_s"], 1), "fit_s": fit_seconds(r["phase_s"]), "epochs": r["epochs"],
            "epoch_s": round(fit_seconds(r["phase_s"]) / r["epochs"], 3), "fixed_s": round(r["wall_s"] - fit_seconds(r["phase_s"]), 1),
            "max_epochs": r["max_epochs"], "test_f1": r["test_f1"], "precision": r["precision"],
            "train_tok_per_s": r["throughput"].get("train_tokens_per_s"),
            "eval_tok_per_s": r["throughput"].get("eval_tokens_per_s")}


def extrapolate(cells: list[dict], sizes: tuple[int, ...], partitions: int) -> dict:
    """Per-size predictions and row totals from the measured cells (see the module docstring)."""
    xs = np.array([c["size"] for c in cells], float)
    b, a = np.polyfit(xs, [c["epoch_s"] for c in cells], 1) if len(cells) > 1 else (0.0, cells[0]["epoch_s"])
    fixed = float(np.mean([c["fixed_s"] for c in cells]))
    order = np.argsort(xs)
    max_epochs = cells[0]["max_epochs"]
    rows = []
    for s in sizes:
        epochs = float(np.interp(s, xs[order], np.array([c["epochs"] for c in cells], float)[order]))
        per_epoch = a + b * s
        rows.append({"size": s, "epoch_s": round(per_epoch, 2), "epochs_measured": round(epochs, 1),
                     "cell_s_max_epochs": round(fixed + max_epochs * per_epoch, 1),
                     "cell_s_measured_epochs": round(fixed + epochs * per_epoch, 1)})
    total = {k: partitions * sum(r[k] for r in rows) for k in ("cell_s_max_epochs", "cell_s_measured_epochs")}
    return {"a_s": round(float(a), 3), "b_s_per_sentence": round(float(b), 5), "fixed_s": round(fixed, 1),
            "per_size": rows, "row_s": total, "partitions": partitions}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--measure", default="20,200,1000", help="sizes to run a cell at (comma-separated)")
    ap.add_argument("--partitions", type=int, default=30, help="partitions per size in the row (the paper: 30)")
    ap.add_argument("--out", default=None, help="write the cells and the extrapolation as JSON here")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides for every cell (e.g. loss=auc2t)")
    args = ap.parse_args()
    measure = [int(s) for s in args.measure.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="grid_row_"))
    device = device_name()
    print(f"device: {device}; measuring sizes {measure}, overrides {args.overrides or '(defaults)'}", flush=True)
    cells = []
    for size in measure:
        print(f"  cell size={size} ...", end=" ", flush=True)
        cells.append(run_cell(size, tmp / f"size{size}", args.overrides))
        c = cells[-1]
        print(f"{c['wall_s']:.0f} s, {c['epochs']} epochs of {c['epoch_s']:.2f} s, train {c['train_tok_per_s']} tok/s, "
              f"eval {c['eval_tok_per_s']} tok/s, test F1 {c['test_f1']:.4f}", flush=True)
    ex = extrapolate(cells, PAPER_SIZES, args.partitions)
    if ex["b_s_per_sentence"] <= 0:
        print("warning: seconds per epoch do not grow with size here (sizes too close, or too few epochs to time): "
              "the extrapolation below is not meaningful; measure sizes further apart", flush=True)
    print(f"seconds per epoch = {ex['a_s']:.2f} + {ex['b_s_per_sentence']:.5f} × size; start-up, set-up and test "
          f"{ex['fixed_s']:.0f} s a cell")
    print(f"{'size':>6}{'s/epoch':>9}{'epochs (measured, interp.)':>28}{'cell s @ max':>14}{'cell s @ measured':>19}")
    for r in ex["per_size"]:
        print(f"{r['size']:>6}{r['epoch_s']:>9.2f}{r['epochs_measured']:>28.1f}{r['cell_s_max_epochs']:>14.0f}"
              f"{r['cell_s_measured_epochs']:>19.0f}")
    for k, label in (("cell_s_max_epochs", f"every cell {cells[0]['max_epochs']} epochs (upper bound)"),
                     ("cell_s_measured_epochs", "measured epochs (early stopping)")):
        print(f"one grid row, 12 sizes × {args.partitions} partitions, one cell at a time, {label}: "
              f"{ex['row_s'][k] / 3600:.1f} h")
    if args.out:
        Path(args.out).write_text(json.dumps({"device": device, "cells": cells, "extrapolation": ex, "argv": sys.argv},
                                             indent=2))


if __name__ == "__main__":
    main()

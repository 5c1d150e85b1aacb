"""One lockstep step of K cells against the same K cells' steps one after another (a plain loop of
each cell's family step: training loss, backward, clipping, AdamW), interleaved in rounds, medians:

    python benchmarks/lockstep_step.py --out docs/bench_runs/lockstep_<date>/lockstep_step.json

Cells: CE on real CoNLL-2003 (size 50, partition 0: cell k trains on the partition's batch k of 8
sentences), fp32, each with its own initialisation; ``--models tiny,minilm``, ``--cells 8,16``,
``--device cuda`` on a GPU (``make gpu-check``), ``--precisions 32,bf16`` (bf16: both sides under
``torch.autocast`` for the loop, the encoder in bf16 for the stack, as a group runs it). Evaluation
too: the K models' scores of one dev batch that every cell reads, one vmapped forward against K
forwards one after another, and the largest difference between the two (same weights).
The lockstep step runs the padded batch (no packing: ``vmap`` needs fixed shapes), the loop runs
each cell as training does (packed, ``model.pack=true``). Prints a Markdown table; ``--out`` also
writes the raw times (JSON) beside the machine and commit.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ner_lightning.config import compose_config, complete_config  # noqa: E402
from ner_lightning.lockstep.stacking import StackedCells, build_cells, stack_batches  # noqa: E402
from timing import write_raw  # noqa: E402  benchmarks/timing.py


def cells(model: str, k: int, out: Path, device: str = "cpu"):
    """``k`` CE cells of ``model`` (fp32) on ``device``, their training batches and the pad id."""
    cfg = complete_config(compose_config([f"model={model}", "trainer=cpu", "trainer.precision=32-true",
                                          "logger=csv", "size=50", "data.batch_size=8"], out))
    modules, datamodule = build_cells(cfg, [100 + i for i in range(k)])
    modules = [m.to(device) for m in modules]
    batches = [datamodule.transfer_batch_to_device(b, torch.device(device), 0) for b in datamodule.train_dataloader()]
    return modules, [batches[i % len(batches)] for i in range(k)], datamodule.tokenizer.pad_token_id, cfg


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def loop_step(modules, optimizers, batches, clip: float) -> None:
    for module, optimizer, batch in zip(modules, optimizers, batches):
        loss = module.training_loss(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in module.parameters() if p.requires_grad], clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


@torch.no_grad()
def loop_scores(modules, batch: dict) -> torch.Tensor:
    """Each model's scores of the same batch, one model after another, dropout off."""
    out = []
    for module in modules:
        module.eval()
        out.append(module.padded_scores(batch))
        module.train()
    return torch.stack(out)


def _timed(fn, device: str) -> float:
    _sync(device)
    t = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t


def measure(model: str, k: int, rounds: int, out: Path, device: str = "cpu", precision: str = "32") -> dict:
    modules, batches, pad, cfg = cells(model, k, out, device)
    clip = float(cfg.trainer.gradient_clip_val)
    alone = [copy.deepcopy(m) for m in modules]
    optimizers = [m.optimizer_factory(params=m.optimizer_parameters()) for m in alone]
    stack = StackedCells(modules)
    optimizer = modules[0].optimizer_factory(params=stack.optimizer_groups())
    dtype = torch.bfloat16 if precision == "bf16" else None
    stacked, shared = stack_batches(batches, pad), batches[0]

    def group_step() -> None:  # as a lockstep group's training_step takes it
        stack.step(stacked, optimizer, clip, dtype)

    def group_scores() -> torch.Tensor:
        return stack.scores(shared, list(range(k)), dtype)

    autocast = torch.autocast(device.split(":")[0], dtype=torch.bfloat16, enabled=precision == "bf16")
    with autocast:
        eval_diff = float((loop_scores(alone, shared).float() - group_scores().float()).abs().max())
        loop_step(alone, optimizers, batches, clip)  # warm-up
    group_step()
    times: dict[str, list[float]] = {"loop": [], "lockstep": [], "eval_loop": [], "eval_lockstep": []}
    for _ in range(rounds):
        with autocast:
            times["loop"].append(_timed(lambda: loop_step(alone, optimizers, batches, clip), device))
        times["lockstep"].append(_timed(group_step, device))
        with autocast:
            times["eval_loop"].append(_timed(lambda: loop_scores(alone, shared), device))
        times["eval_lockstep"].append(_timed(group_scores, device))
    med = {key: statistics.median(v) for key, v in times.items()}
    tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    return {"model": model, "cells": k, "device": device, "precision": precision, "rounds": rounds,
            "real_tokens_per_step": tokens, "padded_tokens_per_step": int(stacked["attention_mask"].numel()),
            "times_s": times, "median_loop_s": med["loop"], "median_lockstep_s": med["lockstep"],
            "speedup": med["loop"] / med["lockstep"], "median_eval_loop_s": med["eval_loop"],
            "median_eval_lockstep_s": med["eval_lockstep"], "eval_speedup": med["eval_loop"] / med["eval_lockstep"],
            "eval_max_abs_diff": eval_diff}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="tiny,minilm")
    ap.add_argument("--cells", default="8,16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (make gpu-check)")
    ap.add_argument("--precisions", default="32", help="32, bf16 or both (32,bf16)")
    ap.add_argument("--out", type=Path, help="write the raw times here (JSON)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    work = Path("/tmp/lockstep_bench")
    rows = []
    for m in args.models.split(","):
        for k in args.cells.split(","):
            for precision in args.precisions.split(","):
                rows.append(measure(m, int(k), args.rounds, work, args.device, precision))
                print(json.dumps({key: v for key, v in rows[-1].items() if key != "times_s"}), flush=True)
    print("| encoder | cells | precision | loop of the cells' steps | one lockstep step | speed-up "
          "| K forwards (eval) | one stacked forward | speed-up | max |Δ score| |\n|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['cells']} | {r['precision']} | {1e3 * r['median_loop_s']:.1f} ms "
              f"| {1e3 * r['median_lockstep_s']:.1f} ms | {r['speedup']:.2f}× | {1e3 * r['median_eval_loop_s']:.1f} ms "
              f"| {1e3 * r['median_eval_lockstep_s']:.1f} ms | {r['eval_speedup']:.2f}× | {r['eval_max_abs_diff']:.1e} |")
    if args.out:
        write_raw(args.out, {"machine": platform.processor() or platform.machine(), "cpu": _cpu(),
                             "threads": torch.get_num_threads(), "torch": torch.__version__, "rows": rows})


def _cpu() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

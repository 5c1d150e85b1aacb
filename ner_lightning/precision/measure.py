"""Measuring which precision is fastest for an encoder on this machine, and judging whether the
measurement can be trusted (the rules: ``ner_lightning.precision``'s docstring, which caches
the choice and has the command line)."""

from __future__ import annotations

import hashlib
import os
import platform
import statistics
import time
from functools import cache
from pathlib import Path

import torch

from ner_lightning import hardware

TRAIN_BATCH = (8, 48)  # sentences x sub-words: data.batch_size, a long CoNLL-2003 batch
EVAL_BATCH = (64, 32)  # data.eval_batch_size, a length-sorted batch of mid-length sentences
ROUNDS = 5  # interleaved rounds per candidate and stage
ROUND_S = 0.5  # seconds a round lasts at least
AGREE = 4  # rounds whose fastest candidate the choice must be within MARGIN of
MIN_CPU_SHARE = 0.75  # CPU: the process's CPU time / (wall time x threads) below this = another job competed
MARGIN = 1.05  # a low precision must be this much faster than fp32 to be chosen
SAFE = "32-true"
DTYPES = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16, "32-true": None}


def candidates(accelerator: str) -> tuple[list[str], str]:
    """The precisions worth measuring here and why the others are not."""
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ValueError(
            f"trainer.accelerator={accelerator} but this process sees no GPU, so the GPU's fastest precision cannot "
            "be measured here (a SLURM sweep composes every cell on the machine it is submitted from, and a cell's "
            "precision is part of its identity). Set it: trainer.precision=bf16-mixed "
            "callbacks.eval_precision.precision=bf16-mixed (or 32-true / 16-mixed; docs/gpu_and_cluster.md), "
            "or submit from a machine with the nodes' GPU"
        )
    if hardware.uses_gpu(accelerator):
        name = torch.cuda.get_device_name()
        if torch.cuda.is_bf16_supported():
            return ["32-true", "bf16-mixed", "16-mixed"], f"{name} has native bf16"
        return ["32-true", "16-mixed"], f"{name} has no bf16: fp16 with loss scaling"
    native = [f for f in hardware.CPU_BF16_FLAGS if f in hardware.cpu_flags()]
    if native:
        return ["32-true", "bf16-mixed"], f"the CPU has {' and '.join(native)}"
    return ["32-true"], (
        "the CPU has no native bf16 (neither "
        + " nor ".join(hardware.CPU_BF16_FLAGS)
        + " in /proc/cpuinfo): emulated bf16 would be slower than fp32"
    )


def flags_choice(accelerator: str = "auto") -> tuple[str, str]:
    """``(Lightning precision, why)`` by the flags alone: the lowest precision worth measuring —
    what ``${best_precision:<accelerator>}`` without a model gives."""
    names, why = candidates(accelerator)
    return names[1] if len(names) > 1 else names[0], why


@cache
def _cpu_model() -> str:
    try:
        return next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def device_label(accelerator: str) -> str:
    if hardware.uses_gpu(accelerator):
        return f"cuda:{torch.cuda.get_device_name()}"
    flags = hashlib.sha256(" ".join(sorted(hardware.cpu_flags())).encode()).hexdigest()[:12]
    return f"cpu:{_cpu_model()}:flags {flags}"


def machine_load() -> tuple[float, int]:
    """(1-minute load average, cores) — a load at or above the core count means other work."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    return load, os.cpu_count() or 1


def batch_shapes(gpu: bool) -> dict[str, tuple[int, int]]:
    """The batches the candidates are timed on: ``TRAIN_BATCH``, and the evaluation batch a cell
    runs — ``EVAL_BATCH`` on a CPU; on a GPU as many of its sentences as ``data.eval_batch_tokens``
    holds (``hardware.GPU_EVAL_BATCH_TOKENS``): 64 sentences leave a GPU launch-bound, where every
    precision runs at the same speed and the rounds disagree by noise."""
    rows = hardware.GPU_EVAL_BATCH_TOKENS // EVAL_BATCH[1] if gpu else EVAL_BATCH[0]
    return {"train": TRAIN_BATCH, "eval": (rows, EVAL_BATCH[1])}


def measure_rounds(model: dict, names: list[str], device: str) -> dict:
    """Interleaved timed rounds of every candidate (see the module docstring): ``{"rates":
    {name: {"train": [tok/s per round], "eval": [...]}}, "cpu_share": float | None}``;
    ``cpu_share``: the process's CPU time over wall time x threads (None on a GPU)."""
    from hydra.utils import instantiate

    torch.manual_seed(0)
    encoder = instantiate(model).to(device)
    opt = torch.optim.AdamW(encoder.parameters(), lr=1e-6, fused=True)
    inputs = {
        stage: torch.randint(1000, 2000, shape, device=device)
        for stage, shape in batch_shapes(device.startswith("cuda")).items()
    }

    def step(name: str, stage: str) -> None:
        ids = inputs[stage]
        dtype = DTYPES[name]
        with torch.autocast(torch.device(device).type, dtype=dtype, enabled=dtype is not None):
            if stage == "eval":
                with torch.inference_mode():
                    encoder.model(input_ids=ids, attention_mask=torch.ones_like(ids))
                return
            out = encoder.model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
        opt.zero_grad()
        out.float().pow(2).mean().backward()
        opt.step()

    def timed_round(name: str, stage: str) -> float:
        steps, t0 = 0, time.perf_counter()
        while True:
            step(name, stage)
            steps += 1
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - t0
            if elapsed >= ROUND_S:
                return steps * inputs[stage].numel() / elapsed

    rates: dict[str, dict[str, list[float]]] = {name: {"train": [], "eval": []} for name in names}
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for stage in ("train", "eval"):
        encoder.train(stage == "train")
        for name in names:  # warm-up: kernels, autocast caches, allocator
            step(name, stage)
        for r in range(ROUNDS):
            for name in names if r % 2 == 0 else names[::-1]:  # A B, B A, …: no candidate always first
                rates[name][stage].append(round(timed_round(name, stage), 1))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    share = None if device.startswith("cuda") else round(cpu / (wall * torch.get_num_threads()), 3)
    return {"rates": rates, "cpu_share": share}


def _choose(rates: dict[str, float]) -> str:
    fp32 = rates["32-true"]
    best = max(rates, key=lambda name: rates[name])
    return best if rates[best] >= MARGIN * fp32 else "32-true"


def paired_ratios(rates: dict[str, list[float]]) -> dict[str, float]:
    """Each candidate's median over rounds of its rate / fp32's rate *in the same round*: rounds
    follow each other within seconds, so a round's ratio is untouched by the machine speeding up or
    slowing down between rounds, which moves unpaired medians (fp32 is 1.0)."""
    fp32 = rates["32-true"]
    return {name: statistics.median(r / f for r, f in zip(rs, fp32, strict=True)) for name, rs in rates.items()}


def judge(measured: dict, load: tuple[float, int]) -> dict:
    """The choice for training and evaluation from :func:`measure_rounds`, each candidate's median
    rates (``measured``), and whether the choice can be trusted (``trusted``, with the reasons it
    cannot: ``doubts``)."""
    rates, doubts, entry = measured["rates"], [], {}
    medians: dict[str, dict[str, float]] = {name: {} for name in rates}
    for stage in ("train", "eval"):
        median = {name: statistics.median(r[stage]) for name, r in rates.items()}
        paired = paired_ratios({name: r[stage] for name, r in rates.items()})
        entry[stage] = _choose(paired)
        rounds = [{name: r[stage][k] for name, r in rates.items()} for k in range(ROUNDS)]
        # a round agrees when the choice is within MARGIN of its fastest candidate: two low
        # precisions that tie (bf16 and fp16 on a GPU) may take turns without making it doubtful
        agree = sum(MARGIN * rnd[entry[stage]] >= max(rnd.values()) for rnd in rounds)
        if agree < AGREE:
            doubts.append(
                f"{stage}: only {agree} of {ROUNDS} rounds had {entry[stage]} within {MARGIN - 1:.0%} of "
                f"their fastest (fastest per round: {', '.join(_choose(rnd) for rnd in rounds)})"
            )
        for name, value in median.items():
            medians[name][f"{stage}_tok_s"] = round(value, 1)
            medians[name][f"{stage}_vs_fp32"] = round(paired[name], 3)
    loadavg, cores = load
    if loadavg >= cores:
        doubts.append(f"load average {loadavg:.2f} on {cores} cores before measuring")
    share = measured.get("cpu_share")
    if share is not None and share < MIN_CPU_SHARE:
        doubts.append(f"the process got {share:.0%} of its threads' CPU time: another job competed")
    return {**entry, "measured": medians, "trusted": not doubts, "doubts": doubts}

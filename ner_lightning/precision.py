"""The fastest precision this machine really has for an encoder: measured, not read off CPU flags.

``${best_precision:${trainer.accelerator},${model},train}`` (``trainer.precision``) and ``…,eval}``
(``callbacks.eval_precision.precision``) resolve through :func:`best_precision`:

* flags only pre-filter the candidates — ``32-true`` always; ``bf16-mixed`` on a GPU with bf16 or
  a CPU with AVX-512 BF16 / AMX (emulated bf16 is never worth measuring); ``16-mixed`` on a GPU;
* each candidate runs a few forward passes and a few training steps (fused AdamW, as cells train)
  of the actual encoder on a fixed batch shape; the fastest wins, a low precision only when it is
  at least ``MARGIN`` faster than fp32 (timing noise never flips a run into bf16);
* the result is cached per (device, CPU model and flags, torch version, encoder, batch shape) in
  ``$NER_LIGHTNING_CACHE`` or ``~/.cache/ner_lightning/precision.json``: a machine measures once,
  and every cell of a sweep reads the entry the sweeper wrote when it composed the grid — whatever
  its thread count (a parallel worker's share of the cores): a cell's precision is always the one
  its identity was composed with. Measuring holds a lock beside the cache (``precision.json.lock``):
  two sweeps started at once measure once, the second reads the first's entry.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import platform
import time
from functools import lru_cache
from pathlib import Path

import torch

log = logging.getLogger("ner_lightning")
BATCH = (8, 64)  # sentences x sub-words of the measured batch
MARGIN = 1.05  # a low precision must be this much faster than fp32 to be chosen
DTYPES = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16, "32-true": None}
_memo: dict[str, dict] = {}


def candidates(accelerator: str) -> tuple[list[str], str]:
    """The precisions worth measuring here and why the others are not."""
    from ner_lightning.hardware import CPU_BF16_FLAGS, uses_gpu, cpu_flags

    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ValueError(
            f"trainer.accelerator={accelerator} but this process sees no GPU, so the GPU's fastest precision cannot "
            "be measured here (a SLURM sweep composes every cell on the machine it is submitted from, and a cell's "
            "precision is part of its identity). Set it: trainer.precision=bf16-mixed "
            "callbacks.eval_precision.precision=bf16-mixed (or 32-true / 16-mixed; docs/gpu_and_cluster.md), "
            "or submit from a machine with the nodes' GPU")
    if uses_gpu(accelerator):
        name = torch.cuda.get_device_name()
        if torch.cuda.is_bf16_supported():
            return ["32-true", "bf16-mixed", "16-mixed"], f"{name} has native bf16"
        return ["32-true", "16-mixed"], f"{name} has no bf16: fp16 with loss scaling"
    native = [f for f in CPU_BF16_FLAGS if f in cpu_flags()]
    if native:
        return ["32-true", "bf16-mixed"], f"the CPU has {' and '.join(native)}"
    return ["32-true"], ("the CPU has no native bf16 (neither " + " nor ".join(CPU_BF16_FLAGS)
                         + " in /proc/cpuinfo): emulated bf16 would be slower than fp32")


@lru_cache(maxsize=None)
def _cpu_model() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def _device_name(accelerator: str) -> str:
    from ner_lightning.hardware import cpu_flags, uses_gpu

    if uses_gpu(accelerator):
        return f"cuda:{torch.cuda.get_device_name()}"
    flags = hashlib.sha256(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:12]
    return f"cpu:{_cpu_model()}:flags {flags}"


def _cache_path() -> Path:
    return Path(os.environ.get("NER_LIGHTNING_CACHE") or Path.home() / ".cache" / "ner_lightning") / "precision.json"


def measure(model: dict, precision: str, device: str) -> dict[str, float]:
    """Real sub-word tokens per second of the encoder ``model`` (a ``conf/model`` node) under
    ``precision``: the best of a few forward passes and of a few training steps."""
    from hydra.utils import instantiate

    torch.manual_seed(0)
    encoder = instantiate(model).to(device)
    ids = torch.randint(1000, 2000, BATCH, device=device)
    mask = torch.ones_like(ids)
    dtype, tokens = DTYPES[precision], ids.numel()

    def forward():
        with torch.autocast(torch.device(device).type, dtype=dtype, enabled=dtype is not None):
            return encoder.model(input_ids=ids, attention_mask=mask).last_hidden_state

    def best(step, rounds: int) -> float:
        step()  # warm-up
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            step()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        return tokens / min(times)

    encoder.eval()
    with torch.inference_mode():
        eval_rate = best(forward, 3)
    encoder.train()
    opt = torch.optim.AdamW(encoder.parameters(), lr=1e-6, fused=True)

    def train_step():
        opt.zero_grad()
        forward().float().pow(2).mean().backward()
        opt.step()

    return {"train_tok_s": round(best(train_step, 3), 1), "eval_tok_s": round(eval_rate, 1)}


def _key(device_name: str, model: dict, names: list[str]) -> str:
    encoder = {k: model.get(k) for k in ("name_or_path", "random_init", "tokenizer")}
    return json.dumps({"device": device_name, "torch": torch.__version__, "encoder": encoder,
                       "batch": BATCH, "candidates": names}, sort_keys=True, default=str)


def recorded(accelerator: str, model: dict) -> dict | None:
    """What this process measured or read for the encoder (for results.json), or None."""
    return _memo.get(_key(_device_name(accelerator), model, candidates(accelerator)[0]))


def calibration(accelerator: str, model: dict) -> dict:
    """The measured choice for training and evaluation (see the module docstring), cached."""
    names, why = candidates(accelerator)
    device_name = _device_name(accelerator)
    device = "cuda" if device_name.startswith("cuda") else "cpu"
    key = _key(device_name, model, names)
    if key in _memo:
        return _memo[key]
    if len(names) == 1:
        _memo[key] = {"train": names[0], "eval": names[0], "why": why, "measured": None}
        return _memo[key]
    path = _cache_path()
    cached = _read(path).get(key)
    if cached is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_name(path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process measuring this key: wait, then read its entry
            cached = _read(path).get(key) or _measure_and_record(path, key, model, names, why, device, device_name)
    _memo[key] = cached
    return cached


def _measure_and_record(path: Path, key: str, model: dict, names: list[str], why: str, device: str,
                        device_name: str) -> dict:
    """Measure every candidate, choose for training and evaluation, add the entry to the cache."""
    t0 = time.perf_counter()
    measured = {name: measure(model, name, device) for name in names}
    cached = {"train": _fastest(measured, "train_tok_s"), "eval": _fastest(measured, "eval_tok_s"),
              "why": f"measured ({why}) in {time.perf_counter() - t0:.1f} s", "measured": measured}
    from ner_lightning.results import write_json_atomic

    write_json_atomic(path, {**_read(path), key: cached})
    log.info("precision measured on %s: %s -> training %s, evaluation %s (cached in %s)", device_name,
             ", ".join(f"{n} train {m['train_tok_s']:,.0f} / eval {m['eval_tok_s']:,.0f} tok/s"
                       for n, m in measured.items()), cached["train"], cached["eval"], path)
    return cached


def _fastest(measured: dict, figure: str) -> str:
    fp32 = measured["32-true"][figure]
    best = max(measured, key=lambda n: measured[n][figure])
    return best if measured[best][figure] >= MARGIN * fp32 else "32-true"


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def best_precision(accelerator: str, model: dict, stage: str) -> str:
    """Resolver ``${best_precision:<accelerator>,${model},train|eval}``."""
    if stage not in ("train", "eval"):
        raise ValueError(f"${{best_precision:…,{stage}}}: the stage is train or eval")
    from omegaconf import DictConfig, OmegaConf

    node = OmegaConf.to_container(model, resolve=True) if isinstance(model, DictConfig) else dict(model)
    return calibration(str(accelerator), node)[stage]

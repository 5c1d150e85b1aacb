"""The best numeric precision this machine runs natively (``trainer.precision: auto``).

bf16 autocast pays only where the hardware multiplies bf16 natively: GPUs with bf16 (Ampere
and newer) and CPUs with AVX-512 BF16 or AMX. Without it PyTorch emulates bf16 and runs
slower than fp32 (MiniLM forward on a 2-core AVX2 EPYC: fp32 4,470 tok/s, bf16 700 tok/s;
docs/benchmarks.md). The conf default ``trainer.precision: ${best_precision:${trainer.accelerator}}``
resolves through :func:`best_precision`; the run logs the choice and its reason.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@lru_cache(maxsize=None)
def cpu_flags() -> frozenset[str]:
    """The CPU feature flags Linux reports (empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def _uses_gpu(accelerator: str) -> bool:
    import torch

    return accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()


def precision_choice(accelerator: str = "auto") -> tuple[str, str]:
    """``(Lightning precision, why)`` for ``trainer.accelerator``."""
    import torch

    if _uses_gpu(accelerator):
        if torch.cuda.is_bf16_supported():
            return "bf16-mixed", f"{torch.cuda.get_device_name()} has native bf16"
        return "16-mixed", f"{torch.cuda.get_device_name()} has no bf16: fp16 with loss scaling"
    native = [f for f in CPU_BF16_FLAGS if f in cpu_flags()]
    if native:
        return "bf16-mixed", f"the CPU has {' and '.join(native)}"
    return "32-true", ("the CPU has no native bf16 (neither " + " nor ".join(CPU_BF16_FLAGS)
                       + " in /proc/cpuinfo): emulated bf16 would be slower than fp32")


def best_precision(accelerator: str = "auto") -> str:
    """Resolver ``${best_precision:<accelerator>}``."""
    return precision_choice(str(accelerator))[0]


def fused_adamw(precision: str) -> bool:
    """Resolver ``${fused_adamw:${trainer.precision}}``: torch's fused AdamW kernel for
    full-precision training. Under 16-/bf16-mixed Lightning refuses gradient clipping with an
    optimizer that unscales gradients itself (as the fused one does), so the loop kernel is used."""
    return str(precision) in ("32-true", "32", "64-true", "64")

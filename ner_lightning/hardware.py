"""Which precisions this machine runs natively (the flags behind the candidates
``ner_lightning.precision`` measures) and two process
settings of a cell: the C library's heap (``malloc_top_pad_mb``, :func:`reserve_heap`) and
torch's fill of new tensors under deterministic algorithms (``fill_uninitialized_memory``,
:func:`fill_uninitialized_memory`).

bf16 autocast pays only where the hardware multiplies bf16 natively: GPUs with bf16 (Ampere
and newer) and CPUs with AVX-512 BF16 or AMX. Without it PyTorch emulates bf16 and runs
slower than fp32 (MiniLM forward on a 2-core AVX2 EPYC: fp32 4,470 tok/s, bf16 700 tok/s;
docs/benchmarks.md). The conf default measures among the candidates instead of trusting the flags
(``ner_lightning/precision/choice.py``): a flag can promise more than the kernels deliver.
"""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path

import torch.utils.deterministic

CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@cache
def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU feature flags Linux reports (the first ``flags`` line of ``cpuinfo``; empty elsewhere)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def uses_gpu(accelerator: str) -> bool:
    import torch

    return accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()


GPU_EVAL_BATCH_TOKENS = 32768  # padded sub-word positions per evaluation batch on a GPU


def eval_batch_tokens(accelerator: str = "auto") -> int | None:
    """Resolver ``${eval_batch_tokens:${trainer.accelerator}}`` (``data.eval_batch_tokens``): on a
    GPU, evaluation batches as large as ``GPU_EVAL_BATCH_TOKENS`` padded sub-words (a few hundred
    sentences: batches of 64 short sentences leave a GPU launch-bound); on a CPU, None —
    ``data.eval_batch_size`` sentences per batch, where larger batches gain nothing."""
    return GPU_EVAL_BATCH_TOKENS if uses_gpu(str(accelerator)) else None


def fused_adamw(precision: str) -> bool:
    """Resolver ``${fused_adamw:${trainer.precision}}``: torch's fused AdamW kernel, except under
    fp16 loss scaling (``16-mixed``), where Lightning must unscale the gradients before clipping
    and a fused optimizer unscales inside its step. bf16 has no scaler (:class:`BF16Mixed`)."""
    return str(precision) not in ("16-mixed", "16")


M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc <malloc.h>
MMAP_THRESHOLD_MAX = 32 << 20  # the largest M_MMAP_THRESHOLD glibc accepts on 64-bit


def _glibc():
    """The process's C library if it is glibc (it has ``mallopt``), else None (musl, macOS)."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    return libc if hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt") else None


def reserve_heap(top_pad_mb: int | None) -> str:
    """Keep up to ``top_pad_mb`` MiB of freed heap in the process instead of returning it to the
    kernel (glibc ``mallopt``: ``M_TOP_PAD`` and ``M_TRIM_THRESHOLD`` = the pad, blocks up to
    ``M_MMAP_THRESHOLD`` = 32 MiB from the heap); returns a line for the log.

    A training step frees and re-allocates its activations and gradients (``zero_grad`` sets them
    to None) at sizes that change with every random batch. With glibc's adaptive defaults much of
    that memory goes back to the kernel and is faulted in again page by page at the next step
    (about 0.7 M minor page faults in 40 MiniLM steps on 2 CPU cores). Setting the three values
    fixes the behaviour whatever the process allocated before (setting any one of them turns
    glibc's adaptation off). Numerics are unchanged; docs/benchmarks.md has the measured steps,
    faults and peak memory (``benchmarks/malloc_pad.py`` of commit 630881c)."""
    if top_pad_mb is None or int(top_pad_mb) == 0:
        return "malloc: glibc's defaults (runtime.malloc_top_pad_mb: 0)"
    if not 0 < int(top_pad_mb) < 2048:
        raise ValueError(
            f"runtime.malloc_top_pad_mb={top_pad_mb}: give MiB between 1 and 2047 (a C int of bytes), "
            "or 0 for glibc's defaults"
        )
    libc = _glibc()
    if libc is None:
        return f"malloc: not glibc, runtime.malloc_top_pad_mb={top_pad_mb} has no effect"
    pad = int(top_pad_mb) << 20
    settings = ((M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX), (M_TRIM_THRESHOLD, pad), (M_TOP_PAD, pad))
    refused = [option for option, value in settings if libc.mallopt(option, value) != 1]
    if refused:
        return f"malloc: glibc refused mallopt options {refused} (runtime.malloc_top_pad_mb={top_pad_mb})"
    return f"malloc: glibc keeps {top_pad_mb} MiB of freed heap (runtime.malloc_top_pad_mb)"


def fill_uninitialized_memory(fill: bool) -> str:
    """Whether torch writes NaN (the largest integer for integer tensors) into every new tensor
    while deterministic algorithms are on (``trainer.deterministic``; torch's default: yes). The
    fill guards against reading memory no operation wrote, which no operation of a correct run
    does, so the numbers are the same either way; it writes every activation, gradient and output
    once more before the operation that creates it writes it (docs/benchmarks.md,
    ``benchmarks/uninitialized_fill.py`` of commit b320a1d). Returns a line for the log."""
    if not isinstance(fill, bool):
        raise ValueError(f"runtime.fill_uninitialized_memory={fill!r}: give true or false")
    torch.utils.deterministic.fill_uninitialized_memory = fill  # type: ignore[attr-defined]  # a module property torch's stubs lack
    key = f"runtime.fill_uninitialized_memory: {str(fill).lower()}"
    return (
        f"new tensors filled with NaN under deterministic algorithms ({key})"
        if fill
        else f"new tensors not pre-filled ({key})"
    )

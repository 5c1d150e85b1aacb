"""The Lightning precision a cell's Trainer gets for ``trainer.precision`` (``bf16-mixed`` as a plugin
that lets a fused optimizer clip). Apart from ``hardware`` so that reading the machine's settings
(the config's resolvers) loads no Lightning."""

from __future__ import annotations

from pytorch_lightning.plugins.precision import MixedPrecision, Precision
from pytorch_lightning.utilities import GradClipAlgorithmType

from ner_lightning.hardware import uses_gpu


class BF16Mixed(MixedPrecision):
    """Lightning's ``bf16-mixed`` without its refusal to clip the gradients of a fused optimizer.

    The refusal guards fp16 loss scaling (gradients must be unscaled before clipping, and a fused
    optimizer unscales inside its step); bf16 runs without a scaler, so clipping is the plain one.
    Without it bf16 training falls back to torch's per-parameter AdamW loop, 0.137 s a step
    instead of 0.018 s for MiniLM on 2 CPU cores (docs/benchmarks.md)."""

    def __init__(self, device: str):
        super().__init__("bf16-mixed", device)

    def clip_gradients(self, optimizer, clip_val=0.0, gradient_clip_algorithm=GradClipAlgorithmType.NORM) -> None:
        Precision.clip_gradients(self, optimizer, clip_val, gradient_clip_algorithm)


def trainer_precision(precision: str, accelerator: str = "auto", plugins=None) -> dict:
    """``pytorch_lightning.Trainer`` arguments for ``trainer.precision``: ``bf16-mixed`` becomes
    the :class:`BF16Mixed` plugin (same autocast, fused optimizers allowed); any other name is
    passed on as it is."""
    if str(precision) != "bf16-mixed":
        return {"precision": precision, "plugins": plugins}
    device = "cuda" if uses_gpu(str(accelerator)) else "cpu"
    return {"precision": None, "plugins": [*(plugins or []), BF16Mixed(device)]}

"""Monitoring callbacks: real (non-padding) sub-word tokens per second, and the precision dev/test
evaluation runs in."""

from __future__ import annotations

import logging
import time

import pytorch_lightning as pl
import torch

from ner_lightning.models.base import NERModule

log = logging.getLogger("ner_lightning")


class TokenThroughput(pl.Callback):
    """Real and computed sub-word tokens of every train / eval batch, and the wall time of the
    stretches of batches in each stage.

    ``summary()`` gives tokens/s and the padding overhead: positions the encoder computes / real
    tokens (the padded batch, or its packed rows where ``model.pack`` packs it). Counts are the shapes of each
    batch's packing plan (made on the host when it was built); a stretch of batches — an epoch's
    training between evaluations, or one evaluation — is timed from its first batch to its end,
    waiting for the device once at its end, never per batch (so batch building counts as part of
    training; evaluation batches are built once per split).
    """

    STAGES = ("train", "eval")

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(self.STAGES, 0.0)
        self.tokens = dict.fromkeys(self.STAGES, 0)
        self.padded = dict.fromkeys(self.STAGES, 0)
        self._open: dict[str, float] = {}  # stage -> start of its stretch under way

    def _count(self, stage: str, batch: dict, module: NERModule) -> None:
        from ner_lightning.models.encoder import plan_from_mask

        if stage not in self._open:
            self._open[stage] = time.perf_counter()
        plan = batch["pack"] if "pack" in batch else plan_from_mask(batch["attention_mask"])  # by hand: asks
        padded = batch["input_ids"].numel()
        self.tokens[stage] += plan.source.numel()
        self.padded[stage] += plan.block.numel() if module.encoder.runs_packed(plan, padded) else padded

    def _close(self, stage: str, module: pl.LightningModule) -> None:
        if stage in self._open:
            if module.device.type == "cuda":
                torch.cuda.synchronize(module.device)
            self.seconds[stage] += time.perf_counter() - self._open.pop(stage)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._count("train", batch, pl_module)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        self._count("eval", batch, pl_module)

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        self._count("eval", batch, pl_module)

    def on_validation_start(self, trainer, pl_module) -> None:
        self._close("train", pl_module)  # evaluation interrupts training's stretch

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        self._close("eval", pl_module)  # before the epoch is scored on the host

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        self._close("eval", pl_module)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._close("train", pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        self._close("train", pl_module)

    def result_section(self, out_dir) -> dict:
        return {"throughput": self.summary()}

    def summary(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for s in self.STAGES:
            out[f"{s}_tokens"] = self.tokens[s]
            out[f"{s}_seconds"] = round(self.seconds[s], 3)
            out[f"{s}_tokens_per_s"] = round(self.tokens[s] / self.seconds[s], 1) if self.seconds[s] else None
            out[f"{s}_padding_ratio"] = round(self.padded[s] / self.tokens[s], 3) if self.tokens[s] else None
        return out


class EvalPrecision(pl.Callback):
    """Runs the encoder of every dev/test evaluation under ``precision`` (training keeps
    ``trainer.precision``), a Lightning name: 32-true, bf16-mixed, 16-mixed — by default the
    fastest measured here (``${best_precision:…,eval}``, ``ner_lightning/precision/choice.py``).
    Heads, losses and decoding stay fp32 (``NERModule.word_states``)."""

    NAMES = ("32-true", "bf16-mixed", "16-mixed")

    def __init__(self, precision: str):
        if precision not in self.NAMES:
            raise ValueError(
                f"callbacks.eval_precision.precision must be one of {self.NAMES} (the default, "
                "${best_precision:${trainer.accelerator},${model},eval}, measures the fastest), "
                f"got {precision!r}"
            )
        self.precision = precision

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if not isinstance(pl_module, NERModule):
            raise TypeError(
                f"EvalPrecision sets the evaluation precision of an NERModule, not {type(pl_module).__name__}"
            )
        log.debug("precision: training %s, evaluation %s", trainer.precision, self.precision)
        pl_module.evaluate_in(self.precision)

"""Monitoring callbacks: real (non-padding) sub-word tokens per second, and the precision dev/test
evaluation runs in."""
from __future__ import annotations

import logging
import time

import pytorch_lightning as pl

log = logging.getLogger("ner_lightning")


class TokenThroughput(pl.Callback):
    """Times every train / eval batch and counts its real and padded sub-word tokens.

    ``summary()`` gives tokens/s over the time spent inside batches (data loading excluded)
    and the padding overhead: positions the encoder computes / real tokens (the padded batch,
    or its packed rows under ``model.pack``).
    """

    STAGES = ("train", "eval")

    def __init__(self):
        self.seconds = dict.fromkeys(self.STAGES, 0.0)
        self.tokens = dict.fromkeys(self.STAGES, 0)
        self.padded = dict.fromkeys(self.STAGES, 0)
        self._t0 = 0.0

    def _start(self, *_args, **_kw) -> None:
        self._t0 = time.perf_counter()

    def _end(self, stage: str, batch: dict, module: pl.LightningModule) -> None:
        from ner_lightning.models.encoder import computed_positions

        self.seconds[stage] += time.perf_counter() - self._t0
        mask = batch["attention_mask"]
        self.tokens[stage] += int(mask.sum())
        self.padded[stage] += computed_positions(mask, module.encoder.pack)

    on_train_batch_start = _start
    on_validation_batch_start = _start
    on_test_batch_start = _start

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._end("train", batch, pl_module)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._end("eval", batch, pl_module)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._end("eval", batch, pl_module)

    def summary(self) -> dict:
        out = {}
        for s in self.STAGES:
            out[f"{s}_tokens"] = self.tokens[s]
            out[f"{s}_seconds"] = round(self.seconds[s], 3)
            out[f"{s}_tokens_per_s"] = round(self.tokens[s] / self.seconds[s], 1) if self.seconds[s] else None
            out[f"{s}_padding_ratio"] = round(self.padded[s] / self.tokens[s], 3) if self.tokens[s] else None
        return out


class EvalPrecision(pl.Callback):
    """Runs the encoder of every dev/test evaluation under ``precision`` (training keeps
    ``trainer.precision``), a Lightning name: 32-true, bf16-mixed, 16-mixed — by default the
    fastest measured here (``${best_precision:…,eval}``, ``ner_lightning/precision.py``).
    Heads, losses and decoding stay fp32 (``NERModule.word_states``)."""

    NAMES = ("32-true", "bf16-mixed", "16-mixed")

    def __init__(self, precision: str):
        if precision not in self.NAMES:
            raise ValueError(f"callbacks.eval_precision.precision must be one of {self.NAMES} (the default, "
                             "${best_precision:${trainer.accelerator},${model},eval}, measures the fastest), "
                             f"got {precision!r}")
        self.precision = precision

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if pl_module.eval_precision != self.precision:
            log.debug("precision: training %s, evaluation %s", trainer.precision, self.precision)
        pl_module.eval_precision = self.precision

"""Lightning callbacks of our own: real (non-padding) sub-word tokens per second."""
from __future__ import annotations

import time

import pytorch_lightning as pl


class TokenThroughput(pl.Callback):
    """Times every train / eval batch and counts its real and padded sub-word tokens.

    ``summary()`` gives tokens/s over the time spent inside batches (data loading excluded)
    and the padding overhead (padded / real tokens).
    """

    STAGES = ("train", "eval")

    def __init__(self):
        self.seconds = dict.fromkeys(self.STAGES, 0.0)
        self.tokens = dict.fromkeys(self.STAGES, 0)
        self.padded = dict.fromkeys(self.STAGES, 0)
        self._t0 = 0.0

    def _start(self, *_args, **_kw) -> None:
        self._t0 = time.perf_counter()

    def _end(self, stage: str, batch: dict) -> None:
        self.seconds[stage] += time.perf_counter() - self._t0
        mask = batch["attention_mask"]
        self.tokens[stage] += int(mask.sum())
        self.padded[stage] += mask.numel()

    on_train_batch_start = _start
    on_validation_batch_start = _start
    on_test_batch_start = _start

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._end("train", batch)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._end("eval", batch)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._end("eval", batch)

    def summary(self) -> dict:
        out = {}
        for s in self.STAGES:
            out[f"{s}_tokens"] = self.tokens[s]
            out[f"{s}_seconds"] = round(self.seconds[s], 3)
            out[f"{s}_tokens_per_s"] = round(self.tokens[s] / self.seconds[s], 1) if self.seconds[s] else None
            out[f"{s}_padding_ratio"] = round(self.padded[s] / self.tokens[s], 3) if self.tokens[s] else None
        return out

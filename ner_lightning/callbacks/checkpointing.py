"""Checkpoint persistence: when the best-on-dev weights (``best.ckpt``) and the full resume state
(``last.ckpt``) reach the disk."""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable
from weakref import WeakKeyDictionary, proxy

import pytorch_lightning as pl
import torch
from lightning_utilities.core.apply_func import apply_to_collection
from pytorch_lightning.callbacks import ModelCheckpoint

HOLDING: WeakKeyDictionary = WeakKeyDictionary()  # trainer -> the BestCheckpoints holding writes for it


def selecting_checkpoint(trainer: pl.Trainer) -> ModelCheckpoint | None:
    """The Trainer's checkpoint callback that selects the weights a cell tests, if any (never the
    resume checkpoint: without a selecting one, the cell tests its final weights)."""
    selecting = [c for c in trainer.checkpoint_callbacks if not isinstance(c, ResumeCheckpoint)]
    return next((c for c in selecting if isinstance(c, ModelCheckpoint)), None)


@runtime_checkable
class CheckpointSource(Protocol):
    """A trainer that makes its model's checkpoint itself (a lockstep cell's view of its group's
    Trainer, ``lockstep.cell_trainer``): what ``Trainer.save_checkpoint`` would write."""

    def dump_checkpoint(self, weights_only: bool) -> dict: ...


class BestCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` (``best.ckpt``: the weights selected on dev) whose writes
    wait in memory, a copy of each checkpoint still in its top ``save_top_k``, until the resume
    checkpoint is written (:class:`ResumeCheckpoint` writes the held ones first) or training ends. Dev improves in most
    early epochs, and a write per improvement costs more than the copy. A crash loses only what
    the resume checkpoint would recompute anyway, and a rerun finds a ``best.ckpt`` that matches
    the state it resumes. ``hold: false`` = written at once, as Lightning does."""

    def __init__(self, hold: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.hold = bool(hold)
        self.held: dict[str, dict] = {}  # file -> its checkpoint (a copy), not on disk yet

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        holding = HOLDING.setdefault(trainer, [])
        if self.hold and self not in holding:  # the resume checkpoint writes what this one holds first
            holding.append(self)

    def _save_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        if not self.hold:
            return super()._save_checkpoint(trainer, filepath)
        if isinstance(trainer, CheckpointSource):
            checkpoint = trainer.dump_checkpoint(self.save_weights_only)
        else:
            # as Trainer.save_checkpoint makes it
            checkpoint = trainer._checkpoint_connector.dump_checkpoint(self.save_weights_only)
        self.held[filepath] = apply_to_collection(checkpoint, torch.Tensor, lambda t: t.detach().clone())
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath

    def _remove_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        """A checkpoint that leaves the top ``save_top_k``: forgotten if it is still held, else
        removed from the disk."""
        if self.held.pop(filepath, None) is None:
            super()._remove_checkpoint(trainer, filepath)

    def write_held(self, trainer: pl.Trainer) -> None:
        """Write the checkpoints held in memory, if any, in the order they were made."""
        if not self.held:
            return
        held, self.held = self.held, {}
        for filepath, checkpoint in held.items():
            trainer.strategy.save_checkpoint(checkpoint, filepath)
        for logger in trainer.loggers:
            logger.after_save_checkpoint(proxy(self))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        self.write_held(trainer)  # not on a crash: the held weights may be newer than last.ckpt


class ResumeCheckpoint(ModelCheckpoint):
    """The full-state checkpoint (weights, optimiser, schedule, loops, RNG) a rerun resumes a
    cell from. Written where Lightning's ``ModelCheckpoint`` would write it, but only when
    ``min_interval_s`` seconds have passed since the previous write, or when another checkpoint
    was written to disk at this step, so that a ``best.ckpt`` on disk is never newer than the
    state a rerun resumes; a :class:`BestCheckpoint`'s held checkpoint is written just before.
    A crash then costs at most ``min_interval_s`` plus one epoch of recomputation, and the
    resumed cell still ends exactly as an uninterrupted one (tests/test_launching.py).
    ``min_interval_s: 0`` = every time (every epoch). Runs after every other checkpoint callback
    (it moves itself to the end of ``trainer.callbacks``) to see what they wrote."""

    def __init__(self, min_interval_s: float = 0.0, **kwargs):
        if float(min_interval_s) < 0:
            raise ValueError(f"callbacks.last_checkpoint.min_interval_s must be >= 0 seconds, got {min_interval_s}")
        super().__init__(**kwargs)
        self.min_interval_s = float(min_interval_s)
        self._written_at: float | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        # Lightning's callback connector sets Trainer.callbacks at run time; the class does not declare it.
        callbacks: list[pl.Callback] = trainer.callbacks  # type: ignore[attr-defined]
        callbacks.remove(self)
        callbacks.append(self)

    def _save_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        holding = HOLDING.get(trainer, [])
        others_wrote = any(
            cb is not self and cb not in holding and cb._last_global_step_saved == trainer.global_step
            for cb in trainer.checkpoint_callbacks
            if isinstance(cb, ModelCheckpoint)
        )
        recent = self._written_at is not None and time.monotonic() - self._written_at < self.min_interval_s
        if recent and not others_wrote:
            return
        for cb in holding:
            cb.write_held(trainer)
        super()._save_checkpoint(trainer, filepath)
        self._written_at = time.monotonic()

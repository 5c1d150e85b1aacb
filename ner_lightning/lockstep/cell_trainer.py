"""A cell's own view of its group's Trainer: what a callback of the cell reads and sets on "its"
trainer through Lightning's public hooks, kept per cell while the group's one Trainer fits them all.

The group's ``Trainer`` answers what every cell shares (state, strategy, rank, the dev schedule,
``fast_dev_run``); the view keeps what is the cell's own: its latest dev metrics
(``callback_metrics``), its epoch and optimiser steps, its ``should_stop``, its loggers, its data
module and its selecting ``ModelCheckpoint``. The cell's ``EarlyStopping``, ``ModelCheckpoint``
and ``PredictionWriter`` are driven through their public hooks with this view (``cell_fit``), so
their own rules decide for the cell as they would alone; a checkpoint they save is the cell's
weights (``save_checkpoint``: written by the group's checkpoint writer, a copy kept in memory
while it may still be in the writer's queue). The group's stacked test drives every callback's
test hooks with it (``PredictionWriter`` writes the cell's test file, ``TokenThroughput`` counts
its test tokens).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytorch_lightning as pl
import torch
from lightning_utilities.core.apply_func import apply_to_collection
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import Logger

from ner_lightning.data.contract import ModelData

# The Trainer attributes every cell of a group shares, answered by the group's Trainer.
SHARED = frozenset(
    {
        "state",
        "strategy",
        "sanity_checking",
        "fast_dev_run",
        "val_check_interval",
        "check_val_every_n_epoch",
        "num_val_batches",
        "enable_validation",
        "fit_loop",
        "global_rank",
        "world_size",
        "is_global_zero",
    }
)


class CellTrainer:
    """The public Trainer attributes a cell's callbacks read (module docstring). ``weights``: the
    cell's current weights as its module's ``state_dict`` names them (views of its stack rows)."""

    ckpt_path = None  # a grouped cell resumes with its group's checkpoint, never from one of its own

    def __init__(
        self,
        group: pl.Trainer,
        loggers: list[Logger],
        datamodule: ModelData,
        selection: ModelCheckpoint | None,
        weights: Callable[[], dict[str, torch.Tensor]],
    ):
        self.group = group
        self.loggers = loggers
        self.datamodule = datamodule
        self.checkpoint_callback = selection
        self.weights = weights
        self.callback_metrics: dict[str, torch.Tensor] = {}
        self.should_stop = False
        self.current_epoch = 0
        self.global_step = 0
        self.saved: dict[str, dict] = {}  # file -> the checkpoint saved there in this fit (a copy)

    @property
    def checkpoint_callbacks(self) -> list[ModelCheckpoint]:
        return [self.checkpoint_callback] if self.checkpoint_callback is not None else []

    def __getattr__(self, name: str):
        """What the cells share (:data:`SHARED`) is the group's own answer."""
        if name in SHARED:
            return getattr(self.group, name)
        raise AttributeError(f"a cell's view of its group's Trainer has no {name!r} (lockstep/cell_trainer.py)")

    def evaluated(self, metrics: dict[str, float], epoch: int) -> None:
        """The cell's dev evaluation at ``epoch``: its metrics as Lightning's logger connector keeps
        them for callbacks (tensors)."""
        self.callback_metrics = {name: torch.tensor(value) for name, value in metrics.items()}
        self.current_epoch = epoch

    def dump_checkpoint(self, weights_only: bool) -> dict[str, Any]:
        """The cell's checkpoint as ``Trainer.save_checkpoint`` makes it for a weights-only
        ``ModelCheckpoint`` (views of the stack rows: a caller that keeps it copies it)."""
        if not weights_only:
            raise ValueError("a grouped cell's checkpoints hold its weights only (save_weights_only=true)")
        return {
            "epoch": self.current_epoch,
            "global_step": self.global_step,
            "pytorch-lightning_version": pl.__version__,
            "state_dict": self.weights(),
        }

    def save_checkpoint(self, filepath, weights_only: bool = False, storage_options: Any = None) -> None:
        """``Trainer.save_checkpoint`` of the cell: a copy of its weights, written by the group's
        checkpoint writer (in order, off the training thread) and kept until the fit ends."""
        checkpoint = apply_to_collection(self.dump_checkpoint(weights_only), torch.Tensor, lambda t: t.detach().clone())
        self.group.strategy.save_checkpoint(checkpoint, filepath, storage_options=storage_options)
        self.saved[str(filepath)] = checkpoint

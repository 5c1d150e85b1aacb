"""A cell's own view of its group's Trainer: what a callback of the cell reads and sets on "its"
trainer through Lightning's public hooks, kept per cell while the group's one Trainer fits them all.

The group's ``Trainer`` answers what every cell shares (state, strategy, rank, the dev schedule,
``fast_dev_run``); the view keeps what is the cell's own: its latest dev metrics
(``callback_metrics``), its epoch, its ``should_stop``, its loggers and its data module. The cell's
``EarlyStopping`` is driven through ``setup``, ``on_validation_end`` and ``on_train_epoch_end``
with this view, so its own rule (patience, ``min_delta``, thresholds, ``check_finite``,
``check_on_train_epoch_end``) decides for the cell as it would alone; the group's stacked test
drives every callback's test hooks with it (``PredictionWriter`` writes the cell's test file,
``TokenThroughput`` counts its test tokens).
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch
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
        "global_rank",
        "world_size",
        "is_global_zero",
    }
)


class CellTrainer:
    """The public Trainer attributes a cell's callbacks read (module docstring)."""

    def __init__(self, group: pl.Trainer, loggers: list[Logger], datamodule: ModelData):
        self.group = group
        self.loggers = loggers
        self.datamodule = datamodule
        self.callback_metrics: dict[str, torch.Tensor] = {}
        self.should_stop = False
        self.current_epoch = 0

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

"""A cell's own view of its group's Trainer: what a callback of the cell reads and sets on "its"
trainer through Lightning's public hooks, kept per cell while the group's one Trainer fits them all.

The group's ``Trainer`` answers what every cell shares (state, strategy, rank, the dev schedule,
``fast_dev_run``); the view keeps what is the cell's own: its latest dev metrics
(``callback_metrics``), its epoch, its ``should_stop`` and its loggers. The cell's
``EarlyStopping`` is driven through ``setup``, ``on_validation_end`` and ``on_train_epoch_end``
with this view, so its own rule (patience, ``min_delta``, thresholds, ``check_finite``,
``check_on_train_epoch_end``) decides for the cell as it would alone.
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import Logger


class CellTrainer:
    """The public Trainer attributes a cell's callbacks read (module docstring)."""

    def __init__(self, group: pl.Trainer, loggers: list[Logger]):
        self.group = group
        self.loggers = loggers
        self.callback_metrics: dict[str, torch.Tensor] = {}
        self.should_stop = False
        self.current_epoch = 0

    # What the cells share: the group's own answers.
    @property
    def state(self):
        return self.group.state

    @property
    def strategy(self):
        return self.group.strategy

    @property
    def sanity_checking(self) -> bool:
        return self.group.sanity_checking

    @property
    def fast_dev_run(self):
        return self.group.fast_dev_run  # type: ignore[attr-defined]  # set by Lightning's connectors

    @property
    def val_check_interval(self):
        return self.group.val_check_interval

    @property
    def check_val_every_n_epoch(self):
        return self.group.check_val_every_n_epoch

    @property
    def global_rank(self) -> int:
        return self.group.global_rank

    @property
    def world_size(self) -> int:
        return self.group.world_size

    @property
    def is_global_zero(self) -> bool:
        return self.group.is_global_zero

    def evaluated(self, metrics: dict[str, float], epoch: int) -> None:
        """The cell's dev evaluation at ``epoch``: its metrics as Lightning's logger connector keeps
        them for callbacks (tensors)."""
        self.callback_metrics = {name: torch.tensor(value) for name, value in metrics.items()}
        self.current_epoch = epoch

"""The training losses of an epoch, kept on the device: one record per optimiser step, read on the
host only when the epoch ends or an evaluation starts — the finite-loss check, the epoch's mean
(``train/loss_epoch``) and the step losses for the loggers (``train/loss_step``). Nothing per step
beyond keeping the record: on a GPU every read of a loss waits for the queued work."""

from __future__ import annotations

from typing import NamedTuple

import torch


class StepLoss(NamedTuple):
    """One optimiser step's loss (on the device) and where it was taken."""

    batch: int  # the batch's index in the fit (the logging step); several steps may share it
    global_step: int  # optimiser steps before it
    epoch: int
    loss: torch.Tensor  # a scalar
    rows: int  # the batch's rows (examples)


class StepLosses:
    """This epoch's :class:`StepLoss` records; a batch's loss is the sum of its steps' (OVA-AUC's B,
    I and O steps, COMAUC-2T's CE and AUC steps)."""

    def __init__(self) -> None:
        self.steps: list[StepLoss] = []
        self._checked = 0  # records already found finite

    def add(self, loss: torch.Tensor, batch: int, global_step: int, epoch: int, rows: int) -> None:
        self.steps.append(StepLoss(batch, global_step, epoch, loss.detach().float().sum(), rows))  # libauc: shape (1,)

    def first_nonfinite(self) -> StepLoss | None:
        """The first record since the last call whose loss is not finite (one read of the device)."""
        new, self._checked = self.steps[self._checked :], len(self.steps)
        if not new:
            return None
        finite = torch.isfinite(torch.stack([s.loss for s in new]))
        return None if bool(finite.all()) else new[finite.tolist().index(False)]

    def batches(self, epoch: int | None = None) -> list[tuple[StepLoss, torch.Tensor]]:
        """Each batch's first record and its loss (the sum of its steps'), of ``epoch`` or all."""
        out: list[tuple[StepLoss, torch.Tensor]] = []
        for s in self.steps:
            if epoch is not None and s.epoch != epoch:
                continue
            if out and out[-1][0].batch == s.batch:
                out[-1] = (out[-1][0], out[-1][1] + s.loss)
            else:
                out.append((s, s.loss))
        return out

    def epoch_mean(self, epoch: int) -> torch.Tensor | None:
        """The epoch's batch losses averaged over their rows (Lightning's ``on_epoch`` mean)."""
        batches = self.batches(epoch)
        if not batches:
            return None
        rows = torch.tensor([s.rows for s, _ in batches], dtype=torch.float32, device=batches[0][1].device)
        return (torch.stack([loss for _, loss in batches]) * rows).sum() / rows.sum()

    def take(self) -> list[tuple[StepLoss, torch.Tensor]]:
        """Every batch's record and loss, and a fresh epoch."""
        out = self.batches()
        self.steps, self._checked = [], 0
        return out

    def log_to(self, loggers: list, every: int) -> None:
        """Take the kept losses and log every ``every``-th batch's (``train/loss_step``, as
        Lightning's ``log_every_n_steps`` would) to ``loggers``: one transfer."""
        kept = [(s, loss) for s, loss in self.take() if (s.batch + 1) % every == 0]
        if not kept or not loggers:
            return
        values = torch.stack([loss for _, loss in kept]).tolist()
        for logger in loggers:
            for (s, _), value in zip(kept, values, strict=True):
                logger.log_metrics({"train/loss_step": value, "epoch": s.epoch}, step=s.batch)

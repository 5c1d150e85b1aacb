"""Callbacks that own the training schedule: a budget counted in batches, the MUNCHABLES paper's
annealing, and the contract for a callback that sets the learning-rate schedule's length."""

from __future__ import annotations

import abc
import logging

import pytorch_lightning as pl
from torch.optim.lr_scheduler import LambdaLR

log = logging.getLogger("ner_lightning")


class ScheduleHorizon(pl.Callback, abc.ABC):
    """A callback that owns the length of the learning-rate schedule: it hands itself to the
    module in ``setup`` (``NERModule.use_schedule``, read in ``configure_optimizers``; at most
    one per run).
    ``restarts_schedule``: the schedule starts over during training (one run of it per phase),
    so reaching the end of the learning rate does not end training."""

    restarts_schedule: bool = False

    @abc.abstractmethod
    def schedule_steps(self, trainer: pl.Trainer) -> int:
        """Optimiser-scheduler steps of one run of the schedule."""

    def setup(self, trainer: pl.Trainer, pl_module, stage: str) -> None:
        if stage == "fit":
            pl_module.use_schedule(self)


class BatchBudget(ScheduleHorizon):
    """Train for exactly ``batches`` training batches, however many epochs that is (the
    replication protocol, docs/results/replication.md: every method at every size gets the same
    number of batches, where an epoch at size 20 is 3 of them and at size 200 25). The
    learning-rate schedule spans the budget (:meth:`schedule_steps`). Families that take several
    optimiser steps per batch (COMAUC-2T, OVA-AUC) keep them: the budget counts data, not
    updates (``compute.optimizer_steps`` in results.json records both). Dev evaluation every
    ``trainer.val_check_interval`` batches across epochs (``trainer=batch_budget``)."""

    def __init__(self, batches: int):
        if int(batches) < 1:
            raise ValueError(
                f"callbacks.batch_budget.batches must be a positive number of training batches, got {batches}"
            )
        self.batches = int(batches)

    def setup(self, trainer, pl_module, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if stage != "fit":
            return
        if trainer.max_epochs not in (None, -1) or trainer.max_steps not in (None, -1):
            raise ValueError(
                f"callbacks.batch_budget ends training after {self.batches} batches, but trainer.max_epochs="
                f"{trainer.max_epochs} / trainer.max_steps={trainer.max_steps} may end it first: "
                "set trainer.max_epochs=-1 trainer.max_steps=-1 (trainer=batch_budget does)"
            )
        if trainer.fit_loop.min_epochs or trainer.fit_loop.min_steps:
            raise ValueError(
                f"callbacks.batch_budget: trainer.min_epochs={trainer.fit_loop.min_epochs} / trainer.min_steps="
                f"{trainer.fit_loop.min_steps} would keep training past the budget: set them to 0 "
                "(trainer=batch_budget does)"
            )
        if trainer.check_val_every_n_epoch is not None:
            raise ValueError(
                "callbacks.batch_budget counts batches across epochs: set trainer.check_val_every_n_epoch=null "
                "and trainer.val_check_interval=<batches between dev evaluations> (trainer=batch_budget does)"
            )

    def schedule_steps(self, trainer) -> int:
        """Length of the learning-rate schedule: the budget (the schedule steps once a batch)."""
        return self.batches

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.fit_loop.epoch_loop.total_batch_idx + 1 >= self.batches:
            trainer.should_stop = True


def restart_schedule(trainer: pl.Trainer) -> None:
    """Back to step 0 of the learning-rate schedule (warm-up again, then decay over a phase)."""
    for config in trainer.lr_scheduler_configs:
        sched = config.scheduler
        if not isinstance(sched, LambdaLR):
            raise TypeError(
                f"restarting the schedule takes a LambdaLR (NERModule's warm-up), not {type(sched).__name__}"
            )
        sched.last_epoch = 0
        for group, base, fn in zip(sched.optimizer.param_groups, sched.base_lrs, sched.lr_lambdas, strict=True):
            group["lr"] = base * fn(0)


class AnnealOnPlateau(pl.Callback):
    """The MUNCHABLES paper's schedule (§4.1, flair's AnnealOnPlateau): a constant learning rate,
    halved (``factor``) when the epoch's main training loss has not reached a new minimum for
    ``patience`` consecutive epochs; training ends when the rate falls below ``min_lr`` — or,
    under a :class:`ScheduleHorizon` that restarts the schedule (MUNCH-Stack's phases), the phase
    does and the rate starts over.
    Replaces the family's warm-up/decay (its LambdaLR multipliers become 1)."""

    def __init__(self, factor: float, patience: int, min_lr: float):
        self.factor, self.patience, self.min_lr = factor, patience, min_lr
        self.best: float | None = None
        self.bad_epochs = 0
        self.scale = 1.0  # current rate / initial rate
        self.converged = False

    def state_dict(self) -> dict:
        return {"best": self.best, "bad_epochs": self.bad_epochs, "scale": self.scale}

    def load_state_dict(self, state: dict) -> None:
        self.best, self.bad_epochs, self.scale = state["best"], state["bad_epochs"], state["scale"]

    def on_train_start(self, trainer, pl_module) -> None:
        for config in trainer.lr_scheduler_configs:
            sched = config.scheduler
            sched.lr_lambdas = [self._multiplier for _ in sched.lr_lambdas]
            for group, base in zip(sched.optimizer.param_groups, sched.base_lrs, strict=True):
                group["lr"] = base * self.scale

    def _multiplier(self, step: int) -> float:
        return self.scale

    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage == "fit":
            pl_module.use_rate_policy(self)

    def restart(self, trainer) -> None:
        self.best, self.bad_epochs, self.scale, self.converged = None, 0, 1.0, False
        restart_schedule(trainer)

    def below_minimum(self, trainer) -> bool:
        return self.learning_rate(trainer) < self.min_lr

    def learning_rate(self, trainer) -> float:
        """The largest learning rate of any parameter group (the paper's one rate; with a smaller
        encoder rate, training ends when the heads' rate falls below ``min_lr``)."""
        return max(g["lr"] for opt in trainer.optimizers for g in opt.param_groups)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        loss = pl_module.epoch_loss()
        if loss is None:
            return
        if self.best is None or loss < self.best:
            self.best, self.bad_epochs = loss, 0
        else:
            self.bad_epochs += 1
        if self.bad_epochs >= self.patience:
            self.scale *= self.factor
            self.bad_epochs = 0
            restart_schedule(trainer)  # applies the new multiplier
            log.info(
                "epoch %d: main loss has not improved for %d epochs, learning rate x%g (now %.2e)",
                trainer.current_epoch,
                self.patience,
                self.factor,
                self.learning_rate(trainer),
            )
        self.converged = self.below_minimum(trainer)
        owner = pl_module.schedule_owner  # a phase that restarts the schedule ends training itself
        if self.converged and not (owner is not None and owner.restarts_schedule):
            log.info("learning rate below %g: training ends", self.min_lr)
            trainer.should_stop = True

"""One cell's share of a lockstep group's fit: what Lightning's loops and the cell's own callbacks
keep for a cell trained alone, kept for it while it trains in the group.

* its dev evaluations — history, span scores, ``val/*`` metrics in its own loggers (CSV, W&B) —
  and its training losses (``train/loss_step``, ``train/loss_epoch``), at its own steps;
* selection by its own ``ModelCheckpoint`` (``save_top_k``, ``every_n_epochs``, filename templates,
  ``best_model_path`` as alone) and its dev predictions by its own ``PredictionWriter``, driven
  through their public hooks with the cell's view of the group's Trainer
  (``cell_trainer.CellTrainer``): a checkpoint they save is the cell's weights, held in memory by a
  ``BestCheckpoint`` until the group's ``last.ckpt`` is written (or written at once by the group's
  background writer, a copy kept until the fit ends);
* its test, in the group's stacked test of every cell's selected weights (``group_module``): its
  scores kept and logged as ``trainer.test`` keeps them, its callbacks' test hooks driven with
  its view of the trainer (the test predictions file, its test tokens);
* early stopping by its own ``EarlyStopping``, driven the same way, and when the stop takes effect
  as Lightning's fit loop decides it (``trainer.should_stop`` holds once set; training ends at the
  first epoch end — or mid-epoch evaluation — where ``min_epochs`` is met);
* a training loss that is not finite stops the cell with an error of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint

from ner_lightning.callbacks.checkpointing import HOLDING, BestCheckpoint, selecting_checkpoint
from ner_lightning.callbacks.predictions import PredictionWriter
from ner_lightning.export.folder import read_tensors
from ner_lightning.lockstep.cell_trainer import CellTrainer
from ner_lightning.lockstep.members import Member
from ner_lightning.span_counts import PredictedTags

log = logging.getLogger("ner_lightning")


@dataclass
class CellFit:
    """A member's training state inside its group (module docstring). ``driven``: the cell's own
    callbacks the group runs through their hooks, in its Trainer's order (checkpoints last)."""

    member: Member
    min_epochs: int
    stopping: EarlyStopping | None = None
    selection: ModelCheckpoint | None = None
    driven: list[pl.Callback] = field(default_factory=list)
    should_stop: bool = False  # its EarlyStopping asked to stop (held, as trainer.should_stop is)
    stopped: bool = False  # it trains no more (stopped, or failed: member.error)
    epochs: int = 0  # epochs it trained
    steps: int = 0  # optimiser steps it took
    view: CellTrainer | None = field(default=None, repr=False)  # its callbacks' trainer (attach)

    @classmethod
    def of(cls, member: Member, min_epochs: int) -> CellFit:
        trainer = member.run.trainer  # the cell's own, with its callbacks
        selection = selecting_checkpoint(trainer)  # the one a cell alone tests with
        callbacks: list[pl.Callback] = trainer.callbacks  # type: ignore[attr-defined]  # set by Lightning's connector
        own = (EarlyStopping, PredictionWriter)
        driven: list[pl.Callback] = [c for c in callbacks if isinstance(c, own) or c is selection]
        return cls(member, min_epochs, trainer.early_stopping_callback, selection, driven)

    @property
    def module(self):
        return self.member.run.module

    def attach(self, group: pl.Trainer, weights: Callable[[], dict[str, torch.Tensor]]) -> None:
        """The group's fit begins: the cell's view of its Trainer (``weights``: the cell's current
        weights, views of its rows of the stack), and its callbacks' ``setup``."""
        kept = self.module.state_dict().keys()  # not the non-persistent buffers that the stack carries too
        self.view = CellTrainer(
            group,
            self.member.run.loggers,
            self.member.run.datamodule,
            self.selection,
            lambda: {n: t for n, t in weights().items() if n in kept},
        )
        self.hook("setup", "fit")

    def _trainer_view(self) -> CellTrainer:
        if self.view is None:
            raise RuntimeError("the cell is not attached to its group's Trainer (CellFit.attach)")
        return self.view

    def _trainer(self) -> pl.Trainer:
        return cast(pl.Trainer, self._trainer_view())

    def hook(self, name: str, *args) -> None:
        """Lightning's ``name`` hook of the cell's driven callbacks on its own view of the trainer;
        the stop its EarlyStopping asks for is held; what its checkpoint callback no longer ranks is
        forgotten (``CellTrainer.saved``)."""
        view = self.view
        if view is None:
            return
        view.should_stop, view.global_step = self.should_stop, self.steps
        for callback in self.driven:
            getattr(callback, name)(self._trainer(), self.module, *args)
        self.should_stop = view.should_stop
        if self.selection is not None:
            ranked = {*self.selection.best_k_models, self.selection.best_model_path}
            view.saved = {path: c for path, c in view.saved.items() if path in ranked}

    @property
    def training(self) -> bool:
        return not self.stopped

    # --- training -------------------------------------------------------------------------------
    def stepped(self, loss: torch.Tensor, batch: int, epoch: int, rows: int) -> None:
        """One optimiser step of this cell (its loss kept on the device)."""
        self.module.step_losses.add(loss, batch, self.steps, epoch, rows)
        self.module.train_batches += 1
        self.module.forward_passes += 1
        self.steps += 1

    def check_finite(self) -> bool:
        """Whether its losses since the last check are finite; if not, it stops with an error."""
        try:
            self.module.check_finite()  # the cell's own check, as alone
            return True
        except FloatingPointError as err:
            self.member.error = err
        log.error("%s | %s: this cell stops, its group goes on", self.member.cell.prefix, self.member.error)
        self.stopped = True
        return False

    def epoch_ended(self, epoch: int, log_every: int) -> None:
        """Its epoch's losses to its loggers, then its callbacks' ``on_train_epoch_end`` (Lightning
        runs them after the module's); the stop, where its EarlyStopping asked for one."""
        self.epochs = epoch + 1
        if not self.check_finite():
            return
        loggers = self.member.run.loggers
        mean = self.module.step_losses.epoch_mean(epoch)
        self.module.step_losses.log_to(loggers, log_every)
        if mean is not None:
            for lg in loggers:
                lg.log_metrics({"train/loss_epoch": float(mean), "epoch": epoch}, step=max(self.steps - 1, 0))
        if self.view is not None:
            self.view.current_epoch = epoch
            if mean is not None:
                self.view.callback_metrics["train/loss_epoch"] = torch.tensor(float(mean))
        self.hook("on_train_epoch_end")
        if self.should_stop and self.epochs >= self.min_epochs:
            self.stopped = True

    # --- evaluation -----------------------------------------------------------------------------
    def evaluated(self, scores: dict, predicted: PredictedTags, epoch: int, epochs_done: int | None) -> None:
        """A dev evaluation of this cell: its span ``scores`` and ``predicted`` tags (counted for
        the whole group at once), then its callbacks' ``on_validation_end``; ``epochs_done``: whole
        epochs behind it (a mid-epoch evaluation's stop needs ``min_epochs`` of them)."""
        if not self.check_finite():
            return
        module, dm = self.module, self.member.run.datamodule
        module.predictions["val"] = {dm.corpus_names[0]: predicted}
        metrics = module.record_scores("val", scores, epoch)
        for lg in self.member.run.loggers:
            lg.log_metrics({**metrics, "epoch": epoch}, step=max(self.steps - 1, 0))
        if self.view is not None:
            self.view.evaluated(metrics, epoch)
        self.hook("on_validation_end")
        if epochs_done is not None and self.should_stop and epochs_done >= self.min_epochs:
            self.stopped, self.epochs = True, epochs_done + 1  # Lightning leaves the epoch here

    # --- test -----------------------------------------------------------------------------------
    def test_hook(self, hook: str, *args) -> None:
        """Lightning's test ``hook`` of each of the cell's own callbacks, on its view of the trainer."""
        for callback in self.member.run.callbacks:
            getattr(callback, hook)(self._trainer(), self.module, *args)

    def tested(self, scores: dict, predicted: PredictedTags) -> None:
        """The stacked test of the cell's selected weights: its scores kept (``record.test``) and
        logged at its last step, its predictions for its callbacks' ``on_test_end``."""
        module, dm = self.module, self.member.run.datamodule
        module.predictions["test"] = {dm.corpus_names[0]: predicted}
        metrics = module.record_scores("test", scores, self.epochs)
        for lg in self.member.run.loggers:
            lg.log_metrics({**metrics, "epoch": self.epochs}, step=max(self.steps - 1, 0))
        self.member.tested = True
        if self.member.run.lockstep is not None:
            self.member.run.lockstep["test"] = "stacked"  # results.json: tested in the group's one pass

    # --- checkpoints ----------------------------------------------------------------------------
    def before_group_checkpoint(self, checkpoint: dict) -> None:
        """The group's ``last.ckpt`` is about to be written: what the cell's checkpoint callback
        holds reaches the disk first (as ``ResumeCheckpoint`` writes it for a cell alone), then its
        callbacks' ``on_save_checkpoint`` (its held dev predictions)."""
        view = self.view
        if view is None:
            return
        for held in HOLDING.get(view, []):
            held.write_held(self._trainer())
        self.hook("on_save_checkpoint", checkpoint)

    @property
    def best_path(self) -> str:
        """Its checkpoint callback's ``best_model_path`` ("" when it selected nothing)."""
        return self.selection.best_model_path if self.selection is not None else ""

    def selected_weights(self) -> dict[str, torch.Tensor]:
        """The weights ``trainer.test(ckpt_path=best_model_path)`` would test: its selection's
        checkpoint — in memory while held or in the writer's queue, else the file an earlier attempt
        wrote — or, having selected nothing, a copy of its latest weights in the stack."""
        view = self._trainer_view()
        path = self.best_path
        if not path:
            return {n: t.detach().clone() for n, t in view.weights().items()}
        held = self.selection.held if isinstance(self.selection, BestCheckpoint) else {}
        checkpoint = held.get(path) or view.saved.get(path)
        return (checkpoint or read_tensors(path))["state_dict"]

    def end_with_selected(self) -> None:
        """The fit ended: the cell's module takes its selected weights (:meth:`selected_weights`),
        then its callbacks' ``on_train_end`` write what they hold."""
        weights = self.selected_weights()
        self.module.load_state_dict({n: t.cpu() for n, t in weights.items()})
        self.hook("on_train_end")
        self.member.checkpoint = self.best_path or None

    def state_dict(self) -> dict:
        """What the group's ``last.ckpt`` keeps of this cell."""
        return {
            "should_stop": self.should_stop,
            "stopped": self.stopped,
            "error": None if self.member.error is None else f"{type(self.member.error).__name__}: {self.member.error}",
            "epochs": self.epochs,
            "steps": self.steps,
            "selection": self.selection.state_dict() if self.selection is not None else None,
            "stopping": self.stopping.state_dict() if self.stopping is not None else None,
            "history": self.module.history,
            "train_batches": self.module.train_batches,
            "forward_passes": self.module.forward_passes,
        }

    def load_state_dict(self, state: dict) -> None:
        self.should_stop, self.stopped = state["should_stop"], state["stopped"]
        self.epochs, self.steps = state["epochs"], state["steps"]
        if state["error"] is not None:
            self.member.error = FloatingPointError(state["error"])
        if self.selection is not None and state.get("selection") is not None:
            self.selection.load_state_dict(state["selection"])
        if self.stopping is not None and state["stopping"] is not None:
            self.stopping.load_state_dict(state["stopping"])
        self.module.history = state["history"]
        self.module.train_batches, self.module.forward_passes = state["train_batches"], state["forward_passes"]

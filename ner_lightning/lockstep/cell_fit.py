"""One cell's share of a lockstep group's fit: what Lightning's loops and the cell's own callbacks
keep for a cell trained alone, kept for it while it trains in the group.

* its dev evaluations — history, span scores, ``val/*`` metrics in its own loggers (CSV, W&B) —
  and its training losses (``train/loss_step``, ``train/loss_epoch``), at its own steps;
* selection as its ``ModelCheckpoint`` selects (the first best ``monitor``; none: the latest
  evaluation), the selected weights held in memory and written as the cell's own ``best.ckpt``
  (a plain single-cell checkpoint) before the group's ``last.ckpt`` and at the end, and its dev
  predictions as its ``PredictionWriter`` holds and writes them;
* its test, in the group's stacked test of every cell's selected weights (``group_module``): its
  scores kept and logged as ``trainer.test`` keeps them, its callbacks' test hooks driven with
  its view of the trainer (the test predictions file, its test tokens);
* early stopping by its own ``EarlyStopping`` object, driven through its public hooks with the
  cell's view of the group's Trainer (``cell_trainer.CellTrainer``), and when the stop takes effect
  as Lightning's fit loop decides it (``trainer.should_stop`` holds once set; training ends at the
  first epoch end — or mid-epoch evaluation — where ``min_epochs`` is met);
* a training loss that is not finite stops the cell with an error of its own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint

from ner_lightning.callbacks.checkpointing import selecting_checkpoint
from ner_lightning.callbacks.predictions import PredictionWriter
from ner_lightning.export.folder import read_tensors
from ner_lightning.lockstep.cell_trainer import CellTrainer
from ner_lightning.lockstep.members import Member
from ner_lightning.results import best_epoch
from ner_lightning.span_counts import PredictedTags

log = logging.getLogger("ner_lightning")


def _writer(callbacks: list) -> PredictionWriter | None:
    return next((c for c in callbacks if isinstance(c, PredictionWriter)), None)


@dataclass
class CellFit:
    """A member's training state inside its group (module docstring)."""

    member: Member
    min_epochs: int
    stopping: EarlyStopping | None = None
    selection: ModelCheckpoint | None = None
    writer: PredictionWriter | None = None
    should_stop: bool = False  # its EarlyStopping asked to stop (held, as trainer.should_stop is)
    stopped: bool = False  # it trains no more (stopped, or failed: member.error)
    epochs: int = 0  # epochs it trained
    steps: int = 0  # optimiser steps it took
    best_value: float | None = None
    selected: dict[str, torch.Tensor] | None = field(default=None, repr=False)  # this attempt's selection, kept
    unwritten: bool = False  # the selection is not on disk yet
    view: CellTrainer | None = field(default=None, repr=False)  # its callbacks' trainer (attach)

    @classmethod
    def of(cls, member: Member, min_epochs: int) -> CellFit:
        trainer = member.run.trainer  # the cell's own, with its callbacks
        return cls(
            member,
            min_epochs,
            stopping=trainer.early_stopping_callback,
            selection=selecting_checkpoint(trainer),  # the one a cell alone tests with
            writer=_writer(member.run.callbacks),
        )

    @property
    def module(self):
        return self.member.run.module

    def attach(self, group: pl.Trainer) -> None:
        """The group's fit begins: the cell's view of its Trainer, and its callbacks' ``setup``."""
        self.view = CellTrainer(group, self.member.run.loggers, self.member.run.datamodule)
        if self.stopping is not None:
            self.stopping.setup(self._trainer(), self.module, "fit")

    def _trainer(self) -> pl.Trainer:
        if self.view is None:
            raise RuntimeError("the cell is not attached to its group's Trainer (CellFit.attach)")
        return cast(pl.Trainer, self.view)

    def _stopping_hook(self, hook: str) -> None:
        """Its ``EarlyStopping``'s public ``hook`` on its own view; the stop it asks for is held."""
        if self.stopping is None or self.view is None:
            return
        self.view.should_stop = self.should_stop
        getattr(self.stopping, hook)(self._trainer(), self.module)
        self.should_stop = self.view.should_stop

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
        """Its epoch's losses to its loggers; the stop, where its EarlyStopping asked for one."""
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
        self._stopping_hook("on_train_epoch_end")
        if self.should_stop and self.epochs >= self.min_epochs:
            self.stopped = True

    # --- evaluation -----------------------------------------------------------------------------
    def evaluated(
        self,
        scores: dict,
        predicted: PredictedTags,
        epoch: int,
        state: dict[str, torch.Tensor],
        epochs_done: int | None,
    ) -> None:
        """A dev evaluation of this cell: its span ``scores`` and ``predicted`` tags (counted for
        the whole group at once); ``state``: its current weights (views); ``epochs_done``: whole
        epochs behind it (a mid-epoch evaluation's stop needs ``min_epochs`` of them)."""
        if not self.check_finite():
            return
        module, dm = self.module, self.member.run.datamodule
        module.predictions["val"] = {dm.corpus_names[0]: predicted}
        metrics = module.record_scores("val", scores, epoch)
        for lg in self.member.run.loggers:
            lg.log_metrics({**metrics, "epoch": epoch}, step=max(self.steps - 1, 0))
        self._select(metrics, state)
        if self.view is not None:
            self.view.evaluated(metrics, epoch)
        self._stopping_hook("on_validation_end")
        if epochs_done is not None and self.should_stop and epochs_done >= self.min_epochs:
            self.stopped, self.epochs = True, epochs_done + 1  # Lightning leaves the epoch here

    def _select(self, metrics: dict, state: dict[str, torch.Tensor]) -> None:
        """``ModelCheckpoint``'s choice (mode max/min, strictly better; no monitor: every time) and
        ``PredictionWriter``'s dev file for the evaluation it selects."""
        monitor = self.selection.monitor if self.selection is not None else None
        if self.selection is not None:
            value, better = None, True
            if monitor is not None:
                value = float(metrics[monitor])
                if value != value:  # NaN, as ModelCheckpoint ranks it
                    value = float("inf") if self.selection.mode == "min" else float("-inf")
                best = self.best_value
                better = best is None or (value < best if self.selection.mode == "min" else value > best)
            if better:
                self.best_value = value
                self.selected, self.unwritten = self.saved(state), True
        history = self.module.history
        mode = self.selection.mode if self.selection is not None else "max"
        if self.writer is not None and (monitor is None or best_epoch(history, monitor, mode) is history[-1]):
            self.writer.hold(self.module.predictions["val"])

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
    def saved(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A copy of what the cell's own ``state_dict`` holds of ``state`` (not the non-persistent
        buffers that the stack carries too)."""
        kept = self.module.state_dict().keys()
        return {n: t.detach().clone() for n, t in state.items() if n in kept}

    def best_path(self) -> Path | None:
        if self.selection is None or self.selection.dirpath is None:
            return None
        return Path(self.selection.dirpath) / f"{self.selection.filename}{self.selection.FILE_EXTENSION}"

    def write_held(self) -> None:
        """The selected weights not yet on disk, as the cell's ``best.ckpt`` (a weights-only
        Lightning checkpoint of the cell's own module), and its held dev predictions."""
        if self.writer is not None:
            self.writer.write_held(self.member.run.datamodule)
        path = self.best_path()
        if not self.unwritten or self.selected is None or path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        checkpoint = {
            "epoch": self.module.history[-1]["epoch"] if self.module.history else 0,
            "global_step": self.steps,
            "pytorch-lightning_version": pl.__version__,
            "state_dict": {n: t.cpu() for n, t in self.selected.items()},
        }
        trainer = self.view.group if self.view is not None else self.member.run.trainer  # the group's writer thread
        trainer.strategy.checkpoint_io.save_checkpoint(checkpoint, path)
        self.unwritten = False
        self.member.checkpoint = str(path)

    def end_with_selected(self, final: dict[str, torch.Tensor]) -> None:
        """The fit ended: the cell's module takes the weights ``trainer.test(ckpt_path=best)`` would
        test — its selection (kept in memory: its ``best.ckpt`` may still be in the writer's queue;
        or the ``best.ckpt`` an earlier attempt wrote) or, having selected nothing, ``final`` (its
        latest weights in the stack) — and what it holds is written."""
        if self.selection is not None and self.selected is not None:
            weights = self.selected
        elif self.selection is not None and self.member.checkpoint is not None:
            weights = read_tensors(self.member.checkpoint)["state_dict"]
        else:
            weights = self.saved(final)
        self.module.load_state_dict({n: t.cpu() for n, t in weights.items()})
        self.write_held()

    def state_dict(self) -> dict:
        """What the group's ``last.ckpt`` keeps of this cell."""
        return {
            "should_stop": self.should_stop,
            "stopped": self.stopped,
            "error": None if self.member.error is None else f"{type(self.member.error).__name__}: {self.member.error}",
            "epochs": self.epochs,
            "steps": self.steps,
            "best_value": self.best_value,
            "checkpoint": self.member.checkpoint,
            "stopping": self.stopping.state_dict() if self.stopping is not None else None,
            "history": self.module.history,
            "train_batches": self.module.train_batches,
            "forward_passes": self.module.forward_passes,
        }

    def load_state_dict(self, state: dict) -> None:
        self.should_stop, self.stopped = state["should_stop"], state["stopped"]
        self.epochs, self.steps, self.best_value = state["epochs"], state["steps"], state["best_value"]
        self.member.checkpoint = state["checkpoint"]
        if state["error"] is not None:
            self.member.error = FloatingPointError(state["error"])
        if self.stopping is not None and state["stopping"] is not None:
            self.stopping.load_state_dict(state["stopping"])
        self.module.history = state["history"]
        self.module.train_batches, self.module.forward_passes = state["train_batches"], state["forward_passes"]

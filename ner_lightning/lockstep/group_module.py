"""A lockstep group as one ``LightningModule``: the K cells stacked (``stacking.StackedCells``),
trained by Lightning's own fit loop.

* **Training** (manual optimisation: the clipping is per cell): each step takes one batch per cell
  — the training loader is a ``CombinedLoader`` of the cells' own loaders, so Lightning sets every
  sampler's epoch, as it does for a cell alone — and steps every cell still training; the rows of
  cells that stopped are held (``stacking.FrozenRows``). The schedule is the cell's own: linear
  warm-up and decay over ``trainer.estimated_stepping_batches``.
* **Precision** is the Trainer's: under ``bf16-mixed`` the encoder runs in bf16, heads, losses
  and decoding in fp32, as ``NERModule.word_states`` runs a cell alone; dev evaluation runs in the
  cells' ``callbacks.eval_precision``.
* **Dev evaluation** reads each dev batch once and scores it with the models of the cells still
  training; each cell's evaluation, selection and stopping is its own (``cell_fit.CellFit``). The
  fit ends when every cell has stopped (``trainer.should_stop``) or at ``max_epochs``.
* **Test** (``trainer.test`` of this module after the fit): every cell's selected weights in its
  rows of the stack, the test batches read once and scored by the K models at once; each cell's
  scores, logs and test predictions are its own (``CellFit.tested``), as its ``trainer.test`` gives.
* **Checkpoint**: the group's ``last.ckpt`` holds the stacked weights, the optimiser and schedule,
  Lightning's loops, every cell's :class:`CellFit` state and the random generators; a rerun resumes
  from it (``trainer.fit(ckpt_path=…)``) and each cell ends as if uninterrupted.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import pytorch_lightning as pl
import torch
from lightning_utilities.core.apply_func import apply_to_collection
from transformers import get_linear_schedule_with_warmup

from ner_lightning.checkpoint_io import rng_states, set_rng_states
from ner_lightning.clock import PROCESS
from ner_lightning.lockstep.cell_fit import CellFit
from ner_lightning.lockstep.stacking import FrozenRows, StackedCells, stack_batches
from ner_lightning.models.base import MIXED_PRECISION
from ner_lightning.models.evaluation import SPLIT_OF_STAGE, batches_limited
from ner_lightning.models.word_grid import layout_of
from ner_lightning.span_counts import PredictedTags


class LockstepModule(pl.LightningModule):
    """The group's cells (their :class:`CellFit`) trained as one stacked model (module docstring).
    ``clip_norm``: each cell's ``trainer.gradient_clip_val``; ``eval_precision``: the precision of
    its dev evaluations (None: the Trainer's); ``rows``: the cells' rows in an earlier, larger
    group's checkpoint that it resumes (None: its own)."""

    def __init__(
        self,
        cells: Sequence[CellFit],
        clip_norm: float | None,
        eval_precision: str | None,
        rows: list[int] | None = None,
    ):
        super().__init__()
        self.rows = rows  # the cells' rows in the checkpoint it resumes, when an earlier group wrote it
        self.automatic_optimization = False
        self.cells = list(cells)  # not submodules: each cell's module keeps its own weights for its test
        self.clip_norm = clip_norm
        self.eval_precision = eval_precision
        self.stack: StackedCells | None = None
        self.frozen = FrozenRows()
        self._collected: list[tuple[torch.Tensor, object, list[int]]] = []
        self._at_last_batch = False  # the latest training batch ended its epoch (a dev run there is the epoch's)
        datamodule = self.cells[0].member.run.datamodule
        self.pad_id = datamodule.tokenizer.pad_token_id

    # --- set-up ---------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        """Each cell's own set-up from its data (``NERModule.fit_to_data``: WCE's class weights),
        then the stack."""
        if stage != "fit":  # the stacked test after the fit: the cells are attached and stacked
            return
        if self.stack is None:
            for cell in self.cells:
                cell.module.fit_to_data(cell.member.run.datamodule)
            self.stack = StackedCells([cell.module for cell in self.cells])
        for k, cell in enumerate(self.cells):
            cell.attach(self.trainer, functools.partial(self._cell_state, k))

    def _cell_state(self, k: int) -> dict[str, torch.Tensor]:
        return self.stacked().cell_state(k)

    def stacked(self) -> StackedCells:
        if self.stack is None:
            raise RuntimeError("the lockstep group is not set up (LockstepModule.setup)")
        return self.stack

    def configure_optimizers(self):
        first = self.cells[0].module
        optimizer = first.optimizer_factory(params=self.stacked().optimizer_groups())
        total = self.trainer.estimated_stepping_batches
        scheduler = get_linear_schedule_with_warmup(optimizer, int(first.warmup_ratio * total), int(total))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def transfer_batch_to_device(self, batch, device: torch.device, dataloader_idx: int):
        """Each cell's batch moved as its data module moves it (layouts stay on the host)."""
        cells = self.cells
        if isinstance(batch, list):
            return [
                c.member.run.datamodule.transfer_batch_to_device(b, device, 0)
                for c, b in zip(cells, batch, strict=True)
            ]
        return cells[0].member.run.datamodule.transfer_batch_to_device(batch, device, dataloader_idx)

    def _autocast_dtype(self, precision: object) -> torch.dtype | None:
        return MIXED_PRECISION.get(str(precision))

    def training_cells(self) -> list[int]:
        return [k for k, c in enumerate(self.cells) if c.training]

    # --- training -------------------------------------------------------------------------------
    def on_train_start(self) -> None:
        if not self.training_cells():  # resumed from a checkpoint written after every cell stopped
            self.trainer.should_stop = True

    def training_step(self, batch: list[dict], batch_idx: int) -> None:
        stack, optimizer, scheduler = self.stacked(), self.optimizers(), self.lr_schedulers()
        if isinstance(optimizer, list) or scheduler is None or isinstance(scheduler, list):
            raise TypeError("a lockstep group takes one optimiser and one schedule")
        self.frozen.hold([k for k, c in enumerate(self.cells) if not c.training], stack, optimizer.optimizer)
        with torch.autocast(self.device.type, enabled=False):  # the encoder's autocast is the family's
            dtype = self._autocast_dtype(self.trainer.precision)
            losses = stack.step(stack_batches(batch, self.pad_id), optimizer, self.clip_norm, dtype, self.frozen)
        scheduler.step()
        epoch = self.current_epoch
        for k in self.training_cells():
            self.cells[k].stepped(losses[k], self.cells[k].module.train_batches, epoch, batch[k]["input_ids"].size(0))

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        self._at_last_batch = batch_idx + 1 == self.trainer.num_training_batches

    def on_train_epoch_end(self) -> None:
        every = self.trainer.log_every_n_steps  # type: ignore[attr-defined]  # set by Lightning's logger connector
        for k in self.training_cells():
            self.cells[k].epoch_ended(self.current_epoch, every)
        self.log("cells_training", float(len(self.training_cells())), prog_bar=True, logger=False)
        if not self.training_cells():
            self.trainer.should_stop = True

    # --- dev evaluation -------------------------------------------------------------------------
    def on_validation_start(self) -> None:
        PROCESS.open("dev")

    def on_validation_end(self) -> None:
        PROCESS.close("dev")

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        cells = self.training_cells()
        if cells:
            self._collected.append((self._decoded(batch, cells), layout_of(batch), cells))

    def on_validation_epoch_end(self) -> None:
        """Every training cell's dev scores at once (:meth:`_scored`), then each cell's own
        selection and stopping."""
        collected, self._collected = self._collected, []
        if self.trainer.sanity_checking or not collected:
            return
        epochs_done = None if self._at_last_batch else self.current_epoch  # mid-epoch: the epochs behind it
        for k, scores, predicted in self._scored(collected, "val"):
            self.cells[k].evaluated(scores, predicted, self.current_epoch, epochs_done)
        if not self.training_cells():
            self.trainer.should_stop = True

    def _decoded(self, batch: dict, cells: list[int]) -> torch.Tensor:
        """The label ids ``(len(cells), B, W)`` of one batch every cell reads, in the evaluation's
        precision, heads and decoding in fp32."""
        stack = self.stacked()
        with torch.autocast(self.device.type, enabled=False):
            dtype = self._autocast_dtype(self.eval_precision or self.trainer.precision)
            return stack.family.decode_scores(stack.scores(batch, cells, dtype))

    def _scored(self, collected: list, stage: str) -> list[tuple[int, dict, PredictedTags]]:
        """Each cell's span scores and tags of the ``stage``'s split from the stacked decoded
        batches: the tags laid out as the split's words and counted against its gold spans on the
        device (``span_counts``), one host copy of the counts for the whole group."""
        first = self.cells[0]
        dm = first.member.run.datamodule
        counter = first.module.split_counter(dm, SPLIT_OF_STAGE[stage], dm.corpus_names[0], self.device)
        limited = batches_limited(self.trainer, stage)
        placed = first.module.placed_tags([(ids, layout) for ids, layout, _ in collected], counter, 0, stage, limited)
        counts = counter.counts(placed.tags, placed.counted).cpu().numpy()
        return [
            (k, counter.scores(counts[row]), PredictedTags(counter, placed.tags[row], placed.seen))
            for row, k in enumerate(collected[0][2])
        ]

    # --- the stacked test -----------------------------------------------------------------------
    def tested_cells(self) -> list[int]:
        """The cells with a result to test (not stopped by an error)."""
        return [k for k, c in enumerate(self.cells) if c.member.error is None]

    def on_test_start(self) -> None:
        """Each cell's selected weights (its module's, ``CellFit.end_with_selected``) into its rows
        of the stack, evaluated in its evaluation precision."""
        stack = self.stacked()
        for k in self.tested_cells():
            cell = self.cells[k]
            if self.eval_precision is not None:
                cell.module.evaluate_in(self.eval_precision)
            stack.load_cell_state(k, cell.module.state_dict())
            cell.test_hook("on_test_start")

    def test_step(self, batch: dict, batch_idx: int) -> None:
        cells = self.tested_cells()
        for k in cells:
            self.cells[k].test_hook("on_test_batch_start", batch, batch_idx)
        if cells:
            self._collected.append((self._decoded(batch, cells), layout_of(batch), cells))

    def on_test_epoch_end(self) -> None:
        """Every cell's test scores at once; each cell keeps and logs its own (``CellFit.tested``)."""
        collected, self._collected = self._collected, []
        for k in self.tested_cells():
            self.cells[k].test_hook("on_test_epoch_end")
        if not collected:
            return
        for k, scores, predicted in self._scored(collected, "test"):
            self.cells[k].tested(scores, predicted)

    def on_test_end(self) -> None:
        for k in self.tested_cells():
            self.cells[k].test_hook("on_test_end")

    def teardown(self, stage: str) -> None:
        """The end of the group's fit or test: each cell's loggers finalized, as a Trainer's own
        teardown finalizes its loggers (the CSV file written)."""
        for cell in self.cells:
            for lg in cell.member.run.loggers:
                lg.finalize("success")

    # --- the group's checkpoint -----------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Every cell's held selection reaches the disk first (a ``best.ckpt`` never newer than the
        state a rerun resumes), then its state goes into the group's checkpoint."""
        for cell in self.cells:
            cell.before_group_checkpoint(checkpoint)
        checkpoint["lockstep"] = {"cells": [cell.state_dict() for cell in self.cells], "rng": rng_states()}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if self.rows is not None:
            rows_of(checkpoint, self.rows)
        state = checkpoint["lockstep"]
        if len(state["cells"]) != len(self.cells):
            raise ValueError(f"the group's checkpoint holds {len(state['cells'])} cells, this group {len(self.cells)}")
        for cell, saved in zip(self.cells, state["cells"], strict=True):
            cell.load_state_dict(saved)
        self.frozen.clear()  # the stopped cells' rows are taken again from the restored state
        set_rng_states(state["rng"])

    def on_train_end(self) -> None:
        """Each cell ends with the weights it tests in its module (its selection, also on disk; or,
        selecting nothing, its final weights)."""
        dtype = self.stacked().step_dtype
        for cell in self.cells:
            if cell.member.run.lockstep is not None and dtype is not None:  # what the stacked step ran in
                cell.member.run.lockstep["step_dtype"] = str(dtype).removeprefix("torch.")
            cell.end_with_selected()
            cell.member.position = (cell.epochs, cell.steps)


def rows_of(checkpoint: dict, rows: list[int]) -> None:
    """An earlier group's checkpoint cut to the cells at ``rows`` (in this group's order), before
    Lightning loads it: every stacked tensor of the weights and of the optimiser's state (those with
    the cell axis first), and each cell's own state; the loops, schedule and generators are shared."""
    cells = len(checkpoint["lockstep"]["cells"])

    def cut(t: torch.Tensor) -> torch.Tensor:
        return t.index_select(0, torch.tensor(rows, device=t.device)) if t.dim() and t.size(0) == cells else t

    stacked = ("stack.weights.", "stack.fixed.")  # not the template family's own weights (``stack.family.``)
    checkpoint["state_dict"] = {
        name: cut(t) if name.startswith(stacked) else t for name, t in checkpoint["state_dict"].items()
    }
    checkpoint["optimizer_states"] = apply_to_collection(checkpoint["optimizer_states"], torch.Tensor, cut)
    checkpoint["lockstep"]["cells"] = [checkpoint["lockstep"]["cells"][r] for r in rows]

"""A lockstep group's fit: ``Trainer.fit`` of its :class:`~ner_lightning.lockstep.group_module.LockstepModule`.

The Trainer is the cells' own ``trainer`` config (max/min epochs, dev every n epochs or every n
batches, ``limit_*_batches``, ``max_time``, precision, progress bar), with the group's resume
checkpoint (``last.ckpt`` in the group's folder, written as each cell's ``callbacks.last_checkpoint``
asks) as its only callback and no logger of its own: each cell logs to its own loggers. Its
checkpoints (the cells' ``best.ckpt``, then ``last.ckpt``) are written off the training thread, in
order (``AsyncCheckpointIO``); ``results.json`` gives ``lockstep.resume_checkpoint_mb``, the
group's ``last.ckpt`` per cell. The
training loader is a ``CombinedLoader`` of the cells' loaders; dev is the first cell's loader
(the dev split, and its batches, are the same for every cell of a group).

Dropout: inside ``vmap`` every cell draws from one random stream, which a cell's own seed cannot
set apart from the others'; the stream is seeded from the group (its cells' identities, in order),
so a cell trained with dropout is reproducible as a member of its group, and results.json names the
group (``lockstep.group``, ``lockstep.group_sha256``). Without dropout a cell's result does not
depend on its group — nor on a group re-formed, on a rerun, from the cells of an earlier one that
had not ended (:func:`group_folder`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import LambdaCallback
from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.plugins.io import AsyncCheckpointIO
from pytorch_lightning.utilities import CombinedLoader

from ner_lightning.callbacks.checkpointing import ResumeCheckpoint
from ner_lightning.cell.build import instantiate_trainer
from ner_lightning.cell.steps import loadable
from ner_lightning.clock import PROCESS
from ner_lightning.lockstep.cell_fit import CellFit
from ner_lightning.lockstep.group_module import LockstepModule
from ner_lightning.lockstep.members import Member
from ner_lightning.results import write_json_atomic

log = logging.getLogger("ner_lightning")


def group_sha256(members: list[Member]) -> str:
    """The group's identity: its cells' config identities, in order."""
    return hashlib.sha256(" ".join(_identities(members)).encode()).hexdigest()


def _identities(members: list[Member]) -> list[str]:
    return [m.cell.config_sha256 or m.cell.prefix for m in members]


def group_folder(root: Path, members: list[Member]) -> tuple[Path, list[int] | None]:
    """Where the group keeps its ``last.ckpt``: its own folder under ``root``, or — when a group of
    an earlier attempt held these cells and others that ended before it was stopped (while its
    cells were closed) — that group's folder, with the rows of these cells in its checkpoint."""
    mine = _identities(members)
    for record in sorted(root.glob("*/cells.json")):
        try:
            earlier = json.loads(record.read_text())["cells"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not a group's record: ignored
        last = record.parent / "last.ckpt"
        if isinstance(earlier, list) and set(mine) < set(earlier) and last.is_file() and loadable(last):
            return record.parent, [earlier.index(sha) for sha in mine]
    return root / group_sha256(members)[:16], None


def _group_trainer(cfg: DictConfig, folder: Path, callbacks: list[pl.Callback]):
    """The cells' Trainer config for the group: ``callbacks``, its resume checkpoint, no logger,
    clipping per cell (the module's)."""
    last = (cfg.get("callbacks") or {}).get("last_checkpoint")
    callbacks = list(callbacks)
    if last is not None:
        callbacks.append(
            ResumeCheckpoint(
                min_interval_s=float(last.get("min_interval_s", 0.0)),
                dirpath=str(folder),
                filename="last",
                save_top_k=1,
                save_weights_only=False,
                enable_version_counter=False,
            )
        )
    own = cfg.copy()  # the cell's config, its interpolations intact, with the group's folder
    own.trainer.default_root_dir = str(folder)
    trainer = instantiate_trainer(
        own, callbacks=callbacks, logger=False, gradient_clip_val=None, enable_checkpointing=last is not None
    )
    # the cells' best.ckpt and the group's last.ckpt written in that order by one background thread
    # (Lightning's AsyncCheckpointIO, over the cells' own CheckpointIO); the fit's end waits for them
    trainer.strategy.checkpoint_io = AsyncCheckpointIO(trainer.strategy.checkpoint_io)
    return trainer, last is not None


def _keep_csv_history(members: list[Member]) -> None:
    """A resumed group's cells keep the CSV rows of their earlier attempt (CSVLogger would empty
    the file): ``csv/metrics.csv`` becomes ``csv/metrics.attempt<k>.csv``."""
    for lg in (lg for m in members for lg in m.run.loggers if isinstance(lg, CSVLogger)):
        metrics = Path(lg.log_dir) / "metrics.csv"
        if metrics.is_file():
            k = 1
            while metrics.with_name(f"metrics.attempt{k}.csv").exists():
                k += 1
            metrics.replace(metrics.with_name(f"metrics.attempt{k}.csv"))


def fit_group(members: list[Member], folder: Path, rows: list[int] | None = None) -> None:
    """Train the members in lockstep, then test them in one stacked pass (``evaluate_test``); each
    ends with ``position`` (epochs, steps), ``checkpoint`` (its ``best.ckpt``), the weights it
    tested in its module and its test scores (``tested``), or ``error``.
    ``folder`` holds the group's ``last.ckpt``; a loadable one there is resumed (``rows``: these
    cells' in an earlier, larger group's, :func:`group_folder`)."""
    cfg = members[0].cfg
    n_batches = {len(m.run.datamodule.train_dataloader()) for m in members}
    if len(n_batches) != 1:
        raise ValueError(f"the group's cells have different batches per epoch ({sorted(n_batches)})")
    folder.mkdir(parents=True, exist_ok=True)
    # the group's cells recorded once its checkpoint callback has looked at the (empty) folder
    cells_json = {"cells": _identities(members)}
    record = LambdaCallback(on_fit_start=lambda *_: write_json_atomic(folder / "cells.json", cells_json))
    trainer, resumable = _group_trainer(cfg, folder, [] if rows is not None else [record])
    min_epochs = int(cfg.trainer.get("min_epochs") or 0)
    cells = [CellFit.of(m, min_epochs) for m in members]
    eval_precision = OmegaConf.select(cfg, "callbacks.eval_precision.precision")
    module = LockstepModule(cells, cfg.trainer.get("gradient_clip_val"), eval_precision, rows)
    last = folder / "last.ckpt"
    resume = last if resumable and last.is_file() and loadable(last) else None
    if resume is not None:
        log.info("lockstep group resumes from %s%s", resume, f" (its rows {rows})" if rows is not None else "")
        _keep_csv_history(members)
    torch.manual_seed(int(group_sha256(members)[:15], 16))  # the group's dropout stream (module docstring)
    for m in members:
        m.cell.progress.follow(trainer)
    log.info(
        "lockstep group of %d cells (%s) | %d batches an epoch, up to %s epochs",
        len(members),
        ", ".join(m.cell.prefix for m in members),
        n_batches.pop(),
        cfg.trainer.max_epochs,
    )
    train = CombinedLoader([m.run.datamodule.train_dataloader() for m in members], mode="min_size")
    with PROCESS.phase("train"):
        trainer.fit(
            module,
            train_dataloaders=train,
            val_dataloaders=members[0].run.datamodule.val_dataloader(),
            ckpt_path=str(resume) if resume else None,
        )
    if last.is_file() and rows is None:  # what resuming costs the group, per cell
        for m in members:
            if m.run.lockstep is not None:
                m.run.lockstep["resume_checkpoint_mb"] = round(last.stat().st_size / 1e6 / len(members), 1)
    if bool(cfg.evaluate_test) and module.tested_cells():
        with PROCESS.phase("test"):  # every cell's selected weights in one stacked pass
            trainer.test(module, dataloaders=members[0].run.datamodule.test_dataloader(), verbose=False)

"""One grid cell's steps around its fit, shared by a cell trained alone (``protocols.train``) and
a cell trained in a lockstep group (``lockstep.member_job``): who the cell is (:class:`Cell`), its set-up
(:func:`setup_cell`: encoder, partition, family, Trainer) and its end (:func:`finish_cell`: test
with the selected weights, ``results.json``, export, checkpoint clean-up)."""

from __future__ import annotations

import logging
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytorch_lightning as pl
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from ner_lightning.callbacks.checkpointing import selecting_checkpoint
from ner_lightning.cell.build import build_datamodule, build_module, build_trainer, check_protocol, overrides
from ner_lightning.cell.log import log_model, log_partition, log_result
from ner_lightning.clock import PROCESS
from ner_lightning.data.datamodule import LowResourceDataModule
from ner_lightning.export.folder import export_model, load_weights
from ner_lightning.hardware import fill_uninitialized_memory, reserve_heap
from ner_lightning.models.base import NERModule
from ner_lightning.precision.choice import recorded
from ner_lightning.results import (
    CellResult,
    assemble_result,
    best_epoch,
    contributed_sections,
    grid_keys,
    write_json_atomic,
)
from ner_lightning.settings import RunSettings, as_dict, run_settings
from ner_lightning.sweep import cells
from ner_lightning.sweep.identity import code_version
from ner_lightning.wandb_logging import log_prediction_tables, summarise_wandb

log = logging.getLogger("ner_lightning")


class Progress:
    """Where a cell's training is, for the record an interrupted or failed cell leaves: the
    Trainer of the run under way (the last one of a tuning trial or SingleAux cell)."""

    def __init__(self) -> None:
        self.trainer: pl.Trainer | None = None

    def follow(self, trainer: pl.Trainer) -> None:
        self.trainer = trainer

    def position(self) -> tuple[int | None, int | None]:
        """(epoch, global step), or (None, None) before training started."""
        if self.trainer is None:
            return None, None
        return self.trainer.current_epoch, self.trainer.global_step


@dataclass(frozen=True)
class Cell:
    """Who a run is in its sweep: its log prefix, config identity and device, and where its
    training is (:class:`Progress`)."""

    prefix: str = "run"
    device: dict | None = None
    identity: dict | None = None  # sweep.identity.cell_identity
    progress: Progress = field(default_factory=Progress, compare=False)

    @property
    def config_sha256(self) -> str | None:
        return self.identity["sha256"] if self.identity else None

    def named(self, suffix: str) -> Cell:
        return Cell(f"{self.prefix} {suffix}", self.device, self.identity, self.progress)


@dataclass
class CellRun:
    """What :func:`setup_cell` builds for a cell's fit."""

    datamodule: LowResourceDataModule
    partition: dict
    module: NERModule
    trainer: pl.Trainer
    callbacks: list
    loggers: list
    lockstep: dict | None = None  # the group a lockstep cell trained in (``lockstep.launcher``)
    carried: dict[str, float] = field(default_factory=dict)  # seconds by phase spent for it before its end
    started: float = 0.0  # time.time() when its set-up began (results.json ``timeline``)


def setup_cell(cfg: DictConfig, cell: Cell) -> CellRun:
    """The cell's encoder (seeded with ``init_seed``), data module with its partition (written to
    ``partition.json``), objective family and Trainer, charged to the phases ``model`` and ``data``."""
    settings = run_settings(cfg)
    out_dir = settings.out_dir()
    started = time.time()
    with PROCESS.phase("model"):
        pl.seed_everything(settings.init_seed, workers=True, verbose=False)
        log.debug("%s | %s", cell.prefix, reserve_heap(settings.runtime.malloc_top_pad_mb))
        log.debug("%s | %s", cell.prefix, fill_uninitialized_memory(settings.runtime.fill_uninitialized_memory))
        check_protocol(cfg)
        encoder = instantiate(cfg.model)
    with PROCESS.phase("data"):
        datamodule = build_datamodule(cfg, encoder.tokenizer)
        datamodule.setup("fit")
        partition = datamodule.partition_record()
        write_json_atomic(out_dir / "partition.json", partition)
    with PROCESS.phase("model"):
        module = build_module(cfg, encoder, datamodule)
        trainer, callbacks, loggers = build_trainer(cfg)
        log_partition(cell.prefix, cfg.dataset.name, partition)
        log_model(cell.prefix, module, trainer, OmegaConf.select(cfg, "callbacks.eval_precision.precision"))
    return CellRun(datamodule, partition, module, trainer, callbacks, loggers, started=started)


@dataclass(frozen=True)
class FitEnd:
    """How a cell's fit ended: the ``last.ckpt`` it resumed from, the checkpoint of the selected
    weights (None: those in the module) and, for a fit the Trainer did not run (a lockstep
    group's), its (epochs, optimiser steps) and whether it was tested (a group's stacked test)."""

    resumed_from: Path | None = None
    checkpoint: str | None = None
    position: tuple[int, int] | None = None
    tested: bool = False  # tested already, the selected weights in the module (a lockstep group's stacked test)


def fit_and_finish(cfg: DictConfig, cell: Cell, run: CellRun, resume: Path | None) -> CellResult:
    """The cell's fit by its own Trainer (from ``resume``, a ``last.ckpt`` of this same config,
    when given and readable), then :func:`finish_cell` with the selected checkpoint."""
    if resume is not None and not loadable(resume):
        log.warning("%s | %s cannot be read (killed while writing?): training from epoch 0", cell.prefix, resume)
        resume = None
    if resume is not None:
        log.info("%s | resuming from %s", cell.prefix, resume)
    cell.progress.follow(run.trainer)
    with PROCESS.phase("train"):  # dev evaluations and checkpoint writes are charged to their own phases
        run.trainer.fit(run.module, datamodule=run.datamodule, ckpt_path=str(resume) if resume else None)
    checkpoint = selecting_checkpoint(run.trainer)
    ckpt = checkpoint.best_model_path if checkpoint is not None and checkpoint.best_model_path else None
    return finish_cell(cfg, cell, run, FitEnd(resume, ckpt))


def finish_cell(cfg: DictConfig, cell: Cell, run: CellRun, end: FitEnd) -> CellResult:
    """Test with the selected weights, write ``results.json`` (with the cell's share of the
    process's time), export and clean up."""
    settings = run_settings(cfg)
    out_dir = settings.out_dir()
    module, trainer, ckpt = run.module, run.trainer, end.checkpoint
    if settings.evaluate_test and not end.tested:
        with PROCESS.phase("test"):
            trainer.test(module, datamodule=run.datamodule, ckpt_path=ckpt, verbose=False)
    with PROCESS.phase("writes"):
        result = cell_result(cfg, settings, cell, run, end)
        if settings.export:
            if ckpt and not settings.evaluate_test:
                load_weights(module, ckpt)  # testing loaded the selected weights; without a test, load them here
            folder = export_model(module, result.to_json(), out_dir / "export")
            result.export = folder.name
            log.info("%s | exported: python -m ner_lightning.predict %s INPUT", cell.prefix, folder)
        spent = PROCESS.take()
        phases = {**spent["phases"], "unaccounted": spent["unaccounted"]}
        for name, seconds in run.carried.items():
            phases[name] = round(phases.get(name, 0.0) + seconds, 3)
        wall = spent["wall_s"] + sum(run.carried.values())
        result.phase_s = phases
        result.timeline = {"started": round(run.started, 3), "ended": round(time.time(), 3)}
        result.attempts, result.wall_time_s = cells.attempts(out_dir, round(wall, 2))
        result.write(out_dir / "results.json")
        summarise_wandb(run.loggers, result)
        log_prediction_tables(run.loggers, result, out_dir)
        cells.clean_checkpoints(out_dir, ckpt if settings.keep_checkpoint else None)
    log_result(result, cfg.data.label_scheme, out_dir)
    return result


def loadable(path: Path) -> bool:
    """A checkpoint is a zip archive; one cut short by a kill has no end record (read from the
    file's end only — Lightning then loads it once)."""
    return zipfile.is_zipfile(path)


def what_ran(cfg: DictConfig) -> dict:
    """The ``results.json`` fields that say what the cell ran: its grid keys, the whole resolved
    config, and the fields readers use (``encoder``, ``objective``, ``token_loss``)."""
    return {
        "grid": grid_keys(cfg, overrides()),
        "config": OmegaConf.to_container(cfg, resolve=True),
        "encoder": str(cfg.model.name_or_path),
        "objective": str(cfg.loss._target_),
        "token_loss": OmegaConf.select(cfg, "loss.token_loss._target_"),
    }


def compute_spent(cfg: DictConfig, settings: RunSettings, record, steps: int) -> dict:
    """What the cell cost, to compare objectives at equal compute (``CellResult.compute``)."""
    return {
        "train_batches": record.train_batches,
        "optimizer_steps": steps,
        "train_forward_passes": record.forward_passes,
        "init_seed": settings.init_seed,
        "encoder_lr": cfg.optimizer.get("lr"),
        "head_lr": cfg.loss.get("head_lr"),
    }


def cell_result(cfg: DictConfig, settings: RunSettings, cell: Cell, run: CellRun, end: FitEnd) -> CellResult:
    """Fill the ``results.json`` schema from what the fit and test left: the module's record, the
    trainer's counters, and every section the callbacks declare (``results.ResultSection``,
    ``results.assemble_result``); its
    time (``wall_time_s``, ``phase_s``) is the clock's, taken by :func:`finish_cell` last."""
    trainer, module, partition = run.trainer, run.module, run.partition
    record = module.record()
    epochs, steps = end.position or (trainer.current_epoch, trainer.global_step)
    checkpoint = selecting_checkpoint(trainer)
    mode = checkpoint.mode if checkpoint is not None and checkpoint.monitor == settings.monitor else "max"
    best = best_epoch(record.history, settings.monitor, mode) if record.history else None
    if record.history and checkpoint is not None and checkpoint.monitor is None:
        best = record.history[-1]  # no selection (callbacks.model_checkpoint.monitor=null): the final model
    return assemble_result(
        dict(
            status="ok",
            cell=cell.prefix,
            overrides=overrides(),
            config_sha256=cell.config_sha256,
            device=cell.device,
            resumed_from=str(end.resumed_from) if end.resumed_from else None,
            finished=cells.now(),
            **what_ran(cfg),
            partition={k: partition[k] for k in ("dataset", "size", "partition", "seed", "sha256")},
            partition_file="partition.json",
            training_set={k: partition["training_set"][k] for k in ("regime", "before", "after", "sha256")},
            dev=best["scores"] if best else None,
            best_epoch=best["epoch"] if best else None,
            best_batch=best.get("batches") if best else None,
            monitor=settings.monitor,
            dev_monitor=best["metrics"][settings.monitor] if best else None,
            test=record.test,
            test_aux=record.test_aux or None,
            epochs=epochs,
            global_steps=steps,
            compute=compute_spent(cfg, settings, record, steps),
            checkpoint=end.checkpoint if settings.keep_checkpoint else None,
            wall_time_s=0.0,
            phase_s={},
            precision={
                "train": str(trainer.precision),
                "eval": record.eval_precision or str(trainer.precision),
                "measured": recorded(str(cfg.trainer.accelerator), as_dict(cfg.model, resolve=True)),
            },
            identity=cell.identity,
            code=code_version(),
            labels={name: list(ls.entity_types) for name, ls in module.head_label_sets().items()},
            lockstep=run.lockstep,
        ),
        contributed_sections(run.callbacks, settings.out_dir()),
    )

"""What one grid cell runs, by protocol (:func:`protocol_of`):

* ``single`` — build encoder -> data module (partition) -> objective family -> Trainer; fit with
  dev evaluation, test once with the best-on-dev checkpoint, write ``results.json``
  (:class:`ner_lightning.results.CellResult`).
* ``tune`` — a sweeper trial (``tune_partitions``): the cell on several tuning partitions, the
  mean of their best-dev values (``tune.json``).
* ``singleaux`` — MUNCHABLES §4.1's SingleAux with several auxiliaries: one run per auxiliary,
  the one with the best main-dev value is the cell's result (chosen on dev, never on test).
"""
from __future__ import annotations

import copy
import json
import logging
import statistics
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytorch_lightning as pl
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from ner_lightning.build import build_datamodule, build_module, build_trainer, check_protocol, overrides
from ner_lightning.clock import PROCESS
from ner_lightning.export import export_model, load_weights
from ner_lightning.hardware import fill_uninitialized_memory, reserve_heap
from ner_lightning.precision import recorded
from ner_lightning.results import (CellResult, assemble_result, best_epoch, contributed_sections, grid_keys,
                                   write_json_atomic)
from ner_lightning.sweep import cells
from ner_lightning.sweep.identity import code_version
from ner_lightning.wandb_logging import finish_wandb, log_prediction_tables, summarise_wandb

log = logging.getLogger("ner_lightning")


class Progress:
    """Where a cell's training is, for the record an interrupted or failed cell leaves: the
    Trainer of the run under way (the last one of a tuning trial or SingleAux cell)."""

    def __init__(self):
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

    def named(self, suffix: str) -> "Cell":
        return Cell(f"{self.prefix} {suffix}", self.device, self.identity, self.progress)


def protocol_of(cfg: DictConfig) -> str:
    """``tune`` when ``tune_partitions`` is set, ``singleaux`` for SingleAux over several
    auxiliaries, else ``single``."""
    if cfg.get("tune_partitions"):
        return "tune"
    return "singleaux" if singleaux_candidates(cfg) else "single"


def run_protocol(cfg: DictConfig, cell: Cell, resume: Path | None) -> float:
    """Run the cell's protocol; returns its best dev ``monitor`` value (never a test score)."""
    name = protocol_of(cfg)
    if name == "tune":
        return tune(cfg, cell)
    if name == "singleaux":
        return singleaux(cfg, cell).dev_monitor
    return train(cfg, resume=resume, cell=cell).dev_monitor


# --- single cell ---------------------------------------------------------------------------------
def _log_partition(cfg: DictConfig, prefix: str, partition: dict) -> None:
    before, after = partition["training_set"]["before"], partition["training_set"]["after"]
    log.info("%s | train: %d sentences (%s, partition sha256 %s), entity-token share %.2f%%; trained on %d "
             "sentences, %d tokens, share %.2f%% | dev: %d | test: %d",
             prefix, partition["size"], cfg.dataset.name, partition["sha256"][:12], 100 * before["entity_token_share"],
             after["sentences"], after["tokens"], 100 * after["entity_token_share"],
             partition["dev_sentences"], partition["test_sentences"])


def _log_model(cfg: DictConfig, prefix: str, module: pl.LightningModule, trainer: pl.Trainer) -> None:
    """One line for what Lightning's model summary table says (``trainer.enable_model_summary``)."""
    def count(n: int) -> str:
        return f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n / 1e3:.1f} K" if n >= 1e3 else str(n)

    encoder = sum(p.numel() for p in module.encoder.parameters())
    heads = sum(p.numel() for p in module.parameters()) - encoder
    frozen = ", frozen" if module.encoder.frozen else ""
    config = module.encoder.model.config.to_dict()
    log.info("%s | %s on a %s-layer %s encoder (%s parameters%s) + heads of %s | precision: training %s, "
             "evaluation %s", prefix, type(module).__name__, config.get("num_hidden_layers", "?"), config["model_type"],
             count(encoder), frozen, count(heads), trainer.precision,
             module.eval_precision or OmegaConf.select(cfg, "callbacks.eval_precision.precision") or trainer.precision)


def loadable(path: Path) -> bool:
    """A checkpoint is a zip archive; one cut short by a kill has no end record (read from the
    file's end only — Lightning then loads it once)."""
    return zipfile.is_zipfile(path)


def train(cfg: DictConfig, resume: Path | None = None, cell: Cell | None = None) -> CellResult:
    """Run one grid cell and write its ``results.json``. ``resume``: a ``last.ckpt`` of this same
    config to continue from (model, optimiser, schedule, loops, RNG, history). Every second since
    the process started (or since the previous cell of this process took its share) is charged to
    a phase of ``phase_s`` (``ner_lightning/clock.py``). ``cell``: who the run is in its sweep
    (default: a run of its own)."""
    cell = cell or Cell()
    out_dir = Path(cfg.paths.output_dir)
    with PROCESS.phase("model"):
        pl.seed_everything(cfg.init_seed, workers=True, verbose=False)
        log.debug("%s | %s", cell.prefix, reserve_heap(cfg.runtime.malloc_top_pad_mb))
        log.debug("%s | %s", cell.prefix, fill_uninitialized_memory(cfg.runtime.fill_uninitialized_memory))
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
        _log_partition(cfg, cell.prefix, partition)
        _log_model(cfg, cell.prefix, module, trainer)
    if resume is not None and not loadable(resume):
        log.warning("%s | %s cannot be read (killed while writing?): training from epoch 0", cell.prefix, resume)
        resume = None
    if resume is not None:
        log.info("%s | resuming from %s", cell.prefix, resume)
    cell.progress.follow(trainer)
    with PROCESS.phase("train"):  # dev evaluations and checkpoint writes are charged to their own phases
        trainer.fit(module, datamodule=datamodule, ckpt_path=str(resume) if resume else None)
    checkpoint = trainer.checkpoint_callback
    ckpt = checkpoint.best_model_path if checkpoint is not None and checkpoint.best_model_path else None
    if cfg.evaluate_test:
        with PROCESS.phase("test"):
            trainer.test(module, datamodule=datamodule, ckpt_path=ckpt, verbose=False)
    with PROCESS.phase("writes"):
        result = cell_result(cfg, cell, trainer, module, callbacks, partition, resume, ckpt)
        if cfg.export:
            if ckpt and not cfg.evaluate_test:
                load_weights(module, ckpt)  # testing loaded the selected weights; without a test, load them here
            folder = export_model(module, result.to_json(), out_dir / "export")
            result.export = folder.name
            log.info("%s | exported: python -m ner_lightning.predict %s INPUT", cell.prefix, folder)
        spent = PROCESS.take()
        result.phase_s = {**spent["phases"], "unaccounted": spent["unaccounted"]}
        result.attempts, result.wall_time_s = cells.attempts(out_dir, round(spent["wall_s"], 2))
        result.write(out_dir / "results.json")
        summarise_wandb(loggers, result)
        log_prediction_tables(loggers, result, out_dir)
        cells.clean_checkpoints(out_dir, ckpt if cfg.keep_checkpoint else None)
    _log_result(cfg, result)
    return result


def cell_result(cfg: DictConfig, cell: Cell, trainer: pl.Trainer, module, callbacks: list, partition: dict,
                resume: Path | None, ckpt: str | None) -> CellResult:
    """Fill the ``results.json`` schema from what the fit and test left: the module's record, the
    trainer's counters, and every section the callbacks declare (``results.ResultSection``,
    ``results.assemble_result``); its
    time (``wall_time_s``, ``phase_s``) is the clock's, taken by :func:`train` last."""
    record = module.record()
    best = best_epoch(record.history, cfg.monitor) if record.history else None
    if record.history and trainer.checkpoint_callback is not None and trainer.checkpoint_callback.monitor is None:
        best = record.history[-1]  # no selection (callbacks.model_checkpoint.monitor=null): the final model
    return assemble_result(dict(
        status="ok", cell=cell.prefix, overrides=overrides(), config_sha256=cell.config_sha256, device=cell.device,
        resumed_from=str(resume) if resume else None, finished=cells.now(), grid=grid_keys(cfg, overrides()),
        config=OmegaConf.to_container(cfg, resolve=True),
        partition={k: partition[k] for k in ("dataset", "size", "partition", "seed", "sha256")},
        partition_file="partition.json",
        training_set={k: partition["training_set"][k] for k in ("regime", "before", "after", "sha256")},
        dev=best["scores"] if best else None, best_epoch=best["epoch"] if best else None,
        best_batch=best.get("batches") if best else None, monitor=cfg.monitor,
        dev_monitor=best["metrics"][cfg.monitor] if best else None,
        test=record.test, test_aux=record.test_aux or None,
        epochs=trainer.current_epoch, global_steps=trainer.global_step,
        compute={"train_batches": record.train_batches, "optimizer_steps": trainer.global_step,
                 "train_forward_passes": record.forward_passes, "init_seed": cfg.init_seed,
                 "encoder_lr": cfg.optimizer.get("lr"), "head_lr": cfg.loss.get("head_lr")},
        checkpoint=ckpt if cfg.keep_checkpoint else None,
        wall_time_s=0.0, phase_s={},
        precision={"train": str(trainer.precision), "eval": record.eval_precision or str(trainer.precision),
                   "measured": recorded(str(cfg.trainer.accelerator), OmegaConf.to_container(cfg.model, resolve=True))},
        identity=cell.identity, code=code_version(),
        labels={name: list(ls.entity_types) for name, ls in module.head_label_sets().items()},
    ), contributed_sections(callbacks, Path(cfg.paths.output_dir)))


def _log_result(cfg: DictConfig, r: CellResult) -> None:
    nan = float("nan")
    test = r.test or {"micro": {}, "macro": {}, "lenient": {"micro": {}}}
    log.info(
        "%s | %s | %s labels | dev %s=%.4f (epoch %s) | test F1 %.4f P %.4f R %.4f macro-F1 %.4f lenient F1 %.4f "
        "| %d epochs, %d steps | %.0f s | %s",
        r.cell, " ".join(r.overrides) or "defaults", cfg.data.label_scheme, cfg.monitor,
        r.dev_monitor if r.dev_monitor is not None else nan, r.best_epoch,
        test["micro"].get("f1", nan), test["micro"].get("precision", nan), test["micro"].get("recall", nan),
        test["macro"].get("f1", nan), test["lenient"]["micro"].get("f1", nan),
        r.epochs, r.global_steps, r.wall_time_s, Path(cfg.paths.output_dir) / "results.json",
    )


# --- tuning --------------------------------------------------------------------------------------
def tune(cfg: DictConfig, cell: Cell | None = None) -> float:
    """One sweeper trial: the cell on each of ``tune_partitions`` (in ``partition<k>/``), and the
    mean of their best-dev ``monitor`` values, also written to ``tune.json``."""
    cell = cell or Cell()
    out_dir = Path(cfg.paths.output_dir)
    values, started = {}, time.perf_counter()
    for p in cfg.tune_partitions:
        run = copy.deepcopy(cfg)
        with open_dict(run):
            run.partition = int(p)
            run.paths.output_dir = str(out_dir / f"partition{p}")
        values[int(p)] = train(run, cell=cell.named(f"partition {p}")).dev_monitor
        finish_wandb()
    mean = statistics.fmean(values.values())
    write_json_atomic(out_dir / cells.TUNE, {"overrides": overrides(), "monitor": cfg.monitor, "partitions": values,
                                             "mean": mean, "config_sha256": cell.config_sha256,
                                             "wall_time_s": round(time.perf_counter() - started, 2)})
    log.info("trial %s | mean dev %s over partitions %s = %.4f", " ".join(overrides()), cfg.monitor,
             list(values), mean)
    return mean


# --- SingleAux -----------------------------------------------------------------------------------
def singleaux_candidates(cfg: DictConfig) -> list[str]:
    """The auxiliaries a SingleAux cell chooses from (``multitask=singleaux`` with several ``aux``)."""
    if cfg.multitask.scheme != "singleaux":  # one auxiliary per run: conf/multitask/singleaux.yaml
        return []
    names = [a for a in cfg.aux or [] if a != cfg.dataset.name]
    return names if len(names) > 1 else []


def _singleaux_candidate(cfg: DictConfig, cell: Cell, name: str) -> CellResult:
    """One auxiliary's run (``aux_<name>/candidate.json``); a finished one of the same config is kept."""
    sub = Path(cfg.paths.output_dir) / f"aux_{name}"
    record = sub / "candidate.json"
    if record.exists():
        previous = json.loads(record.read_text())
        if previous.get("config_sha256") == cell.config_sha256:
            return CellResult(**previous)
    run = copy.deepcopy(cfg)
    with open_dict(run):
        run.aux = [name]
        run.aux_datasets = {name: cfg.aux_datasets[name]}
        run.paths.output_dir = str(sub)
    last = sub / "checkpoints" / "last.ckpt"
    result = train(run, resume=last if last.exists() else None, cell=cell.named(f"SingleAux {name}"))
    (sub / "results.json").replace(record)  # a candidate, not a cell of the grid
    finish_wandb()
    return result


def singleaux(cfg: DictConfig, cell: Cell | None = None) -> CellResult:
    """SingleAux as the MUNCHABLES paper runs it (§4.1): one auxiliary-learning run per auxiliary,
    and the one with the best main-dev ``monitor`` is the cell's result. A rerun keeps the
    candidates already finished."""
    cell = cell or Cell()
    done = {name: _singleaux_candidate(cfg, cell, name) for name in singleaux_candidates(cfg)}
    best = max(done, key=lambda n: done[n].dev_monitor)
    result = copy.copy(done[best])
    result.overrides, result.grid = overrides(), grid_keys(cfg, overrides())
    result.config = OmegaConf.to_container(cfg, resolve=True)
    result.finished = cells.now()
    result.wall_time_s = round(sum(r.wall_time_s for r in done.values()), 2)
    result.predictions = {split: f"aux_{best}/{path}" for split, path in (result.predictions or {}).items()} or None
    result.export = f"aux_{best}/{result.export}" if result.export else None
    result.singleaux = {"chosen": best, "monitor": cfg.monitor,
                        "dev_monitor": {n: r.dev_monitor for n, r in done.items()},
                        "candidates": {n: f"aux_{n}/candidate.json" for n in done}}
    result.write(Path(cfg.paths.output_dir) / "results.json")
    log.info("%s | SingleAux: %s chosen on dev %s (%s)", cell.prefix, best, cfg.monitor,
             ", ".join(f"{n} {r.dev_monitor:.4f}" for n, r in done.items()))
    return result

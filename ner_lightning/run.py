"""Hydra entry point: ``python -m ner_lightning.run [-m] key=value ...``.

One run: build encoder -> data module (partition) -> objective family -> Trainer; fit with
dev evaluation each epoch, test once with the best-on-dev checkpoint, write ``results.json``.
A failing run writes ``failure.json`` (traceback included) and, in a multirun, the other
cells still run; Hydra reports the failure when the sweep ends.
"""
from __future__ import annotations

import copy
import json
import logging
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import hydra
import pytorch_lightning as pl
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

import ner_lightning  # noqa: F401  (registers the config resolvers)
from ner_lightning.callbacks import AuxiliaryPhases, TokenThroughput
from ner_lightning.hardware import fill_uninitialized_memory, reserve_heap, trainer_precision
from ner_lightning.results import best_epoch, grid_keys, write_json_atomic
from ner_lightning.sweep import cells, devices

log = logging.getLogger("ner_lightning")
_running: dict = {}  # the cell's Trainer, to tell an interrupt from a failure


def _instantiate_group(group: DictConfig | None) -> list:
    if not group:
        return []
    return [instantiate(c) for c in group.values() if isinstance(c, DictConfig) and "_target_" in c]


def _overrides() -> list[str]:
    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:
        return []


def _check_protocol(cfg: DictConfig) -> None:
    """Refuse configs whose model selection would read the training data."""
    ckpt = (cfg.get("callbacks") or {}).get("model_checkpoint")
    if cfg.data.get("train_on_dev") and ckpt and ckpt.get("monitor") is not None:
        raise ValueError("data.train_on_dev=true trains on the dev sentences, so selecting the checkpoint on dev "
                         f"({ckpt.monitor}) would select on training data: set callbacks.model_checkpoint.monitor=null "
                         "and callbacks.early_stopping=null to test the final model (experiment=munch_paper does)")


def build_module(cfg: DictConfig, encoder, datamodule):
    """The objective family of ``cfg.loss``; in a multi-corpus scheme with one head per corpus
    (``ner_lightning.models.heads.HeadModule``), over the data module's auxiliary label sets."""
    from ner_lightning.models.heads import HeadModule

    aux = getattr(datamodule, "aux_label_sets", None)
    if not aux:
        return instantiate(cfg.loss, encoder=encoder, label_set=datamodule.label_set)
    family = hydra.utils.get_class(cfg.loss._target_)
    if not issubclass(family, HeadModule):
        raise ValueError(f"{family.__name__} ({cfg.loss._target_}) has no per-corpus head: multi-corpus schemes (multitask=...) need loss=ce, wce1, wce2, "
                         "focal, dice, dice_eq6, mom, crf or bilstm_crf")
    return instantiate(cfg.loss, encoder=encoder, label_set=datamodule.label_set, aux_label_sets=aux)


def train(cfg: DictConfig, resume: Path | None = None, cell: dict | None = None) -> dict:
    """Run one grid cell and return its ``results.json`` content. ``resume``: a ``last.ckpt`` of
    this same config to continue from (model, optimiser, schedule, loops, RNG, history)."""
    t_start = time.perf_counter()
    cell = cell or {}
    prefix = cell.get("prefix", "run")
    out_dir = Path(cfg.paths.output_dir)
    pl.seed_everything(cfg.init_seed, workers=True)
    log.info("%s | %s", prefix, reserve_heap(cfg.malloc_top_pad_mb))
    log.info("%s | %s", prefix, fill_uninitialized_memory(cfg.fill_uninitialized_memory))

    _check_protocol(cfg)
    encoder = instantiate(cfg.model)
    datamodule = instantiate(cfg.data, tokenizer=encoder.tokenizer)
    datamodule.setup("fit")
    partition = datamodule.partition_record()
    write_json_atomic(out_dir / "partition.json", partition)
    module = build_module(cfg, encoder, datamodule)

    callbacks = _instantiate_group(cfg.get("callbacks"))
    loggers = _instantiate_group(cfg.get("logger"))
    precision = trainer_precision(cfg.trainer.precision, cfg.trainer.accelerator, instantiate(cfg.trainer.get("plugins")))
    trainer: pl.Trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False, **precision)
    grid = grid_keys(cfg, _overrides())
    for lg in loggers:  # flat grid keys on top (W&B group-by), the whole resolved config under "config"
        lg.log_hyperparams({**grid, "config": OmegaConf.to_container(cfg, resolve=True)})

    before, after = partition["training_set"]["before"], partition["training_set"]["after"]
    log.info("%s | train: %d sentences (%s, partition sha256 %s), entity-token share %.2f%%; trained on %d "
             "sentences, %d tokens, share %.2f%% | dev: %d | test: %d",
             prefix, partition["size"], cfg.dataset.name, partition["sha256"][:12], 100 * before["entity_token_share"],
             after["sentences"], after["tokens"], 100 * after["entity_token_share"],
             partition["dev_sentences"], partition["test_sentences"])
    if resume is not None and not _loadable(resume):
        log.warning("%s | %s cannot be read (killed while writing?): training from epoch 0", prefix, resume)
        resume = None
    if resume is not None:
        log.info("%s | resuming from %s", prefix, resume)
    t_fit = time.perf_counter()
    _running["trainer"] = trainer
    trainer.fit(module, datamodule=datamodule, ckpt_path=str(resume) if resume else None)
    checkpoint = trainer.checkpoint_callback
    ckpt = checkpoint.best_model_path if checkpoint is not None and checkpoint.best_model_path else None
    t_test = time.perf_counter()
    if cfg.evaluate_test:
        trainer.test(module, datamodule=datamodule, ckpt_path=ckpt, verbose=False)
    t_end = time.perf_counter()

    best = best_epoch(module.history, cfg.monitor) if module.history else None
    if module.history and checkpoint is not None and checkpoint.monitor is None:
        best = module.history[-1]  # no selection (callbacks.model_checkpoint.monitor=null): the final model
    throughput = next((c.summary() for c in callbacks if isinstance(c, TokenThroughput)), {})
    results = {
        "status": "ok",
        "cell": prefix,
        "overrides": _overrides(),
        "config_sha256": cell.get("config_sha256"),
        "device": cell.get("device"),
        "resumed_from": str(resume) if resume else None,
        "finished": cells.now(),
        "grid": grid,
        "config": OmegaConf.to_container(cfg, resolve=True),
        "partition": {k: partition[k] for k in ("dataset", "size", "partition", "seed", "sha256")},
        "partition_file": "partition.json",
        "training_set": {k: partition["training_set"][k] for k in ("regime", "before", "after", "sha256")},
        "dev": best["scores"] if best else None,
        "best_epoch": best["epoch"] if best else None,
        "best_batch": best.get("batches") if best else None,  # training batches before the selected evaluation
        "monitor": cfg.monitor,
        "dev_monitor": best["metrics"][cfg.monitor] if best else None,
        "test": module.scores.get("test"),
        # Multi-corpus schemes: each auxiliary corpus's test scores (its own head) and MUNCH-Stack's phases.
        "test_aux": dict(module.aux_scores) or None,
        "phases": next((c.history for c in callbacks if isinstance(c, AuxiliaryPhases)), None),
        "epochs": trainer.current_epoch,
        "global_steps": trainer.global_step,
        # What a cell cost, to compare objectives at equal compute: OVA-AUC takes 3 optimiser
        # steps (and forward passes) per batch, compositional COMAUC-2T 2, resampling changes
        # the batches per epoch.
        "compute": {
            "train_batches": module.train_batches,
            "optimizer_steps": trainer.global_step,
            "train_forward_passes": module.forward_passes,
            "init_seed": cfg.init_seed,
            "encoder_lr": cfg.optimizer.get("lr"),
            "head_lr": cfg.loss.get("head_lr"),
        },
        "checkpoint": ckpt if cfg.keep_checkpoint else None,
        "wall_time_s": round(time.perf_counter() - t_start, 2),
        "phase_s": {"setup": round(t_fit - t_start, 2), "fit": round(t_test - t_fit, 2),
                    "test": round(t_end - t_test, 2)},
        "throughput": throughput,
        "precision": {"train": str(trainer.precision), "eval": module.eval_precision or str(trainer.precision)},
    }
    write_json_atomic(out_dir / "results.json", results)
    _summarise_wandb(loggers, results)
    cells.clean_checkpoints(out_dir, ckpt if cfg.keep_checkpoint else None)
    nan = float("nan")
    test = results["test"] or {"micro": {}, "macro": {}, "lenient": {"micro": {}}}
    log.info(
        "%s | %s | %s labels | dev %s=%.4f (epoch %s) | test F1 %.4f P %.4f R %.4f macro-F1 %.4f lenient F1 %.4f "
        "| %d epochs, %d steps | %.0f s | %s",
        prefix, " ".join(results["overrides"]) or "defaults", cfg.data.label_scheme, cfg.monitor,
        best["metrics"][cfg.monitor] if best else nan, results["best_epoch"],
        test["micro"].get("f1", nan), test["micro"].get("precision", nan), test["micro"].get("recall", nan),
        test["macro"].get("f1", nan), test["lenient"]["micro"].get("f1", nan),
        results["epochs"], results["global_steps"], results["wall_time_s"], out_dir / "results.json",
    )
    return results


def _loadable(path: Path) -> bool:
    """A checkpoint is a zip archive; one cut short by a kill has no end record (read from the
    file's end only — Lightning then loads it once)."""
    import zipfile

    return zipfile.is_zipfile(path)


def tune(cfg: DictConfig, cell: dict | None = None) -> float:
    """One sweeper trial: the cell on each of ``tune_partitions`` (in ``partition<k>/``), and the
    mean of their best-dev ``monitor`` values, also written to ``tune.json``."""
    out_dir = Path(cfg.paths.output_dir)
    cell = cell or {}
    values = {}
    for p in cfg.tune_partitions:
        run = copy.deepcopy(cfg)
        with open_dict(run):
            run.partition = int(p)
            run.paths.output_dir = str(out_dir / f"partition{p}")
        values[int(p)] = train(run, cell={**cell, "prefix": f"{cell.get('prefix', 'run')} partition {p}"})["dev_monitor"]
        _finish_wandb()
    mean = statistics.fmean(values.values())
    write_json_atomic(out_dir / "tune.json", {"overrides": _overrides(), "monitor": cfg.monitor,
                                              "partitions": values, "mean": mean})
    log.info("trial %s | mean dev %s over partitions %s = %.4f", " ".join(_overrides()), cfg.monitor,
             list(values), mean)
    return mean


def singleaux_candidates(cfg: DictConfig) -> list[str]:
    """The auxiliaries a SingleAux cell chooses from (``multitask=singleaux`` with several ``aux``)."""
    if OmegaConf.select(cfg, "data.scheme") != "singleaux":
        return []
    names = [a for a in cfg.aux or [] if a != cfg.dataset.name]
    return names if len(names) > 1 else []


def singleaux(cfg: DictConfig, cell: dict | None = None) -> dict:
    """SingleAux as the MUNCHABLES paper runs it (§4.1): one auxiliary-learning run per auxiliary
    (``aux_<name>/candidate.json``), and the one with the best main-dev ``monitor`` is the cell's
    result — chosen on dev, never on test. A rerun keeps the candidates already finished."""
    out_dir = Path(cfg.paths.output_dir)
    cell = cell or {}
    done = {}
    for name in singleaux_candidates(cfg):
        sub = out_dir / f"aux_{name}"
        record = sub / "candidate.json"
        if record.exists():
            previous = json.loads(record.read_text())
            if previous.get("config_sha256") == cell.get("config_sha256"):
                done[name] = previous
                continue
        run = copy.deepcopy(cfg)
        with open_dict(run):
            run.aux = [name]
            run.paths.output_dir = str(sub)
        last = sub / "checkpoints" / "last.ckpt"
        result = train(run, resume=last if last.exists() else None,
                       cell={**cell, "prefix": f"{cell.get('prefix', 'run')} SingleAux {name}"})
        (sub / "results.json").replace(record)  # a candidate, not a cell of the grid
        done[name] = result
        _finish_wandb()
    best = max(done, key=lambda n: done[n]["dev_monitor"])
    results = {**done[best], "overrides": _overrides(), "config": OmegaConf.to_container(cfg, resolve=True),
               "grid": grid_keys(cfg, _overrides()),
               "finished": cells.now(), "wall_time_s": round(sum(r["wall_time_s"] for r in done.values()), 2),
               "singleaux": {"chosen": best, "monitor": cfg.monitor,
                             "dev_monitor": {n: r["dev_monitor"] for n, r in done.items()},
                             "candidates": {n: f"aux_{n}/candidate.json" for n in done}}}
    write_json_atomic(out_dir / "results.json", results)
    log.info("%s | SingleAux: %s chosen on dev %s (%s)", cell.get("prefix", "run"), best, cfg.monitor,
             ", ".join(f"{n} {r['dev_monitor']:.4f}" for n, r in done.items()))
    return results


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    """Runs one cell; returns its best dev ``monitor`` value — never a test score — for sweepers
    that optimise the return value.

    The cell first records itself (``cell.json``: config hash, device, host, pid) and drops what
    an earlier attempt left; a ``last.ckpt`` of the same config is resumed. A failure writes
    ``failure.json`` (``status`` failed, or interrupted for Ctrl-C / SIGTERM) and keeps the
    checkpoints for a rerun; a success writes ``results.json`` and drops them."""
    out_dir = Path(cfg.paths.output_dir)
    _running.clear()
    t0 = time.time()
    try:
        sha = cells.config_sha256(cfg)
        try:
            hc = HydraConfig.get()
            device = devices.assign(cfg, hc.launcher, hc.sweep.dir)
        except ValueError:  # outside Hydra (tests, notebooks)
            device = devices.describe(cfg)
        prefix, resume = cells.begin(cfg, out_dir, _overrides(), sha, device)
        cell = {"prefix": prefix, "config_sha256": sha, "device": device}
        if cfg.get("tune_partitions"):
            return tune(cfg, cell)
        if singleaux_candidates(cfg):
            return singleaux(cfg, cell)["dev_monitor"]
        return train(cfg, resume=resume, cell=cell)["dev_monitor"]
    except BaseException as err:
        trainer = _running.get("trainer")
        # Ctrl-C (Lightning turns it into SystemExit), SIGTERM (Lightning's SIGTERMException),
        # submitit's exit after a timeout / preemption requeue: the cell was stopped, not broken.
        interrupted = isinstance(err, (KeyboardInterrupt, SystemExit))
        failure = {
            "status": "interrupted" if interrupted else "failed",
            "overrides": _overrides(),
            "error": "interrupted (Ctrl-C or SIGTERM); rerun the same command to resume" if interrupted
            else f"{type(err).__name__}: {err}",
            "epoch": trainer.current_epoch if trainer is not None else None,
            "global_step": trainer.global_step if trainer is not None else None,
            "finished": cells.now(),
            "elapsed_s": round(time.time() - t0, 1),
            "traceback": traceback.format_exc(),
        }
        try:
            write_json_atomic(out_dir / "failure.json", failure)
            where = out_dir / "failure.json"
        except OSError as write_err:
            where = f"nowhere: {write_err}"
        log.error("run %s (%s): %s — details in %s", failure["status"], " ".join(_overrides()) or "defaults",
                  failure["error"], where)
        raise
    finally:
        _running.clear()
        _finish_wandb()


def _summarise_wandb(loggers: list, results: dict) -> None:
    """Best-epoch dev scores, test scores of both modes and compute into the W&B run summary."""
    from pytorch_lightning.loggers import WandbLogger

    from ner_lightning.metrics import flat_scores

    summary = {f"compute/{k}": v for k, v in results["compute"].items()}
    summary["best_epoch"] = results["best_epoch"]
    for split, stage in (("dev", "best_val"), ("test", "test")):
        if results[split]:
            summary.update(flat_scores(results[split], stage))
    for corpus, scores in (results.get("test_aux") or {}).items():  # auxiliary corpora's own heads
        summary.update(flat_scores(scores, f"test_aux/{corpus}"))
    for lg in loggers:
        if isinstance(lg, WandbLogger):
            lg.experiment.summary.update(summary)


def _finish_wandb() -> None:
    """Close the W&B run so the next cell of a multirun starts its own (template issue #289)."""
    if "wandb" in sys.modules:
        import wandb

        if wandb.run is not None:
            wandb.finish()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

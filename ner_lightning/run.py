"""Hydra entry point: ``python -m ner_lightning.run [-m] key=value ...``.

One run: build encoder -> data module (partition) -> objective family -> Trainer; fit with
dev evaluation each epoch, test once with the best-on-dev checkpoint, write ``results.json``.
A failing run writes ``failure.json`` (traceback included) and, in a multirun, the other
cells still run; Hydra reports the failure when the sweep ends.
"""
from __future__ import annotations

import copy
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
from ner_lightning.callbacks import TokenThroughput
from ner_lightning.results import best_epoch, grid_keys, write_json_atomic

log = logging.getLogger("ner_lightning")


def _instantiate_group(group: DictConfig | None) -> list:
    if not group:
        return []
    return [instantiate(c) for c in group.values() if isinstance(c, DictConfig) and "_target_" in c]


def _overrides() -> list[str]:
    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:
        return []


def train(cfg: DictConfig) -> dict:
    """Run one grid cell and return its ``results.json`` content."""
    t_start = time.perf_counter()
    out_dir = Path(cfg.paths.output_dir)
    pl.seed_everything(cfg.init_seed, workers=True)

    encoder = instantiate(cfg.model)
    datamodule = instantiate(cfg.data, tokenizer=encoder.tokenizer)
    datamodule.setup("fit")
    partition = datamodule.partition_record()
    write_json_atomic(out_dir / "partition.json", partition)
    module = instantiate(cfg.loss, encoder=encoder, label_set=datamodule.label_set)

    callbacks = _instantiate_group(cfg.get("callbacks"))
    loggers = _instantiate_group(cfg.get("logger"))
    trainer: pl.Trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)
    grid = grid_keys(cfg, _overrides())
    for lg in loggers:  # flat grid keys on top (W&B group-by), the whole resolved config under "config"
        lg.log_hyperparams({**grid, "config": OmegaConf.to_container(cfg, resolve=True)})

    before, after = partition["training_set"]["before"], partition["training_set"]["after"]
    log.info("train: %d sentences (%s, partition sha256 %s), entity-token share %.2f%%; trained on %d "
             "sentences, %d tokens, share %.2f%% | dev: %d | test: %d",
             partition["size"], cfg.dataset.name, partition["sha256"][:12], 100 * before["entity_token_share"],
             after["sentences"], after["tokens"], 100 * after["entity_token_share"],
             partition["dev_sentences"], partition["test_sentences"])
    t_fit = time.perf_counter()
    trainer.fit(module, datamodule=datamodule)
    checkpoint = trainer.checkpoint_callback
    ckpt = checkpoint.best_model_path if checkpoint is not None and checkpoint.best_model_path else None
    t_test = time.perf_counter()
    if cfg.evaluate_test:
        trainer.test(module, datamodule=datamodule, ckpt_path=ckpt, verbose=False)
    t_end = time.perf_counter()

    best = best_epoch(module.history, cfg.monitor) if module.history else None
    throughput = next((c.summary() for c in callbacks if isinstance(c, TokenThroughput)), {})
    results = {
        "status": "ok",
        "overrides": _overrides(),
        "grid": grid,
        "config": OmegaConf.to_container(cfg, resolve=True),
        "partition": {k: partition[k] for k in ("dataset", "size", "partition", "seed", "sha256")},
        "partition_file": "partition.json",
        "training_set": {k: partition["training_set"][k] for k in ("regime", "before", "after", "sha256")},
        "dev": best["scores"] if best else None,
        "best_epoch": best["epoch"] if best else None,
        "monitor": cfg.monitor,
        "dev_monitor": best["metrics"][cfg.monitor] if best else None,
        "test": module.scores.get("test"),
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
    }
    write_json_atomic(out_dir / "results.json", results)
    _summarise_wandb(loggers, results)
    if ckpt and not cfg.keep_checkpoint:
        Path(ckpt).unlink(missing_ok=True)
    nan = float("nan")
    test = results["test"] or {"micro": {}, "macro": {}, "lenient": {"micro": {}}}
    log.info(
        "%s | %s labels | dev %s=%.4f (epoch %s) | test F1 %.4f P %.4f R %.4f macro-F1 %.4f lenient F1 %.4f "
        "| %d epochs, %d steps | %.0f s | %s",
        " ".join(results["overrides"]) or "defaults", cfg.data.label_scheme, cfg.monitor,
        best["metrics"][cfg.monitor] if best else nan, results["best_epoch"],
        test["micro"].get("f1", nan), test["micro"].get("precision", nan), test["micro"].get("recall", nan),
        test["macro"].get("f1", nan), test["lenient"]["micro"].get("f1", nan),
        results["epochs"], results["global_steps"], results["wall_time_s"], out_dir / "results.json",
    )
    return results


def tune(cfg: DictConfig) -> float:
    """One sweeper trial: the cell on each of ``tune_partitions`` (in ``partition<k>/``), and the
    mean of their best-dev ``monitor`` values, also written to ``tune.json``."""
    out_dir = Path(cfg.paths.output_dir)
    values = {}
    for p in cfg.tune_partitions:
        cell = copy.deepcopy(cfg)
        with open_dict(cell):
            cell.partition = int(p)
            cell.paths.output_dir = str(out_dir / f"partition{p}")
        values[int(p)] = train(cell)["dev_monitor"]
        _finish_wandb()
    mean = statistics.fmean(values.values())
    write_json_atomic(out_dir / "tune.json", {"overrides": _overrides(), "monitor": cfg.monitor,
                                              "partitions": values, "mean": mean})
    log.info("trial %s | mean dev %s over partitions %s = %.4f", " ".join(_overrides()), cfg.monitor,
             list(values), mean)
    return mean


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    """Runs one cell; returns its best dev ``monitor`` value — never a test score — for sweepers
    that optimise the return value."""
    out_dir = Path(cfg.paths.output_dir)
    try:
        return tune(cfg) if cfg.get("tune_partitions") else train(cfg)["dev_monitor"]
    except BaseException as err:
        write_json_atomic(out_dir / "failure.json", {
            "status": "failed",
            "overrides": _overrides(),
            "error": f"{type(err).__name__}: {err}",
            "traceback": traceback.format_exc(),
        })
        log.error("run failed (%s): %s — details in %s", " ".join(_overrides()) or "defaults",
                  err, out_dir / "failure.json")
        raise
    finally:
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

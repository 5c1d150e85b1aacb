"""A cell's console lines: its training set, its model and its result (a few lines per cell;
every one also in the cell's ``train.log``)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytorch_lightning as pl

from ner_lightning.models.base import NERModule
from ner_lightning.results import CellResult

log = logging.getLogger("ner_lightning")


def log_partition(prefix: str, dataset: str, partition: dict) -> None:
    """The cell's training set: its partition, the regime's effect, dev and test sizes."""
    before, after = partition["training_set"]["before"], partition["training_set"]["after"]
    log.info(
        "%s | train: %d sentences (%s, partition sha256 %s), entity-token share %.2f%%; trained on %d "
        "sentences, %d tokens, share %.2f%% | dev: %d | test: %d",
        prefix,
        partition["size"],
        dataset,
        partition["sha256"][:12],
        100 * before["entity_token_share"],
        after["sentences"],
        after["tokens"],
        100 * after["entity_token_share"],
        partition["dev_sentences"],
        partition["test_sentences"],
    )


def log_model(prefix: str, module: NERModule, trainer: pl.Trainer, eval_precision: str | None) -> None:
    """One line for what Lightning's model summary table says (``trainer.enable_model_summary``)."""

    def count(n: int) -> str:
        return f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n / 1e3:.1f} K" if n >= 1e3 else str(n)

    encoder = sum(p.numel() for p in module.encoder.parameters())
    heads = sum(p.numel() for p in module.parameters()) - encoder
    frozen = ", frozen" if module.encoder.frozen else ""
    config = module.encoder.model.config.to_dict()
    log.info(
        "%s | %s on a %s-layer %s encoder (%s parameters%s) + heads of %s | precision: training %s, evaluation %s",
        prefix,
        type(module).__name__,
        config.get("num_hidden_layers", "?"),
        config["model_type"],
        count(encoder),
        frozen,
        count(heads),
        trainer.precision,
        module.eval_precision or eval_precision or trainer.precision,
    )


def log_result(r: CellResult, label_scheme: str, out_dir: Path) -> None:
    """The cell's last line: dev selection, test scores, budget, time, where results.json is."""
    nan = float("nan")
    test = r.test or {"micro": {}, "macro": {}, "lenient": {"micro": {}}}
    log.info(
        "%s | %s | %s labels | dev %s=%.4f (epoch %s) | test F1 %.4f P %.4f R %.4f macro-F1 %.4f lenient F1 %.4f "
        "| %d epochs, %d steps | %.0f s | %s",
        r.cell,
        " ".join(r.overrides) or "defaults",
        label_scheme,
        r.monitor,
        r.dev_monitor if r.dev_monitor is not None else nan,
        r.best_epoch,
        test["micro"].get("f1", nan),
        test["micro"].get("precision", nan),
        test["micro"].get("recall", nan),
        test["macro"].get("f1", nan),
        test["lenient"]["micro"].get("f1", nan),
        r.epochs,
        r.global_steps,
        r.wall_time_s,
        out_dir / "results.json",
    )

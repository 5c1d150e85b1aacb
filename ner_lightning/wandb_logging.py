"""Weights & Biases: the logger ``logger=wandb`` builds, and what a cell adds to its W&B run."""
from __future__ import annotations

import sys

from pytorch_lightning.loggers import WandbLogger as LightningWandbLogger

from ner_lightning.metrics import flat_scores
from ner_lightning.results import CellResult


class WandbLogger(LightningWandbLogger):
    """Lightning's W&B logger, fitted to what W&B accepts without a word: ``tags`` (a run's
    command-line overrides, ``tags: ${hydra:overrides.task}``) cut to W&B's 64 characters — a
    longer one, e.g. ``paths.data_dir=`` a deep path, fails the run's start — and without the
    ``anonymous`` setting Lightning always passes (``None`` unless asked for), which W&B >= 0.19
    ignores and warns about on every run (``logger=wandb``)."""

    TAG_LIMIT = 64

    def __init__(self, *args, tags=None, **kwargs):
        tags = [t if len(t) <= self.TAG_LIMIT else t[:self.TAG_LIMIT - 1] + "…" for t in map(str, tags or [])]
        super().__init__(*args, tags=tags or None, **kwargs)
        if not kwargs.get("anonymous"):
            self._wandb_init.pop("anonymous", None)


def summarise_wandb(loggers: list, result: CellResult) -> None:
    """Best-epoch dev scores, test scores of both modes and compute into the W&B run summary."""
    summary = {f"compute/{k}": v for k, v in result.compute.items()}
    summary["best_epoch"] = result.best_epoch
    for scores, stage in ((result.dev, "best_val"), (result.test, "test")):
        if scores:
            summary.update(flat_scores(scores, stage))
    for corpus, scores in (result.test_aux or {}).items():  # auxiliary corpora's own heads
        summary.update(flat_scores(scores, f"test_aux/{corpus}"))
    for lg in loggers:
        if isinstance(lg, LightningWandbLogger):
            lg.experiment.summary.update(summary)


def finish_wandb() -> None:
    """Close the W&B run so the next cell of a multirun starts its own (template issue #289)."""
    if "wandb" in sys.modules:
        import wandb

        if wandb.run is not None:
            wandb.finish()

"""Weights & Biases: the logger ``logger=wandb`` builds, and what a cell adds to its W&B run."""

from __future__ import annotations

import os
import sys
import weakref
from pathlib import Path

from pytorch_lightning.loggers import WandbLogger as LightningWandbLogger

from ner_lightning.metrics import flat_scores, spans
from ner_lightning.results import CellResult

_OPEN: weakref.WeakSet = weakref.WeakSet()  # this process's loggers whose run may be open (finish_wandb)

TABLE_COLUMNS = ["sentence", "gold", "predicted", "missed", "spurious", "correct"]


class WandbLogger(LightningWandbLogger):
    """Lightning's W&B logger, fitted to what W&B accepts without a word: ``tags`` (a run's
    command-line overrides, ``tags: ${hydra:overrides.task}``) cut to W&B's 64 characters — a
    longer one, e.g. ``paths.data_dir=`` a deep path, fails the run's start — and without the
    ``anonymous`` setting Lightning always passes (``None`` unless asked for), which W&B >= 0.19
    ignores and warns about on every run (``logger=wandb``)."""

    TAG_LIMIT = 64

    def __init__(self, *args, prediction_table_rows: int, tags=None, **kwargs):
        """``prediction_table_rows``: sentences per split in the run's prediction tables
        (:func:`log_prediction_tables`; 0 = none)."""
        tags = [t if len(t) <= self.TAG_LIMIT else t[: self.TAG_LIMIT - 1] + "…" for t in map(str, tags or [])]
        super().__init__(*args, tags=tags or None, **kwargs)
        self.prediction_table_rows = prediction_table_rows
        if not kwargs.get("anonymous"):
            self._wandb_init.pop("anonymous", None)
        # A run of its own, beside any other of the process (a lockstep group's cells each have
        # one); Lightning would otherwise reuse the process's current run.
        self._wandb_init.setdefault("reinit", "create_new")
        _OPEN.add(self)


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


def prediction_rows(path: Path, limit: int) -> list[list]:
    """Rows of :data:`TABLE_COLUMNS` from a predictions file (token, gold, predicted per line):
    each sentence with a gold or predicted span, its spans as ``TYPE: words`` (strict IOB2, as
    scored), the gold spans it missed and the spurious ones; sentences with an error first, then
    file order, at most ``limit``."""
    rows = []
    for block in path.read_text(encoding="utf-8").split("\n\n"):
        cols = [line.split("\t") for line in block.splitlines() if line]
        if not cols:
            continue
        words = [c[0] for c in cols]
        gold, pred = (set(spans([c[k] for c in cols], "strict")) for k in (1, 2))
        if not gold and not pred:
            continue

        def show(found: set, words: list[str] = words) -> str:
            return "; ".join(f"{t}: {' '.join(words[a : b + 1])}" for t, a, b in sorted(found, key=lambda s: s[1:]))

        rows.append([" ".join(words), show(gold), show(pred), show(gold - pred), show(pred - gold), gold == pred])
    rows.sort(key=lambda row: bool(row[-1]))  # stable: errors first, each part in file order
    return rows[:limit]


def log_prediction_tables(loggers: list, result: CellResult, out_dir: Path) -> None:
    """Each prediction file of the cell (dev at the selected epoch, test, each auxiliary
    corpus's test) as a W&B table ``predictions/<split>`` in the cell's run, where a grid's
    errors can be browsed sentence by sentence."""
    for lg in loggers:
        if not isinstance(lg, WandbLogger) or not lg.prediction_table_rows:
            continue
        import wandb

        for split, file in (result.predictions or {}).items():
            rows = prediction_rows(Path(out_dir) / file, lg.prediction_table_rows)
            lg.experiment.log({f"predictions/{split}": wandb.Table(columns=list[str | int](TABLE_COLUMNS), data=rows)})


def finish_wandb(loggers: list | None = None) -> None:
    """Finish the W&B runs of ``loggers`` (default: every run of this process's loggers) so the
    next cell of a multirun starts its own, and list each in its sweep's ``wandb/`` folder
    (:func:`link_into_sweep`)."""
    if "wandb" not in sys.modules:
        return
    import wandb

    for lg in list(_OPEN) if loggers is None else loggers:
        if not isinstance(lg, LightningWandbLogger):
            continue
        _OPEN.discard(lg)
        run = lg._experiment  # None: the run never started
        if run is not None:
            folder = Path(run.dir).parent
            run.finish()
            link_into_sweep(folder)
    if loggers is None and wandb.run is not None:
        wandb.finish()


def link_into_sweep(run_folder: Path) -> Path | None:
    """A link ``<sweep>/wandb/<run folder>`` to a cell's offline run, so that ``wandb leet
    <sweep>/wandb`` (and ``wandb sync <sweep>/wandb/offline-run-*``) sees every cell of the sweep;
    nothing outside a multirun."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
    except ValueError:
        return None
    if hc.mode != RunMode.MULTIRUN or not run_folder.is_dir():
        return None
    target = Path(hc.sweep.dir) / "wandb" / run_folder.name
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.is_symlink():
        target.symlink_to(os.path.relpath(run_folder.resolve(), target.parent.resolve()), target_is_directory=True)
    latest = target.parent / "latest-run"  # what `wandb leet <sweep>/wandb` opens first, as in a cell's own wandb/
    fresh = latest.with_name(f".latest-run.{os.getpid()}")
    fresh.unlink(missing_ok=True)
    fresh.symlink_to(target.name, target_is_directory=True)
    fresh.replace(latest)
    return target

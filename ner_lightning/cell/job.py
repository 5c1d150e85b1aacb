"""A cell as a Hydra job, around its protocol: placed on its device and recorded (``cell.json``:
identity, device, attempts; :func:`begin_cell`), its ``failure.json`` when it fails or is
interrupted (:func:`write_failure`), and the process's one-time freeze of what its imports made
(:func:`freeze_imports`); the start every cell's job makes (:func:`open_job`), its failure recorded
(:func:`recorded_failure`) and its end (:func:`ended_job`). Used by the entry point (``run``) and by
a lockstep group's cells (``lockstep.member_job``)."""

from __future__ import annotations

import contextlib
import gc
import logging
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from ner_lightning import console
from ner_lightning.cell.build import overrides
from ner_lightning.cell.steps import Cell, Progress
from ner_lightning.clock import PROCESS
from ner_lightning.config import complete_config
from ner_lightning.results import write_json_atomic
from ner_lightning.resuming import resume_command
from ner_lightning.settings import run_settings
from ner_lightning.sweep import cells, devices
from ner_lightning.sweep.identity import cell_identity
from ner_lightning.sweep.signals import exit_code
from ner_lightning.wandb_logging import finish_wandb

log = logging.getLogger("ner_lightning")


def _device(cfg: DictConfig) -> dict:
    try:
        hc = HydraConfig.get()
    except ValueError:  # outside Hydra (tests, notebooks)
        return devices.describe(cfg)
    return devices.assign(cfg, hc.launcher, hc.sweep.dir)


def write_failure(out_dir: Path, err: BaseException, elapsed_s: float, progress: Progress) -> None:
    """``failure.json``: ``interrupted`` for Ctrl-C (Lightning turns it into SystemExit), SIGTERM
    (Lightning's SIGTERMException) and submitit's exit after a timeout / preemption requeue —
    the cell was stopped, not broken — else ``failed``."""
    epoch, step = progress.position()
    interrupted = exit_code(err) is not None
    failure = {
        "status": "interrupted" if interrupted else "failed",
        "overrides": overrides(),
        "error": f"interrupted (Ctrl-C or SIGTERM); resume with: {resume_command()}"
        if interrupted
        else f"{type(err).__name__}: {err}",
        "epoch": epoch,
        "global_step": step,
        "finished": cells.now(),
        "elapsed_s": round(elapsed_s, 1),
        "traceback": traceback.format_exc(),
    }
    where: Path | str
    try:
        where = write_json_atomic(out_dir / "failure.json", failure)
    except OSError as write_err:
        where = f"nowhere: {write_err}"
    log.error(
        "run %s (%s): %s — details in %s",
        failure["status"],
        " ".join(overrides()) or "defaults",
        failure["error"],
        where,
    )


def begin_cell(cfg: DictConfig, out_dir: Path, progress: Progress) -> tuple[Cell, Path | None]:
    """The cell (held in ``out_dir``) placed on its device and recorded (``cell.json``: identity,
    device, attempts); the ``last.ckpt`` of the same identity to resume from, or None."""
    device = _device(cfg)
    identity = cell_identity(complete_config(cfg))  # what the sweeper's manifest records too
    prefix, resume = cells.begin(cfg, out_dir, overrides(), identity["sha256"], device)
    return Cell(prefix, device, identity, progress), resume


_imports_frozen = False  # whether this process froze what its imports made (freeze_imports)


def freeze_imports() -> None:
    """``gc.freeze()`` once, when the first cell starts: what the imports made (torch, Lightning,
    transformers: about a million objects) stays for the process's life, and no collection walks it
    again (each full one took ~0.3 s). Later cells' garbage is collected as usual (freezing again
    would keep an earlier cell's cyclic garbage for good)."""
    global _imports_frozen
    if not _imports_frozen:
        gc.freeze()
        _imports_frozen = True


def open_job(cfg: DictConfig) -> tuple[Path, Progress, float]:
    """What a cell's job does first: the process's time until now closed (its start-up, or the
    launcher's work after an earlier cell), its imports frozen, the console set; the cell's folder,
    a :class:`Progress` for its ``failure.json`` and its start time."""
    PROCESS.close_all()
    freeze_imports()
    settings = run_settings(cfg)
    console.quiet(settings.runtime.quiet)
    return settings.out_dir(), Progress(), time.time()


@contextlib.contextmanager
def recorded_failure(out_dir: Path, progress: Progress, started: float) -> Iterator[None]:
    """A failure or interruption inside writes the cell's ``failure.json`` (while its folder is
    still held) and goes on up."""
    try:
        yield
    except BaseException as err:
        write_failure(out_dir, err, time.time() - started, progress)
        raise


@contextlib.contextmanager
def ended_job(loggers: list | None = None) -> Iterator[None]:
    """A cell's job's end: Ctrl-C / SIGTERM become ``SystemExit`` with their exit code (which
    passes Hydra's job runner, so the sweep stops too); the W&B runs of ``loggers`` (None: the
    process's) finished; what the process does next charged to its next cell's start-up."""
    try:
        yield
    except BaseException as err:
        code = exit_code(err)
        if code is not None:
            raise SystemExit(code) from None
        raise
    finally:
        finish_wandb(loggers)
        PROCESS.open("startup")

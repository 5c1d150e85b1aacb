"""Hydra entry point: ``python -m ner_lightning.run [-m] key=value ...``.

Composes the config, records the cell in its sweep (``cell.json``: identity, device, attempts),
fills in what the config leaves to the run (``config.complete_config``: the data the objective
needs, the auxiliary corpora's dataset nodes) and
runs the cell's protocol (``ner_lightning.protocols``). A failing run writes ``failure.json``
(traceback included) and, in a multirun, the other cells still run; Hydra reports the failure
when the sweep ends.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import logging
import os
import sys
import time
import traceback
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import ner_lightning  # noqa: F401  (registers the config resolvers)
from ner_lightning import console, protocols
from ner_lightning.build import overrides
from ner_lightning.cell import Cell, FitEnd, Progress, finish_cell, fit_and_finish, setup_cell
from ner_lightning.clock import PROCESS
from ner_lightning.config import CONFIG_DIR, complete_config
from ner_lightning.lockstep.members import Member
from ner_lightning.results import write_json_atomic
from ner_lightning.settings import run_settings
from ner_lightning.sweep import cells, devices
from ner_lightning.sweep.identity import cell_identity
from ner_lightning.sweep.signals import exit_code, interrupts_raised
from ner_lightning.wandb_logging import finish_wandb

log = logging.getLogger("ner_lightning")


def _device(cfg: DictConfig) -> dict:
    try:
        hc = HydraConfig.get()
    except ValueError:  # outside Hydra (tests, notebooks)
        return devices.describe(cfg)
    return devices.assign(cfg, hc.launcher, hc.sweep.dir)


def _write_failure(out_dir: Path, err: BaseException, elapsed_s: float, progress: Progress) -> None:
    """``failure.json``: ``interrupted`` for Ctrl-C (Lightning turns it into SystemExit), SIGTERM
    (Lightning's SIGTERMException) and submitit's exit after a timeout / preemption requeue —
    the cell was stopped, not broken — else ``failed``."""
    epoch, step = progress.position()
    interrupted = exit_code(err) is not None
    failure = {
        "status": "interrupted" if interrupted else "failed",
        "overrides": overrides(),
        "error": "interrupted (Ctrl-C or SIGTERM); rerun the same command to resume"
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


def _begin(cfg: DictConfig, out_dir: Path, progress: Progress) -> tuple[Cell, Path | None]:
    """The cell (held in ``out_dir``) placed on its device and recorded (``cell.json``: identity,
    device, attempts); the ``last.ckpt`` of the same identity to resume from, or None."""
    device = _device(cfg)
    identity = cell_identity(complete_config(cfg))  # what the sweeper's manifest records too
    prefix, resume = cells.begin(cfg, out_dir, overrides(), identity["sha256"], device)
    return Cell(prefix, device, identity, progress), resume


_imports_frozen = False  # whether this process froze what its imports made (_freeze_imports)


def _freeze_imports() -> None:
    """``gc.freeze()`` once, when the first cell starts: what the imports made (torch, Lightning,
    transformers: about a million objects) stays for the process's life, and no collection walks it
    again (each full one took ~0.3 s). Later cells' garbage is collected as usual (freezing again
    would keep an earlier cell's cyclic garbage for good)."""
    global _imports_frozen
    if not _imports_frozen:
        gc.freeze()
        _imports_frozen = True


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def main(cfg: DictConfig) -> float | None:
    """Runs one cell; returns its best dev ``monitor`` value — never a test score — for sweepers
    that optimise the return value.

    The cell holds its folder (a second process starting it is refused), records itself
    (``cell.json``: identity, device, host, pid, attempts) and drops what an earlier attempt left;
    a ``last.ckpt`` of the same identity is resumed. Ctrl-C / SIGTERM exit 130 / 143. A failure writes
    ``failure.json`` and keeps the checkpoints for a rerun; a success writes ``results.json``
    and drops them."""
    PROCESS.close_all()  # the process's start-up (or, after an earlier cell of this process, the launcher's work) ends
    _freeze_imports()
    settings = run_settings(cfg)
    console.quiet(settings.runtime.quiet)
    out_dir = settings.out_dir()
    progress = Progress()  # where training is, for failure.json
    t0 = time.time()
    try:
        with interrupts_raised(), cells.exclusive(out_dir, "cell"):  # FolderInUse: another process's, left alone
            try:
                cell, resume = _begin(cfg, out_dir, progress)
                return protocols.run_protocol(cfg, cell, resume)
            except BaseException as err:
                _write_failure(out_dir, err, time.time() - t0, progress)  # while the folder is still ours
                raise
    except BaseException as err:
        code = exit_code(err)
        if code is not None:
            raise SystemExit(code) from None  # the sweep stops too: SystemExit passes Hydra's job runner
        raise
    finally:
        finish_wandb()
        PROCESS.open("startup")  # what this process does before its next cell, charged to that cell


def open_member(cfg: DictConfig) -> Member:
    """A cell of a lockstep group up to its fit (``hydra/launcher=lockstep``): held (its folder,
    until :func:`close_member`), recorded (``cell.json``) and set up (``cell.setup_cell``), its
    set-up's seconds carried to its ``results.json``."""
    PROCESS.close_all()
    _freeze_imports()
    settings = run_settings(cfg)
    console.quiet(settings.runtime.quiet)
    out_dir, progress, t0 = settings.out_dir(), Progress(), time.time()
    hold = contextlib.ExitStack()
    hold.enter_context(cells.exclusive(out_dir, "cell"))
    try:
        cell, resume = _begin(cfg, out_dir, progress)
        run = setup_cell(cfg, cell)
        spent = PROCESS.take()
        run.carried = {**spent["phases"], "unaccounted": spent["unaccounted"]}
        return Member(cfg, cell, run, resume=resume, hold=hold, started=t0)
    except BaseException as err:
        _write_failure(out_dir, err, time.time() - t0, progress)
        hold.close()
        raise


def close_member(member: Member) -> float | None:
    """The end of a lockstep group's cell: its test and ``results.json`` after the group's fit
    (``cell.finish_cell``), or a fit of its own when it did not train in the group (resuming its
    ``last.ckpt``, or refused by its family); ``failure.json`` when the group's fit stopped it."""
    cfg, out_dir = member.cfg, run_settings(member.cfg).out_dir()
    try:
        with interrupts_raised():
            try:
                if member.error is not None:
                    raise member.error
                if member.run.lockstep is None:
                    return fit_and_finish(cfg, member.cell, member.run, member.resume).dev_monitor
                end = FitEnd(checkpoint=member.checkpoint, position=member.position)
                return finish_cell(cfg, member.cell, member.run, end).dev_monitor
            except BaseException as err:
                _write_failure(out_dir, err, time.time() - member.started, member.cell.progress)
                raise
    except BaseException as err:
        code = exit_code(err)
        if code is not None:
            raise SystemExit(code) from None
        raise
    finally:
        member.hold.close()
        finish_wandb(member.run.loggers)
        PROCESS.open("startup")


def cli() -> None:
    """The ``ner-lightning`` command (``python -m ner_lightning.run``); ``ner-lightning study FILE``
    runs a study (``ner_lightning.study``). A hard crash (abort, segfault) prints every thread's
    Python stack to stderr first, so the cell's log says where."""
    if sys.argv[1:2] == ["study"]:  # `ner-lightning study CLAIMS.yaml`: ner_lightning/study.py
        from ner_lightning.study import main as study

        return study(sys.argv[2:])
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    faulthandler.enable()
    try:
        main()
    finally:
        gc.freeze()  # the interpreter's collections at exit would walk every object left (~1.3 s with torch)


if __name__ == "__main__":
    cli()

"""A lockstep group's cell as its own Hydra job: opened before the group's fit
(:func:`open_member`: held, recorded, set up) and closed after it (:func:`close_member`: tested,
``results.json``, or ``failure.json``), as ``run.main`` runs a cell alone in one go."""

from __future__ import annotations

import contextlib
import time

from omegaconf import DictConfig

from ner_lightning import console
from ner_lightning.cell.job import begin_cell, freeze_imports, write_failure
from ner_lightning.cell.steps import FitEnd, Progress, finish_cell, fit_and_finish, setup_cell
from ner_lightning.clock import PROCESS
from ner_lightning.lockstep.members import Member
from ner_lightning.settings import run_settings
from ner_lightning.sweep import cells
from ner_lightning.sweep.signals import exit_code, interrupts_raised
from ner_lightning.wandb_logging import finish_wandb


def open_member(cfg: DictConfig) -> Member:
    """A cell of a lockstep group up to its fit (``hydra/launcher=lockstep``): held (its folder,
    until :func:`close_member`), recorded (``cell.json``) and set up (``cell.setup_cell``), its
    set-up's seconds carried to its ``results.json``."""
    PROCESS.close_all()
    freeze_imports()
    settings = run_settings(cfg)
    console.quiet(settings.runtime.quiet)
    out_dir, progress, t0 = settings.out_dir(), Progress(), time.time()
    hold = contextlib.ExitStack()
    hold.enter_context(cells.exclusive(out_dir, "cell"))
    try:
        cell, resume = begin_cell(cfg, out_dir, progress)
        run = setup_cell(cfg, cell)
        spent = PROCESS.take()
        run.carried = {**spent["phases"], "unaccounted": spent["unaccounted"]}
        return Member(cfg, cell, run, resume=resume, hold=hold, started=t0)
    except BaseException as err:
        write_failure(out_dir, err, time.time() - t0, progress)
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
                write_failure(out_dir, err, time.time() - member.started, member.cell.progress)
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

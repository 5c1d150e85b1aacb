"""A lockstep group's cell as its own Hydra job: opened before the group's fit
(:func:`open_member`: held, recorded, set up) and closed after it (:func:`close_member`: tested,
``results.json``, or ``failure.json``), as ``run.main`` runs a cell alone in one go."""

from __future__ import annotations

import contextlib

from omegaconf import DictConfig

from ner_lightning.cell.job import begin_cell, ended_job, open_job, recorded_failure
from ner_lightning.cell.steps import FitEnd, finish_cell, fit_and_finish, setup_cell
from ner_lightning.clock import PROCESS
from ner_lightning.lockstep.members import Member
from ner_lightning.settings import run_settings
from ner_lightning.sweep import folder_lock
from ner_lightning.sweep.signals import interrupts_raised


def open_member(cfg: DictConfig) -> Member:
    """A cell of a lockstep group up to its fit (``hydra/launcher=lockstep``): held (its folder,
    until :func:`close_member`), recorded (``cell.json``) and set up (``cell.setup_cell``), its
    set-up's seconds carried to its ``results.json``."""
    out_dir, progress, t0 = open_job(cfg)
    hold = contextlib.ExitStack()
    hold.enter_context(folder_lock.exclusive(out_dir, "cell"))
    try:
        with recorded_failure(out_dir, progress, t0):
            cell, resume = begin_cell(cfg, out_dir, progress)
            run = setup_cell(cfg, cell)
    except BaseException:
        hold.close()
        raise
    spent = PROCESS.take()
    run.carried = {**spent["phases"], "unaccounted": spent["unaccounted"]}
    return Member(cfg, cell, run, resume=resume, hold=hold, started=t0)


def close_member(member: Member) -> float | None:
    """The end of a lockstep group's cell: its test and ``results.json`` after the group's fit
    (``cell.finish_cell``), or a fit of its own when it did not train in the group (resuming its
    ``last.ckpt``, or refused by its family); ``failure.json`` when the group's fit stopped it."""
    cfg, out_dir = member.cfg, run_settings(member.cfg).out_dir()
    with (
        ended_job(member.run.loggers),
        member.hold,
        interrupts_raised(),
        recorded_failure(out_dir, member.cell.progress, member.started),
    ):
        if member.error is not None:
            raise member.error
        if member.run.lockstep is None:
            return fit_and_finish(cfg, member.cell, member.run, member.resume).dev_monitor
        end = FitEnd(checkpoint=member.checkpoint, position=member.position, tested=member.tested)
        return finish_cell(cfg, member.cell, member.run, end).dev_monitor

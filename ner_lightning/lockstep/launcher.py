"""``hydra/launcher=lockstep``: the cells of a sweep that differ only in ``partition`` and
``init_seed`` train as lockstep groups of up to ``cells_per_group`` (``lockstep.fit``: one
``Trainer.fit`` a group); every other cell runs alone, as under the local launcher, and the console
says why. With ``n_jobs`` > 1 the groups and lone cells are the tasks of long-lived worker
processes, as under ``hydra/launcher=parallel`` (``sweep/workers.py``: each worker a device slot,
or its share of the CPU's cores); with 1 they run one after another in this process. Each cell is
composed once, by the sweeper, and travels to its worker composed.

Each cell keeps its own Hydra job — folder, ``.hydra/``, ``cell.json``, ``partition.json``,
``results.json`` or ``failure.json`` — set up before the group's fit (``member_job.open_member``) and
ended after it (``member_job.close_member``). A cell that cannot be set up, or diverges, fails alone; a
group whose fit raises fails its own cells only. The group's ``last.ckpt`` lives in
``<sweep>/lockstep/<group>/``: an interrupted group's cells record the interruption, and a rerun of
the sweep forms the same group and resumes it there — or, when some of its cells ended before the
interruption, the rest resume there as a group of their own (``fit.group_folder``); a cell with a
``last.ckpt`` of its own resumes alone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from ner_lightning.clock import PROCESS
from ner_lightning.settings import as_dict
from ner_lightning.sweep.launchers import ParallelLauncher, log_progress
from ner_lightning.sweep.signals import exit_code, interrupts_raised
from ner_lightning.sweep.workers import Job, WorkerPool

if TYPE_CHECKING:  # the cells' modules (Lightning, the models) load when a group runs, not at start-up
    from ner_lightning.lockstep.members import Member

log = logging.getLogger("ner_lightning")

GROUPED_KEYS = ("partition", "init_seed")  # what may differ between the cells of a group


def group_key(config: DictConfig) -> str:
    """The cell's config without what a group's cells may differ in (and without Hydra's node)."""
    task = as_dict(config, resolve=False)
    for key in ("hydra", *GROUPED_KEYS):
        task.pop(key, None)
    return json.dumps(task, sort_keys=True, default=str)


def plan_groups(
    jobs: Sequence[Job], cells_per_group: int, refusal: Callable[[DictConfig], str | None]
) -> list[tuple[list[Job], str | None]]:
    """The jobs as groups (cells alike but for ``GROUPED_KEYS``, in sweep order, at most
    ``cells_per_group`` each) and single cells, each with why it runs alone (None: a group)."""
    by_key: dict[str, list[Job]] = {}
    planned: list[tuple[list[Job], str | None]] = []
    for job in jobs:
        why = refusal(job.composed())
        if why is not None:
            planned.append(([job], why))
            continue
        by_key.setdefault(group_key(job.composed()), []).append(job)
    for alike in by_key.values():
        for start in range(0, len(alike), cells_per_group):
            chunk = alike[start : start + cells_per_group]
            planned.append(
                (
                    chunk,
                    None
                    if len(chunk) > 1
                    else "no other cell of the sweep differs from it only in partition or init_seed",
                )
            )
    return planned


def _closing(member: Member) -> Callable[[DictConfig], object]:
    """The task function that ends ``member``'s cell as its Hydra job."""
    from ner_lightning.lockstep.member_job import close_member

    return lambda cfg: close_member(member)


@dataclass
class LockstepTasks:
    """The :class:`~ner_lightning.sweep.workers.TaskRunner` of ``lockstep``: a task of several
    cells trains as one group (set up, fit together, each ended as its own Hydra job), a task of
    one cell runs alone."""

    hydra_context: HydraContext
    task_function: TaskFunction
    cpu_max_hidden: int
    sweep_dir: str

    def __call__(self, task: Sequence[Job]) -> list[JobReturn]:
        """A task's cells as a group; a lone cell alone — unless a killed group's record is in the
        sweep's ``lockstep/`` folder: it may be that group's last cell, resumed from its rows."""
        if len(task) == 1 and not any((Path(self.sweep_dir) / "lockstep").glob("*/cells.json")):
            return [self._isolated(task[0])]
        returns = self._run_group(list(task))
        return [returns[job.index] for job in task]

    def _job(self, job: Job, task: Callable[[DictConfig], object], again: bool = False) -> JobReturn:
        """``task`` run as the cell's Hydra job (its folder, ``.hydra/``, log file, HydraConfig);
        ``again``: its second job (the close), whose ``.hydra/`` files its first one wrote."""
        config = job.composed()
        if again:
            with read_write(config.hydra), open_dict(config.hydra):
                config.hydra.output_subdir = None  # Hydra writes no .hydra/ files for the job
        return run_job(
            hydra_context=self.hydra_context,
            task_function=task,
            config=config,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )

    def _isolated(self, job: Job) -> JobReturn:
        try:
            return self._job(job, self.task_function)
        except Exception as err:  # noqa: BLE001 — Hydra could not set the cell up: it fails alone
            return JobReturn(overrides=job.overrides, status=JobStatus.FAILED, _return_value=err)

    def _run_group(self, group: list[Job]) -> dict[int, JobReturn]:
        from ner_lightning.lockstep.fit import group_folder
        from ner_lightning.lockstep.member_job import open_member
        from ner_lightning.lockstep.members import setup_refusal

        returns, members = {}, []
        for job in group:
            try:
                ret = self._job(job, open_member)
            except Exception as err:  # noqa: BLE001 — Hydra could not set the cell up: it fails alone
                log.error(
                    "cell %s could not start (its folder, log file or config could not be set up): %s: %s",
                    " ".join(job.overrides),
                    type(err).__name__,
                    err,
                )
                ret = JobReturn(overrides=job.overrides, status=JobStatus.FAILED, _return_value=err)
            if ret.status == JobStatus.COMPLETED:
                members.append((job, ret.return_value))
            else:
                returns[job.index] = ret
                if exit_code(ret._return_value) is not None:
                    raise SystemExit(exit_code(ret._return_value))
        ready = [m for _, m in members if m.resume is None]
        refused = setup_refusal(ready, self.cpu_max_hidden) if ready else "no cell to group"
        if refused and len(ready) > 1:
            log.info("these %d cells run alone: %s", len(ready), refused)
        folder, rows = group_folder(Path(self.sweep_dir) / "lockstep", ready) if ready else (None, None)
        if folder is not None and not refused and (len(ready) > 1 or rows is not None):
            self._fit(ready, [job for job, m in members if m.resume is None], folder, rows)
        else:
            folder = None
        stop = None
        for job, member in members:
            try:
                returns[job.index] = self._job(job, _closing(member), again=True)
            except SystemExit as interrupted:  # every cell of the group records it before the sweep stops
                stop = interrupted.code
                returns[job.index] = JobReturn(
                    overrides=job.overrides, status=JobStatus.FAILED, _return_value=interrupted
                )
        if stop is not None:
            raise SystemExit(stop)
        if folder is not None and all(r.status == JobStatus.COMPLETED for r in returns.values()):
            shutil.rmtree(folder, ignore_errors=True)  # every cell ended: nothing to resume
            with contextlib.suppress(OSError):
                folder.parent.rmdir()  # the sweep's lockstep/ folder, when no other group is there
        return returns

    @staticmethod
    def _fit(members: list[Member], jobs: list[Job], folder: Path, rows: list[int] | None) -> None:
        """The group's fit (``rows``: theirs in an earlier group's checkpoint); its seconds shared
        out to its cells; an error stops every cell of it."""
        from ner_lightning.lockstep.fit import fit_group, group_sha256

        names = [" ".join(filter_overrides(job.overrides)) for job in jobs]
        sha = group_sha256(members)
        precision = OmegaConf.select(members[0].cfg, "callbacks.eval_precision.precision")
        for k, member in enumerate(members):
            member.run.lockstep = {
                "cells": len(members),
                "position": k,
                "group": names,
                "group_sha256": sha,
                "dev_precision": str(precision or members[0].cfg.trainer.precision),
            }
        started = time.time()
        try:
            with interrupts_raised():
                fit_group(members, folder, rows)
        except BaseException as err:  # noqa: BLE001 — the group's cells record it; other groups go on
            log.error("the lockstep group (%s) stopped: %s: %s", "; ".join(names), type(err).__name__, err)
            for member in members:
                member.error = member.error or err
        spent = PROCESS.take()
        phases = {**spent["phases"], "unaccounted": spent["unaccounted"]}
        # the fit's own phases and wall-clock span, whole; each cell's phase_s carries its share
        fit_record = {
            "fit_phase_s": {name: round(seconds, 3) for name, seconds in phases.items()},
            "fit_timeline": {"started": round(started, 3), "ended": round(time.time(), 3)},
        }
        for member in members:
            member.run.lockstep = {**(member.run.lockstep or {}), **fit_record}
            for name, seconds in phases.items():
                member.run.carried[name] = member.run.carried.get(name, 0.0) + seconds / len(members)


class LockstepLauncher(ParallelLauncher):
    """Lockstep groups of up to ``cells_per_group`` cells on ``n_jobs`` workers (module docstring)."""

    def __init__(
        self, n_jobs: int = 1, groups_per_gpu: int = 1, cells_per_group: int = 8, cpu_max_hidden: int = 64
    ) -> None:
        for key, value in (("cells_per_group", cells_per_group), ("cpu_max_hidden", cpu_max_hidden)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"hydra.launcher.{key}={value!r}: give an int >= 1")
        super().__init__(n_jobs, groups_per_gpu)
        self.cells_per_group, self.cpu_max_hidden = cells_per_group, cpu_max_hidden

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        jobs = [
            Job(initial_job_idx + k, list(o), self._compose(initial_job_idx + k, list(o)))
            for k, o in enumerate(job_overrides)
        ]
        from ner_lightning.lockstep.members import config_refusal

        plan = plan_groups(jobs, self.cells_per_group, config_refusal)
        workers = min(self.n_jobs, len(plan))
        log.info(
            "%d cells: %d in %d lockstep groups, %d alone%s",
            len(jobs),
            sum(len(g) for g, why in plan if why is None),
            sum(why is None for _, why in plan),
            sum(len(g) for g, why in plan if why is not None),
            f"; on {workers} worker processes" if workers > 1 else "",
        )
        for group, why in plan:
            log.info(
                "\t%s%s",
                ", ".join(f"#{job.index} : {' '.join(filter_overrides(job.overrides))}" for job in group),
                f" | alone: {why}" if why else "",
            )
        runner = LockstepTasks(
            self.hydra_context, self.task_function, self.cpu_max_hidden, str(self.config.hydra.sweep.dir)
        )
        done: list[JobReturn] = []
        started = time.monotonic()

        def progress(ret: JobReturn) -> None:
            done.append(ret)
            log_progress(done, len(jobs), time.monotonic() - started)

        tasks = [group for group, _ in plan]
        if workers > 1:
            returned = WorkerPool(self.n_jobs, runner).run(tasks, progress)
        else:
            returned = []
            for task in tasks:
                returned.append(runner(task))
                configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
                for ret in returned[-1]:
                    progress(ret)
        by_index = {
            job.index: ret
            for task, rets in zip(tasks, returned, strict=True)
            for job, ret in zip(task, rets, strict=True)
        }
        return [by_index[job.index] for job in jobs]

"""``hydra/launcher=local``: one cell after another in this process, on Hydra's public ``Launcher``
interface (what Hydra's basic launcher does), with each cell isolated — an error while Hydra
sets a cell up (before our code runs: its folder or log file cannot be written) fails that
cell, not the sweep — and the sweep's progress (cells done, time left) after each cell.

``hydra/launcher=parallel``: ``n_jobs`` worker processes that start once and run cell after cell
(``sweep/workers.py``), ``cells_per_gpu`` of them per GPU (``sweep/devices.py`` places them).

``hydra/launcher=auto`` (the default): ``parallel`` where the machine has a GPU, ``local`` where it
has none, said in the console."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

from ner_lightning.sweep.devices import auto_jobs, gpu_count
from ner_lightning.sweep.workers import Job, WorkerPool

log = logging.getLogger("ner_lightning")


def _duration(seconds: float) -> str:
    return (
        f"{seconds:.0f} s"
        if seconds < 90
        else f"{seconds / 60:.0f} min"
        if seconds < 5400
        else f"{seconds / 3600:.1f} h"
    )


def log_progress(returns: list[JobReturn], total: int, elapsed: float) -> None:
    """``sweep: 2/4 cells done (0 failed) in 1 min, about 1 min left`` after each cell of a launch."""
    if total < 2:
        return
    done, failed = len(returns), sum(r.status != JobStatus.COMPLETED for r in returns)
    left = "" if done == total else f", about {_duration(elapsed / done * (total - done))} left"
    log.info("sweep: %d/%d cells done (%d failed) in %s%s", done, total, failed, _duration(elapsed), left)


class LocalLauncher(Launcher):
    # Set by setup(), which Hydra calls before launch():
    config: DictConfig
    task_function: TaskFunction
    hydra_context: HydraContext

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        returns = []
        started = time.monotonic()
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))
            try:
                returns.append(self._run(idx, list(overrides)))
            except Exception as err:  # noqa: BLE001 — any set-up error fails this cell only
                log.error(
                    "cell %s could not start (its folder, log file or config could not be set up — is the "
                    "sweep folder %s writable?): %s: %s",
                    " ".join(overrides),
                    self.config.hydra.sweep.dir,
                    type(err).__name__,
                    err,
                )
                returns.append(JobReturn(overrides=list(overrides), status=JobStatus.FAILED, _return_value=err))
            configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
            log_progress(returns, len(job_overrides), time.monotonic() - started)
        return returns

    def _compose(self, idx: int, overrides: list[str]) -> DictConfig:
        """Cell ``idx``'s sweep config (the sweeper's composition, ``sweep.composing``)."""
        sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = idx
            sweep_config.hydra.job.num = idx
        return sweep_config

    def _run(self, idx: int, overrides: list[str]) -> JobReturn:
        return run_job(
            hydra_context=self.hydra_context,
            task_function=self.task_function,
            config=self._compose(idx, overrides),
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )


@dataclass
class CellByCell:
    """A worker's :class:`~ner_lightning.sweep.workers.TaskRunner` under ``parallel``: each cell
    of a task composed and run as its own Hydra job (``hydra_joblib_launcher``'s ``execute_job``)."""

    hydra_context: HydraContext
    config: DictConfig
    task_function: TaskFunction

    def __call__(self, task: Sequence[Job]) -> list[JobReturn]:
        from hydra.core.singleton import Singleton
        from hydra_plugins.hydra_joblib_launcher._core import execute_job

        return [
            execute_job(
                job.index, job.overrides, self.hydra_context, self.config, self.task_function, Singleton.get_state()
            )
            for job in task
        ]


class ParallelLauncher(LocalLauncher):
    """``n_jobs`` long-lived worker processes (``sweep/workers.py``), each running cell after
    cell; ``cells_per_gpu``: how many of them share one GPU (``sweep.devices.assign`` places each
    worker on its slot)."""

    def __init__(self, n_jobs: int, cells_per_gpu: int = 1) -> None:
        if not isinstance(cells_per_gpu, int) or isinstance(cells_per_gpu, bool) or cells_per_gpu < 1:
            raise ValueError(f"hydra.launcher.cells_per_gpu={cells_per_gpu!r}: give an int >= 1 (cells sharing a GPU)")
        if not isinstance(n_jobs, int) or isinstance(n_jobs, bool) or n_jobs == 0 or n_jobs < -1:
            raise ValueError(
                f"hydra.launcher.n_jobs={n_jobs!r}: give an int >= 1 (worker processes), or -1 (one per core)"
            )
        super().__init__()
        self.n_jobs, self.cells_per_gpu = (os.cpu_count() or 1) if n_jobs == -1 else n_jobs, cells_per_gpu

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        log.info("%d cells on %d worker processes", len(job_overrides), min(self.n_jobs, len(job_overrides)))
        jobs = [Job(initial_job_idx + k, list(o)) for k, o in enumerate(job_overrides)]
        for job in jobs:
            log.info("\t#%d : %s", job.index, " ".join(filter_overrides(job.overrides)))
        pool = WorkerPool(self.n_jobs, CellByCell(self.hydra_context, self.config, self.task_function))
        done: list[JobReturn] = []
        started = time.monotonic()

        def progress(ret: JobReturn) -> None:
            done.append(ret)
            log_progress(done, len(jobs), time.monotonic() - started)

        return [ret for (ret,) in pool.run([[job] for job in jobs], progress)]


class AutoLauncher(ParallelLauncher):
    """The fastest measured way to run a sweep on this machine, chosen when it launches: with a
    GPU, ``parallel``'s ``cells_per_gpu`` cells side by side on each (on an H200 a Table 2 grid
    ran at 31.2 cells/min side by side, 16.4 in lockstep groups: docs/benchmarks.md "Lockstep on a
    GPU"); without one, ``local``'s one cell after another (a CPU's cores serve one cell's
    threads). The console says which; every launcher stays selectable by name. ``n_jobs`` and
    ``cells_per_gpu`` (None: ``parallel``'s defaults) are looked at on a GPU only, when the sweep
    launches: a sweep refused before it launches never imports torch."""

    def __init__(self, n_jobs: int | None = None, cells_per_gpu: int | None = None) -> None:
        LocalLauncher.__init__(self)
        self.asked = (n_jobs, cells_per_gpu)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        gpus = gpu_count()
        if gpus:
            n_jobs, per_gpu = auto_jobs(*self.asked)
            ParallelLauncher.__init__(self, n_jobs, per_gpu)
            log.info(
                "hydra/launcher=auto: %d GPU(s) here, so cells run side by side, %d per GPU (hydra/launcher="
                "parallel); hydra/launcher=local or lockstep to run them otherwise",
                gpus,
                per_gpu,
            )
            return super().launch(job_overrides, initial_job_idx)
        log.info(
            "hydra/launcher=auto: no GPU here, so one cell after another (hydra/launcher=local); "
            "hydra/launcher=parallel or lockstep to run several at once"
        )
        return LocalLauncher.launch(self, job_overrides, initial_job_idx)

"""``hydra/sweeper=optuna_resumable`` (the tuning experiments, ``experiment=tune_*``): Hydra's
Optuna sweeper whose trials are cells of the sweep's manifest, as a grid's are.

* Before a batch of trials starts, each is added to ``<sweep dir>/manifest.json`` (its overrides,
  folder and identity), so ``python -m ner_lightning.sweep status`` follows the search and every
  trial keeps its folder; after it, its error if it failed.
* A trial whose folder already holds a finished result of the same identity is not trained
  again: the sweeper hands Optuna the recorded value. Resuming (``python -m ner_lightning.sweep
  resume <folder>``: the same command in the same folder) therefore continues an interrupted
  search — the seeded sampler proposes the same trials, the finished ones
  return at once — and with ``hydra.sweeper.storage`` (an Optuna database) a study grows.
* One launch per sweep folder; Ctrl-C / SIGTERM stop it with exit code 130 / 143.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper as HydraOptunaSweeper
from omegaconf import DictConfig

from ner_lightning.results import write_json_atomic
from ner_lightning.sweep import cells, folder_lock
from ner_lightning.sweep.grid_cells import describe_cell
from ner_lightning.sweep.sweeper import error_of


class RecordingLauncher(Launcher):
    """Wraps the sweep's launcher: records each trial in the manifest and launches only those
    without a finished result of their identity."""

    def __init__(self, launcher: Launcher, hydra_context: HydraContext, config: DictConfig):
        super().__init__()
        self.launcher, self.hydra_context, self.config = launcher, hydra_context, config
        self.sweep_dir = Path(str(config.hydra.sweep.dir))

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.launcher.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def _manifest(self) -> dict:
        old = cells.read_manifest(self.sweep_dir) or {
            "sweep_dir": str(self.sweep_dir),
            "sweeper": "optuna",
            "command": sys.argv,
            "cwd": os.getcwd(),
            "cells": [],
            "invocations": [],
        }
        return {k: v for k, v in old.items() if k != "_by_overrides"}

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        manifest = self._manifest()
        by_overrides = {tuple(c["overrides"]): c for c in manifest["cells"]}
        for overrides in job_overrides:
            if tuple(overrides) not in by_overrides:
                cell = {"cell": len(manifest["cells"]), "overrides": list(overrides)}
                manifest["cells"].append(cell)
                by_overrides[tuple(overrides)] = cell
        write_json_atomic(self.sweep_dir / cells.MANIFEST, manifest)  # the numbers first: folders read them
        trials = []
        for overrides in job_overrides:
            cell = by_overrides[tuple(overrides)]
            cell.update(describe_cell(self.hydra_context, self.config, cell["cell"], list(overrides), self.sweep_dir))
            trials.append(cell)
        write_json_atomic(self.sweep_dir / cells.MANIFEST, manifest)
        returns = self._launch_unfinished(trials, initial_job_idx)
        for cell, ret in zip(trials, returns, strict=True):
            cell.pop("last_error", None)
            if ret.status != JobStatus.COMPLETED:
                cell["last_error"] = error_of(ret)
        write_json_atomic(self.sweep_dir / cells.MANIFEST, manifest)
        return returns

    def _launch_unfinished(self, trials: list[dict], initial_job_idx: int) -> list[JobReturn]:
        done = {k: cells.finished(self.sweep_dir / c["dir"], c["config_sha256"]) for k, c in enumerate(trials)}
        todo = [c["overrides"] for k, c in enumerate(trials) if done[k] is None]
        launched = iter(self.launcher.launch(todo, initial_job_idx) if todo else [])
        returns = []
        for k, cell in enumerate(trials):
            finished = done[k]
            if finished is None:
                returns.append(next(launched))
            else:
                returns.append(
                    JobReturn(
                        overrides=list(cell["overrides"]),
                        status=JobStatus.COMPLETED,
                        _return_value=finished["value"],
                        working_dir=str(self.sweep_dir / cell["dir"]),
                    )
                )
        return returns


class OptunaSweeper(HydraOptunaSweeper):
    """Hydra's Optuna sweeper with :class:`RecordingLauncher` (see the module docstring)."""

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        launcher = self.sweeper.launcher
        assert launcher is not None  # Optuna's setup above instantiated it
        self.sweeper.launcher = RecordingLauncher(launcher, hydra_context, config)
        self.sweep_dir = Path(str(config.hydra.sweep.dir))

    def sweep(self, arguments: list[str]) -> None:
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        return folder_lock.run_exclusively(self.sweep_dir, lambda: super(OptunaSweeper, self).sweep(arguments))

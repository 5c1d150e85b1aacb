"""``hydra/sweeper=grid`` (the default): Hydra's basic grid sweeper plus a manifest and resume.

Before the first cell starts, the whole expanded grid goes to ``<sweep dir>/manifest.json``
(cell number, overrides, folder, identity: the resolved settings and the input files, see
``ner_lightning.sweep.identity``). A cell whose folder already holds a ``results.json`` of the
same identity is done and skipped; one of another identity reruns, and the sweep says why
before training (``rerun_because`` in the manifest); failed, interrupted and
missing cells run again (``12 done, 3 to run``). A command that adds values to an axis may
reuse the folder: the earlier cells keep their numbers, the new ones are numbered after them.
Cells keep their folder across reruns (``hydra.sweep.subdir`` numbers cells by the manifest, not
by launch order). Failed cells do not stop the others; the sweep exits non-zero at the end if any failed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import HydraException
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ner_lightning.config import label_scheme_needed
from ner_lightning.precision.choice import decided as decided_precisions
from ner_lightning.precision.choice import pin as pin_precision
from ner_lightning.results import write_json_atomic
from ner_lightning.resuming import sweep_resume_command
from ner_lightning.sweep import cells, folder_lock
from ner_lightning.sweep.composing import ComposedOnce
from ner_lightning.sweep.grid_cells import describe_cell, expand_grid, preflight_cell
from ner_lightning.sweep.preflight import Refused, add_user_paths

log = logging.getLogger("ner_lightning")


def _one_line(err: BaseException | str) -> str:
    """An error's message on one line, without Hydra's and OmegaConf's context lines (full_key, object_type ...)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    kept = [line for line in lines if not line.strip().startswith(("full_key:", "object_type=", "reference_type="))]
    return " ".join(kept or lines or [type(err).__name__])


def _remove_unused(sweep_dir: Path) -> None:
    """A refused grid's new folder (its manifest, multirun.yaml and lock only), and the date folder
    above it when that is empty."""
    if not sweep_dir.is_dir() or any(
        p.name not in (cells.MANIFEST, "multirun.yaml", folder_lock.LOCK) for p in sweep_dir.iterdir()
    ):
        return
    shutil.rmtree(sweep_dir, ignore_errors=True)
    with contextlib.suppress(OSError):
        sweep_dir.parent.rmdir()


class GridSweeper(Sweeper):
    """Hydra's grid semantics on Hydra's public ``Sweeper`` interface, with the manifest and resume
    described above."""

    # Set by setup(), which Hydra calls before sweep():
    hydra_context: HydraContext
    config: DictConfig
    launcher: Launcher

    def __init__(
        self,
        max_batch_size: int | None = None,
        params: dict | None = None,
        resume: bool = True,
        common_labels: bool = True,
    ):
        super().__init__()
        if max_batch_size is not None and max_batch_size < 1:
            raise Refused(
                f"hydra.sweeper.max_batch_size must be a positive number of cells or null, got {max_batch_size}"
            )
        self.max_batch_size, self.params, self.resume = max_batch_size, dict(params or {}), resume
        self.common_labels = common_labels

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        hydra_context = HydraContext(
            config_loader=ComposedOnce(hydra_context.config_loader), callbacks=hydra_context.callbacks
        )
        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def _expand(self, arguments: list[str]) -> list[list[str]]:
        params_conf = [f"{k}={v}" for k, v in self.params.items()] + list(arguments)
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        return expand_grid(parser.parse_overrides(params_conf))

    def _on_common_labels(self, jobs: list[list[str]]) -> list[list[str]]:
        """A grid whose objectives need different labels (AUC-2T's untyped spans next to CE's typed
        labels, ``data.label_scheme: null``) runs every such cell on the labels all of them can use
        (``data.label_scheme=untyped``, one more override per cell, so it shows in the manifest,
        the folder names and the cell identity): the cells then pair. ``common_labels: false``
        keeps each objective's own labels (the report refuses to pair those rows)."""
        loader, seen = self.hydra_context.config_loader, {}
        needs = []
        for job in jobs:
            key = tuple(
                o
                for o in job
                if o.lstrip("+~").split("=")[0].split(".")[0].split("@")[0] in ("loss", "experiment", "data")
            )
            if key not in seen:
                seen[key] = label_scheme_needed(
                    loader.load_sweep_config(master_config=self.config, sweep_overrides=list(job))
                )
            needs.append(seen[key])
        chosen = {n for n in needs if n is not None}
        if len(chosen) < 2 or not self.common_labels:
            return jobs
        losses = {
            o: n for job, n in zip(jobs, needs, strict=True) if n for o in job if o.startswith(("loss=", "experiment="))
        }
        log.warning(
            "sweep: the grid's objectives need different labels (%s): every cell runs on "
            "data.label_scheme=untyped, the labels all of them can use, so their scores pair "
            "(hydra.sweeper.common_labels=false keeps each objective's own)",
            ", ".join(f"{o}: {n}" for o, n in sorted(losses.items())) or "typed and untyped",
        )
        return [
            job + ["data.label_scheme=untyped"] if n is not None else job for job, n in zip(jobs, needs, strict=True)
        ]

    def sweep(self, arguments: list[str]) -> Any:
        sweep_dir = Path(self.config.hydra.sweep.dir)
        add_user_paths(self.config.hydra.runtime.config_sources)
        fresh = not (sweep_dir / cells.MANIFEST).exists()
        try:
            returns, failed = folder_lock.run_exclusively(sweep_dir, lambda: self._sweep(sweep_dir, arguments))
        except (folder_lock.FolderInUse, Refused) as err:
            # the grid refused before any cell ran: one line (HYDRA_FULL_ERROR=1: the traceback)
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            if fresh and not isinstance(err, folder_lock.FolderInUse):
                _remove_unused(sweep_dir)
            raise SystemExit(f"ner-lightning: sweep refused: {_one_line(err)}") from None
        if failed:  # each named once, its traceback in its failure.json and train.log, not again here
            for c in failed[:10]:
                log.error("sweep: cell %s failed: %s", c["dir"], _one_line(c["last_error"])[:300])
            if len(failed) > 10:
                log.error(
                    "sweep: ... and %d more (python -m ner_lightning.sweep status %s)", len(failed) - 10, sweep_dir
                )
            log.error("sweep: after a fix, resume with: %s", sweep_resume_command(sweep_dir))
            raise SystemExit(1)
        return returns

    def _sweep(self, sweep_dir: Path, arguments: list[str]) -> tuple[list[Sequence[JobReturn]], list[dict]]:
        try:
            manifest = self._planned(sweep_dir, arguments)
        except (HydraException, OmegaConfBaseException) as err:  # a cell that does not compose
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            raise Refused(_one_line(err)) from err
        done = [
            c
            for c in manifest["cells"]
            if self.resume and cells.finished(sweep_dir / c["dir"], c["config_sha256"]) is not None
        ]
        todo = [c for c in manifest["cells"] if c not in done]
        _warn_reruns(sweep_dir, todo)
        manifest["invocations"].append({"started": cells.now(), "done_before": len(done), "to_run": len(todo)})
        write_json_atomic(sweep_dir / cells.MANIFEST, manifest)
        total = len(manifest["cells"])
        skipping = " (skipping cells whose results.json has the same config hash)" if done else ""
        log.info("sweep %s: %d cells — %d done, %d to run%s", sweep_dir, total, len(done), len(todo), skipping)
        returns, failed = self._launched(todo)
        manifest["invocations"][-1].update({"finished": cells.now(), "failed": len(failed)})
        write_json_atomic(sweep_dir / cells.MANIFEST, manifest)
        log.info(
            "sweep %s: %d cells — %d ran, %d failed, %d done before | status: python -m ner_lightning.sweep status %s",
            sweep_dir,
            total,
            len(todo),
            len(failed),
            len(done),
            sweep_dir,
        )
        return returns, failed

    def _planned(self, sweep_dir: Path, arguments: list[str]) -> dict:
        """This invocation's manifest: every cell numbered, then composed and described (``describe_cell``)."""
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        expanded = self._expand(arguments)
        for k, o in enumerate(expanded):  # what needs no measurement first: a mistake is refused in seconds
            preflight_cell(self.hydra_context, self.config, k, o, expanded)
        old = cells.read_manifest(sweep_dir)
        jobs = _with_earlier_cells(sweep_dir, old, expanded, self._on_common_labels(expanded))
        # Cell numbers first (the subdir resolver reads them), then folders and hashes.
        manifest = {
            "sweep_dir": str(sweep_dir),
            "command": sys.argv,
            "cwd": os.getcwd(),  # where the command ran: `sweep resume` runs it there again
            "arguments": list(arguments),
            "cells": cells.numbered(jobs, old),
            "invocations": (old or {}).get("invocations", []),
        }
        write_json_atomic(sweep_dir / cells.MANIFEST, manifest)
        pin_precision((old or {}).get("precision_choices") or {})  # a resume keeps its cells' precision
        manifest["cells"] = [
            describe_cell(self.hydra_context, self.config, k, o, sweep_dir) for k, o in enumerate(jobs)
        ]
        manifest["precision_choices"] = decided_precisions()
        dirs = [c["dir"] for c in manifest["cells"]]
        if len(set(dirs)) != len(dirs):
            dup = next(d for d in dirs if dirs.count(d) > 1)
            raise Refused(
                f"two cells of this grid share the folder {dup!r}: they differ only in keys that "
                "hydra.job.config.override_dirname.exclude_keys leaves out of folder names"
            )
        manifest["precision"] = {
            stage: sorted({str(c["precision"][stage]) for c in manifest["cells"]}) for stage in ("train", "eval")
        }
        shown = ", ".join(f"{stage} {'/'.join(v)}" for stage, v in manifest["precision"].items())
        log.info("sweep %s: precision %s", sweep_dir, shown)
        return manifest

    def _launched(self, todo: list[dict]) -> tuple[list[Sequence[JobReturn]], list[dict]]:
        """``todo`` launched ``max_batch_size`` at a time: the launches' returns, the cells that failed."""
        returns, failed = [], []
        size = self.max_batch_size or len(todo)
        for i in range(0, len(todo), max(size, 1)):
            batch = [c["overrides"] for c in todo[i : i + size]]
            results = self.launcher.launch(batch, initial_job_idx=todo[i]["cell"])
            returns.append(results)
            for c, r in zip(todo[i : i + size], results, strict=True):
                if r.status != JobStatus.COMPLETED:
                    failed.append(c)
                    c["last_error"] = error_of(r)
        return returns, failed


def _warn_reruns(sweep_dir: Path, todo: list[dict]) -> None:
    """Say which finished cells will rerun because their folder holds another cell's result."""
    reruns = [c for c in todo if "rerun_because" in c]
    if reruns:
        reasons = Counter(c["rerun_because"] for c in reruns)
        log.warning(
            "sweep %s: %d finished cell(s) will rerun, their results are of another cell: %s",
            sweep_dir,
            len(reruns),
            "; ".join(f"{n} × {why}" for why, n in reasons.most_common()),
        )


def _with_earlier_cells(
    sweep_dir: Path, old: dict | None, expanded: list[list[str]], jobs: list[list[str]]
) -> list[list[str]]:
    """Resume, or a grown grid: the earlier manifest's cells keep their numbers and new ones
    follow; a command that does not contain the earlier grid is refused, saying why."""
    if old is None:
        return jobs
    before = [c["overrides"] for c in old["cells"]]
    if jobs != expanded and not all(o in jobs for o in before) and any(o in expanded for o in before):
        raise Refused(
            f"{sweep_dir} holds {len(before)} cells on each objective's own labels; this command adds "
            "an objective that needs other labels, so every cell would now run on "
            "data.label_scheme=untyped — another grid. Choose a new hydra.sweep.dir, or keep each "
            "objective's labels with hydra.sweeper.common_labels=false"
        )
    if not all(o in jobs for o in before):
        raise Refused(
            f"{sweep_dir / cells.MANIFEST} holds a grid of {len(before)} cells that this command does not "
            "contain: rerun the command that made it (or one that adds axis values) to resume, or choose a "
            "new hydra.sweep.dir"
        )
    return before + [o for o in jobs if o not in before]


def error_of(job: JobReturn) -> str:
    try:
        _ = job.return_value  # re-raises the job's exception
    except Exception as err:  # noqa: BLE001 — any failure of the cell is what it reports
        return f"{type(err).__name__}: {err}"
    return f"status {job.status.name}"

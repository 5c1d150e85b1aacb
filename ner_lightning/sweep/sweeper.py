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

import itertools
import logging
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import HydraException
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from ner_lightning.config import complete_config, label_scheme_needed
from ner_lightning.results import write_json_atomic
from ner_lightning.settings import as_dict
from ner_lightning.sweep import cells
from ner_lightning.sweep.composing import ComposedOnce
from ner_lightning.sweep.identity import identity_of, why_different

log = logging.getLogger("ner_lightning")


def expand_grid(overrides: list[Override]) -> list[list[str]]:
    """The product of the sweep overrides (``a=1,2 b=x,y``: 4 jobs), in the order given; a key
    given twice keeps its last value, as in Hydra."""
    axes: dict[str, list[str]] = {}
    for override in overrides:
        key = override.get_key_element()
        if not override.is_sweep_override():
            axes[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            axes[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            raise HydraException(
                f"hydra/sweeper=grid sweeps lists and ranges, not {override.value_type} "
                f"({key}): use hydra/sweeper=optuna for intervals"
            )
    return [list(job) for job in itertools.product(*axes.values())]


def describe_cell(
    hydra_context: HydraContext, master_config: DictConfig, k: int, overrides: list[str], sweep_dir: Path
) -> dict:
    """Compose cell ``k`` as its launcher will — its folder and identity (resolved settings and
    input files, ``sweep.identity``), which also validates it — and, when its folder holds the
    result of another cell, why it will rerun."""
    loader = hydra_context.config_loader
    sweep_config = loader.load_sweep_config(master_config=master_config, sweep_overrides=list(overrides))
    with open_dict(sweep_config):
        sweep_config.hydra.job.num = k
        sweep_config.hydra.job.id = k
    saved = HydraConfig.instance().cfg
    HydraConfig.instance().set_config(sweep_config)
    try:
        subdir = str(OmegaConf.select(sweep_config, "hydra.sweep.subdir"))
        job = OmegaConf.masked_copy(sweep_config, [str(key) for key in sweep_config if key != "hydra"])
        resolved = as_dict(complete_config(job), resolve=True)
        ident = identity_of(resolved)
    finally:
        HydraConfig.instance().cfg = saved
    precision = {
        "train": (resolved.get("trainer") or {}).get("precision"),
        "eval": ((resolved.get("callbacks") or {}).get("eval_precision") or {}).get("precision"),
    }
    cell = {
        "cell": k,
        "overrides": list(overrides),
        "dir": subdir,
        "config_sha256": ident["sha256"],
        "precision": precision,
    }
    old = cells.read_json(sweep_dir / subdir / cells.RESULTS)
    if old is not None and old.get("status") == "ok" and old.get("config_sha256") != ident["sha256"]:
        cell["rerun_because"] = why_different(old, ident, resolved)
    elif cells.unreadable(sweep_dir / subdir / cells.RESULTS):
        cell["rerun_because"] = "its results.json is corrupt"
    return cell


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
            raise ValueError(
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
        return cells.run_exclusively(sweep_dir, lambda: self._sweep(sweep_dir, arguments))

    def _sweep(self, sweep_dir: Path, arguments: list[str]) -> Any:
        manifest = self._planned(sweep_dir, arguments)
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
        if failed:
            first = next(r for batch in returns for r in batch if r.status != JobStatus.COMPLETED)
            _ = first.return_value  # re-raises the first failure, as Hydra's basic sweeper does
        return returns

    def _planned(self, sweep_dir: Path, arguments: list[str]) -> dict:
        """This invocation's manifest: every cell numbered, then composed and described (``describe_cell``)."""
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        expanded = self._expand(arguments)
        old = cells.read_manifest(sweep_dir)
        jobs = _with_earlier_cells(sweep_dir, old, expanded, self._on_common_labels(expanded))
        # Cell numbers first (the subdir resolver reads them), then folders and hashes.
        manifest = {
            "sweep_dir": str(sweep_dir),
            "command": sys.argv,
            "arguments": list(arguments),
            "cells": cells.numbered(jobs, old),
            "invocations": (old or {}).get("invocations", []),
        }
        write_json_atomic(sweep_dir / cells.MANIFEST, manifest)
        manifest["cells"] = [
            describe_cell(self.hydra_context, self.config, k, o, sweep_dir) for k, o in enumerate(jobs)
        ]
        dirs = [c["dir"] for c in manifest["cells"]]
        if len(set(dirs)) != len(dirs):
            dup = next(d for d in dirs if dirs.count(d) > 1)
            raise ValueError(
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
        raise ValueError(
            f"{sweep_dir} holds {len(before)} cells on each objective's own labels; this command adds "
            "an objective that needs other labels, so every cell would now run on "
            "data.label_scheme=untyped — another grid. Choose a new hydra.sweep.dir, or keep each "
            "objective's labels with hydra.sweeper.common_labels=false"
        )
    if not all(o in jobs for o in before):
        raise ValueError(
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

"""What one grid cell runs, by protocol (:func:`protocol_of`):

* ``single`` — build encoder -> data module (partition) -> objective family -> Trainer; fit with
  dev evaluation, test once with the best-on-dev checkpoint, write ``results.json``
  (:class:`ner_lightning.results.CellResult`).
* ``tune`` — a sweeper trial (``tune_partitions``): the cell on several tuning partitions, the
  mean of their best-dev values (``tune.json``).
* ``singleaux`` — MUNCHABLES §4.1's SingleAux with several auxiliaries: one run per auxiliary,
  the one with the best main-dev value is the cell's result (chosen on dev, never on test).
"""

from __future__ import annotations

import copy
import json
import logging
import statistics
import time
from pathlib import Path

from omegaconf import DictConfig, open_dict

from ner_lightning.cell.build import overrides
from ner_lightning.cell.steps import Cell, fit_and_finish, setup_cell, what_ran
from ner_lightning.results import CellResult, typed_fields, write_json_atomic
from ner_lightning.settings import run_settings
from ner_lightning.sweep import cells
from ner_lightning.wandb_logging import finish_wandb

log = logging.getLogger("ner_lightning")


def protocol_of(cfg: DictConfig) -> str:
    """``tune`` when ``tune_partitions`` is set, ``singleaux`` for SingleAux over several
    auxiliaries, else ``single``."""
    if cfg.get("tune_partitions"):  # typed at composition; read alone: a launcher asks before the job exists
        return "tune"
    return "singleaux" if singleaux_candidates(cfg) else "single"


def run_protocol(cfg: DictConfig, cell: Cell, resume: Path | None) -> float | None:
    """Run the cell's protocol; returns its best dev ``monitor`` value (never a test score; None
    without a dev evaluation)."""
    name = protocol_of(cfg)
    if name == "tune":
        return tune(cfg, cell)
    if name == "singleaux":
        return singleaux(cfg, cell).dev_monitor
    return train(cfg, resume=resume, cell=cell).dev_monitor


# --- single cell ---------------------------------------------------------------------------------
def train(cfg: DictConfig, resume: Path | None = None, cell: Cell | None = None) -> CellResult:
    """Run one grid cell and write its ``results.json``. ``resume``: a ``last.ckpt`` of this same
    config to continue from (model, optimiser, schedule, loops, RNG, history). Every second since
    the process started (or since the previous cell of this process took its share) is charged to
    a phase of ``phase_s`` (``ner_lightning/clock.py``). ``cell``: who the run is in its sweep
    (default: a run of its own)."""
    cell = cell or Cell()
    return fit_and_finish(cfg, cell, setup_cell(cfg, cell), resume)


# --- tuning --------------------------------------------------------------------------------------
def tune(cfg: DictConfig, cell: Cell | None = None) -> float:
    """One sweeper trial: the cell on each of ``tune_partitions`` (in ``partition<k>/``), and the
    mean of their best-dev ``monitor`` values, also written to ``tune.json``."""
    cell, settings = cell or Cell(), run_settings(cfg)
    out_dir = settings.out_dir()
    values: dict[int, float] = {}
    started = time.perf_counter()
    for p in settings.tune_partitions or []:
        run = copy.deepcopy(cfg)
        with open_dict(run):
            run.partition = int(p)
            run.paths.output_dir = str(out_dir / f"partition{p}")
        value = train(run, cell=cell.named(f"partition {p}")).dev_monitor
        finish_wandb()
        if value is None:
            raise ValueError(
                f"tuning partition {p}: no dev {settings.monitor} (no dev evaluation ran); a trial needs one"
            )
        values[int(p)] = value
    mean = statistics.fmean(values.values())
    write_json_atomic(
        out_dir / cells.TUNE,
        {
            "overrides": overrides(),
            "monitor": settings.monitor,
            "partitions": values,
            "mean": mean,
            "config_sha256": cell.config_sha256,
            "wall_time_s": round(time.perf_counter() - started, 2),
        },
    )
    log.info(
        "trial %s | mean dev %s over partitions %s = %.4f", " ".join(overrides()), settings.monitor, list(values), mean
    )
    return mean


# --- SingleAux -----------------------------------------------------------------------------------
def singleaux_candidates(cfg: DictConfig) -> list[str]:
    """The auxiliaries a SingleAux cell chooses from (``multitask=singleaux`` with several ``aux``)."""
    if cfg.multitask.scheme != "singleaux":  # one auxiliary per run: conf/multitask/singleaux.yaml
        return []
    names = [a for a in cfg.aux or [] if a != cfg.dataset.name]
    return names if len(names) > 1 else []


def _singleaux_candidate(cfg: DictConfig, cell: Cell, name: str) -> CellResult:
    """One auxiliary's run (``aux_<name>/candidate.json``); a finished one of the same config is kept."""
    sub = run_settings(cfg).out_dir() / f"aux_{name}"
    record = sub / "candidate.json"
    if record.exists():
        previous = json.loads(record.read_text())
        if previous.get("config_sha256") == cell.config_sha256:
            return CellResult(**typed_fields(previous))
    run = copy.deepcopy(cfg)
    with open_dict(run):
        run.aux = [name]
        run.aux_datasets = {name: cfg.aux_datasets[name]}
        run.paths.output_dir = str(sub)
    last = sub / "checkpoints" / "last.ckpt"
    result = train(run, resume=last if last.exists() else None, cell=cell.named(f"SingleAux {name}"))
    (sub / "results.json").replace(record)  # a candidate, not a cell of the grid
    finish_wandb()
    return result


def singleaux(cfg: DictConfig, cell: Cell | None = None) -> CellResult:
    """SingleAux as the MUNCHABLES paper runs it (§4.1): one auxiliary-learning run per auxiliary,
    and the one with the best main-dev ``monitor`` is the cell's result. A rerun keeps the
    candidates already finished."""
    cell, settings = cell or Cell(), run_settings(cfg)
    done = {name: _singleaux_candidate(cfg, cell, name) for name in singleaux_candidates(cfg)}
    scored = {n: r.dev_monitor for n, r in done.items() if r.dev_monitor is not None}
    if not scored:
        raise ValueError(f"SingleAux: no candidate has a dev {settings.monitor} to choose by (no dev evaluation ran)")
    best = max(scored, key=lambda n: scored[n])
    result = copy.copy(done[best])
    ran = what_ran(cfg)
    result.overrides, result.grid, result.config = overrides(), ran["grid"], ran["config"]
    result.finished = cells.now()
    result.wall_time_s = round(sum(r.wall_time_s for r in done.values()), 2)
    result.predictions = {split: f"aux_{best}/{path}" for split, path in (result.predictions or {}).items()} or None
    result.export = f"aux_{best}/{result.export}" if result.export else None
    result.singleaux = {
        "chosen": best,
        "monitor": settings.monitor,
        "dev_monitor": {n: r.dev_monitor for n, r in done.items()},
        "candidates": {n: f"aux_{n}/candidate.json" for n in done},
    }
    result.write(settings.out_dir() / "results.json")
    log.info(
        "%s | SingleAux: %s chosen on dev %s (%s)",
        cell.prefix,
        best,
        settings.monitor,
        ", ".join(f"{n} {'—' if r.dev_monitor is None else f'{r.dev_monitor:.4f}'}" for n, r in done.items()),
    )
    return result

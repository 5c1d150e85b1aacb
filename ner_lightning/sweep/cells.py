"""One grid cell's bookkeeping: its position in the sweep's manifest,
its ``cell.json`` record (attempts), stale-file clean-up and its resume checkpoint. Its identity
is ``ner_lightning.sweep.identity``."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import socket
import warnings
from pathlib import Path

from omegaconf import DictConfig

from ner_lightning.results import write_json_atomic

MANIFEST = "manifest.json"
CELL = "cell.json"
RESULTS = "results.json"
TUNE = "tune.json"  # a tuning trial's result (protocols.tune): the mean best-dev value over its partitions
FAILURE = "failure.json"
CHECKPOINT_DIR = "checkpoints"
LAST_CHECKPOINT = "last.ckpt"


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def unreadable(path: Path) -> bool:
    """A file that exists but is not readable JSON (a corrupt or truncated record)."""
    return path.exists() and read_json(path) is None


_manifest_cache: dict[str, tuple[float, dict]] = {}


def read_manifest(sweep_dir: str | Path) -> dict | None:
    path = Path(sweep_dir) / MANIFEST
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return None
    cached = _manifest_cache.get(str(path))
    if cached is None or cached[0] != mtime:
        data = read_json(path)
        if data is None or not isinstance(data.get("cells"), list):
            raise ValueError(
                f"{path} is corrupt (not a sweep manifest): restore it (e.g. from a sweep export) "
                "or delete it, and the next launch numbers the grid anew"
            )
        data["_by_overrides"] = {tuple(c["overrides"]): c for c in data["cells"]}
        _manifest_cache[str(path)] = (mtime, data)
    return _manifest_cache[str(path)][1]


def numbered(jobs: list[list[str]], old: dict | None) -> list[dict]:
    """The manifest's cells before their folders and hashes are composed: a number per job, and
    for a cell of the earlier manifest (``old``, as ``read_manifest`` returns it) its folder and
    hash as they were — so ``sweep status`` stays right when a restarted sweep is stopped while it
    composes the grid."""
    known = old["_by_overrides"] if old else {}
    return [{**known.get(tuple(o), {}), "cell": k, "overrides": list(o)} for k, o in enumerate(jobs)]


def position(sweep_dir: str | Path, overrides) -> tuple[int, int] | None:
    """(cell number, number of cells) of a job in its sweep's manifest, or None (no manifest:
    a single run, or a sweeper that writes none, e.g. Optuna)."""
    manifest = read_manifest(sweep_dir)
    if manifest is None:
        return None
    cell = manifest["_by_overrides"].get(tuple(overrides))
    return (cell["cell"], len(manifest["cells"])) if cell else None


def cell_number(job_num) -> int:
    """``${sweep_cell:${hydra.job.num}}`` in ``hydra.sweep.subdir``: the cell's number in the
    manifest, so a resumed sweep that launches only the missing cells keeps every cell's folder
    (a launcher numbers the jobs it is given from 0). Without a manifest: Hydra's job number."""
    from hydra.core.hydra_config import HydraConfig

    try:
        hc = HydraConfig.get()
    except ValueError:
        return int(job_num)
    found = position(hc.sweep.dir, list(hc.overrides.task))
    return found[0] if found else int(job_num)


def _clear_earlier_attempt(out_dir: Path, same: bool, attempts: int) -> Path | None:
    """What :func:`begin` drops of an earlier attempt (kept: the ``last.ckpt`` of the ``same``
    cell, and its CSV metrics renamed); the checkpoint to resume from, or None."""
    for name in (RESULTS, TUNE, FAILURE):
        (out_dir / name).unlink(missing_ok=True)
    ckpt_dir = out_dir / CHECKPOINT_DIR
    for tmp in [*out_dir.glob(".*.tmp"), *ckpt_dir.glob(".*.tmp")]:  # half-written files of a SIGKILLed attempt
        tmp.unlink(missing_ok=True)
    if not same and ckpt_dir.exists():
        for f in ckpt_dir.glob("*.ckpt"):
            f.unlink()
    last = ckpt_dir / LAST_CHECKPOINT
    resume = last if same and last.exists() else None
    metrics = out_dir / "csv" / "metrics.csv"
    if resume is not None and metrics.is_file():  # CSVLogger would delete it
        metrics.replace(metrics.with_name(f"metrics.attempt{attempts}.csv"))
    if resume is not None:  # its "previous log files ... will be deleted" is then untrue: nothing is
        warnings.filterwarnings(
            "ignore", message=f"Experiment logs directory {re.escape(str(metrics.parent))}/? exists and is not empty"
        )
    return resume


def begin(cfg: DictConfig, out_dir: Path, overrides: list[str], sha: str, device: dict) -> tuple[str, Path | None]:
    """Start (or restart) a cell in ``out_dir`` (held by :func:`exclusive`): drop what a previous
    attempt left that a report could misread (an old ``failure.json`` / ``results.json``, temp
    files of a write cut short by SIGKILL) and checkpoints of a *different* cell; keep ``last.ckpt``
    of the same identity ``sha`` to resume from, and the earlier attempt's CSV metrics
    (``csv/metrics.attempt<k>.csv``). Writes ``cell.json`` with every attempt so far.
    Returns the ``cell k/N`` log prefix and the checkpoint to resume from (or None)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    previous = read_json(out_dir / CELL)
    same = previous is not None and previous.get("config_sha256") == sha
    history = _history(out_dir, previous) if same and previous is not None else []
    resume = _clear_earlier_attempt(out_dir, same, len(history))
    where = None
    try:
        from hydra.core.hydra_config import HydraConfig

        where = position(HydraConfig.get().sweep.dir, overrides)
    except ValueError:
        pass
    prefix = f"cell {where[0] + 1}/{where[1]}" if where else "run"
    history.append(
        {
            "attempt": len(history) + 1,
            "started": now(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "resumed_from": str(resume) if resume else None,
            "wall_time_s": None,
        }
    )
    write_json_atomic(
        out_dir / CELL,
        {
            "cell": where[0] if where else None,
            "cells": where[1] if where else None,
            "overrides": overrides,
            "config_sha256": sha,
            "attempts": len(history),
            "started": history[-1]["started"],
            "host": history[-1]["host"],
            "pid": os.getpid(),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "resumed_from": str(resume) if resume else None,
            "device": device,
            "history": history,
        },
    )
    return prefix, resume


def _history(out_dir: Path, previous: dict) -> list[dict]:
    """The earlier attempts of this cell, the last one's time taken from its failure.json (an
    attempt killed with SIGKILL left none: its time stays unknown)."""
    history = list(previous.get("history") or [])
    failure = read_json(out_dir / FAILURE)
    if history and history[-1].get("wall_time_s") is None and failure is not None:
        history[-1]["wall_time_s"] = failure.get("elapsed_s")
    return history


def attempts(out_dir: Path, this_attempt_s: float) -> tuple[list[dict] | None, float]:
    """Every attempt of the cell in ``out_dir`` (this one's time filled in) and the wall time over
    all of them whose time is known; (None, this attempt's) outside a recorded cell."""
    record = read_json(out_dir / CELL)
    history = list((record or {}).get("history") or [])
    if not history:
        return None, this_attempt_s
    history[-1] = {**history[-1], "wall_time_s": this_attempt_s}
    return history, round(sum(a["wall_time_s"] or 0.0 for a in history), 2)


def clean_checkpoints(out_dir: Path, keep: str | None) -> None:
    """After a finished cell: every checkpoint goes except ``keep`` (the best one when asked)."""
    ckpt_dir = out_dir / CHECKPOINT_DIR
    for f in ckpt_dir.glob("*.ckpt"):
        if keep is None or f.resolve() != Path(keep).resolve():
            f.unlink(missing_ok=True)
    if ckpt_dir.is_dir() and not any(ckpt_dir.iterdir()):
        ckpt_dir.rmdir()


def finished(cell_dir: Path, sha: str) -> dict | None:
    """``{"value": ...}`` when the folder holds a finished cell of identity ``sha``: the value it
    returned to its sweeper — its best-dev ``monitor`` (``results.json``) or a tuning trial's mean
    over partitions (``tune.json``); else None."""
    res = read_json(cell_dir / RESULTS)
    if res is not None and res.get("status") == "ok" and res.get("config_sha256") == sha:
        return {"value": res.get("dev_monitor")}
    trial = read_json(cell_dir / TUNE)
    if trial is not None and trial.get("config_sha256") == sha:
        return {"value": trial["mean"]}
    return None


def status_of(cell_dir: Path) -> dict:
    """done / failed / interrupted / running / missing, from the files a cell writes
    (``record`` = its ``cell.json``)."""
    res, fail, record = (read_json(cell_dir / n) for n in (RESULTS, FAILURE, CELL))
    res = res if res is not None else read_json(cell_dir / TUNE)
    if res is not None:
        return {"state": "done", "results": res, "record": record}
    if unreadable(cell_dir / RESULTS):
        return {
            "state": "failed",
            "failure": {"error": f"{cell_dir / RESULTS} is corrupt: sweep resume reruns it"},
            "record": record,
        }
    if fail is not None:
        return {"state": fail.get("status", "failed"), "failure": fail, "record": record}
    if record is not None:
        here = record.get("host") == socket.gethostname()
        if here and not _pid_alive(record.get("pid")):
            return {"state": "interrupted", "record": record}
        return {"state": "running", "record": record}
    return {"state": "missing", "record": None}


def _pid_alive(pid) -> bool:
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

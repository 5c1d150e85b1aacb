"""One grid cell's bookkeeping: its identity (a hash of the composed config), its position in
the sweep's manifest, its ``cell.json`` record, stale-file clean-up and its resume checkpoint."""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import socket
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ner_lightning.results import write_json_atomic

MANIFEST = "manifest.json"
CELL = "cell.json"
RESULTS = "results.json"
FAILURE = "failure.json"
CHECKPOINT_DIR = "checkpoints"
LAST_CHECKPOINT = "last.ckpt"


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def config_sha256(cfg: DictConfig) -> str:
    """Identity of a cell: the composed job config *before* resolution (interpolations kept as
    written), keys sorted. Same command and same conf/ ⇒ same hash; a changed default ⇒ a new one.
    The sweeper computes it from the composed sweep config, the job from the config it receives."""
    node = OmegaConf.masked_copy(cfg, [k for k in cfg.keys() if k != "hydra"]) if "hydra" in cfg else cfg
    text = OmegaConf.to_yaml(node, resolve=False, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


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
        if data is None:
            return None
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


def begin(cfg: DictConfig, out_dir: Path, overrides: list[str], sha: str, device: dict) -> tuple[str, Path | None]:
    """Start (or restart) a cell in ``out_dir``: drop what a previous attempt left that a report
    could misread (an old ``failure.json`` / ``results.json``, temp files of a write cut short by
    SIGKILL), and checkpoints of a *different*
    config; keep ``last.ckpt`` of the same config to resume from. Writes ``cell.json``.
    Returns the ``cell k/N`` log prefix and the checkpoint to resume from (or None)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    previous = read_json(out_dir / CELL)
    same = previous is not None and previous.get("config_sha256") == sha
    for name in (RESULTS, FAILURE):
        (out_dir / name).unlink(missing_ok=True)
    ckpt_dir = out_dir / CHECKPOINT_DIR
    for tmp in [*out_dir.glob(".*.tmp"), *ckpt_dir.glob(".*.tmp")]:  # half-written JSON / checkpoint of a SIGKILLed attempt
        tmp.unlink(missing_ok=True)
    last = ckpt_dir / LAST_CHECKPOINT
    if not same and ckpt_dir.exists():
        for f in ckpt_dir.glob("*.ckpt"):
            f.unlink()
    resume = last if same and last.exists() else None
    where = None
    try:
        from hydra.core.hydra_config import HydraConfig

        where = position(HydraConfig.get().sweep.dir, overrides)
    except ValueError:
        pass
    prefix = f"cell {where[0] + 1}/{where[1]}" if where else "run"
    attempts = (previous or {}).get("attempts", 0) + 1 if same else 1
    write_json_atomic(out_dir / CELL, {
        "cell": where[0] if where else None, "cells": where[1] if where else None,
        "overrides": overrides, "config_sha256": sha, "attempts": attempts,
        "started": now(), "host": socket.gethostname(), "pid": os.getpid(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"), "resumed_from": str(resume) if resume else None,
        "device": device,
    })
    return prefix, resume


def clean_checkpoints(out_dir: Path, keep: str | None) -> None:
    """After a finished cell: every checkpoint goes except ``keep`` (the best one when asked)."""
    ckpt_dir = out_dir / CHECKPOINT_DIR
    for f in ckpt_dir.glob("*.ckpt"):
        if keep is None or f.resolve() != Path(keep).resolve():
            f.unlink(missing_ok=True)
    if ckpt_dir.is_dir() and not any(ckpt_dir.iterdir()):
        ckpt_dir.rmdir()


def status_of(cell_dir: Path) -> dict:
    """done / failed / interrupted / running / missing, from the files a cell writes
    (``record`` = its ``cell.json``)."""
    res, fail, record = (read_json(cell_dir / n) for n in (RESULTS, FAILURE, CELL))
    if res is not None:
        return {"state": "done", "results": res, "record": record}
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

"""Per-run outputs: ``results.json`` (or ``failure.json``) written atomically."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def write_json_atomic(path: str | os.PathLike, obj) -> Path:
    """Write JSON to a temp file in the same folder, then rename: never a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(obj, fh, indent=2, sort_keys=False, default=str)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def best_epoch(history: list[dict], monitor: str) -> dict | None:
    """The first epoch with the highest ``monitor`` (as ModelCheckpoint keeps it)."""
    best = None
    for row in history:
        if best is None or row["metrics"][monitor] > best["metrics"][monitor]:
            best = row
    return best

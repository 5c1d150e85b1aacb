"""Per-run outputs: ``results.json`` (or ``failure.json``) and checkpoints, written atomically."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import IO, Callable


def write_json_atomic(path: str | os.PathLike, obj) -> Path:
    """Write JSON to a temp file in the same folder, then rename: never a half-written file."""
    return write_atomic(path, lambda fh: fh.write(json.dumps(obj, indent=2, sort_keys=False, default=str).encode()))


def write_atomic(path: str | os.PathLike, write: Callable[[IO[bytes]], object], fsync: bool = True) -> Path:
    """Call ``write`` on a temp file in ``path``'s folder, then rename it to ``path``: a reader (or
    a rerun after a crash) sees the old file or the new one, never half of one. ``fsync=False``
    skips waiting for the disk (checkpoints of hundreds of MB, which ``run._loadable`` checks)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a results file is as readable as any other
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def best_epoch(history: list[dict], monitor: str) -> dict | None:
    """The first epoch with the highest ``monitor`` (as ModelCheckpoint keeps it)."""
    best = None
    for row in history:
        if best is None or row["metrics"][monitor] > best["metrics"][monitor]:
            best = row
    return best


# Flat names of what a grid varies -> their dotted path in the resolved config. Logged as
# top-level W&B config values (group-by and parallel coordinates without JSON paths) and
# written to results.json as "grid".
GRID_PATHS = {
    "size": "size", "partition": "partition", "seed": "seed", "init_seed": "init_seed",
    "monitor": "monitor", "head_lr": "loss.head_lr", "lr": "optimizer.lr", "max_epochs": "trainer.max_epochs",
    "label_scheme": "data.label_scheme", "entity_types": "data.entity_types",
    "entity_share": "data.imbalance.entity_share", "resample": "data.resample",
    "resample_variant": "data.resample_variant", "undersample": "data.undersample",
    "augment": "data.augment.methods", "dev_size": "data.dev_size",
    "aux": "aux", "aux_size": "aux_size", "aux_order": "data.aux_order",
}
CHOSEN_GROUPS = ("dataset", "model", "loss", "data", "optimizer", "multitask", "experiment")


def grid_keys(cfg, overrides: list[str]) -> dict:
    """The config groups chosen (``loss: auc2t`` …), the grid's axes by flat name, and every
    command-line override as ``key_with_underscores: value`` (e.g. ``loss_lam: 0.175``)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    try:
        choices = dict(HydraConfig.get().runtime.choices)
    except ValueError:
        choices = {}
    flat = {g: choices.get(g) for g in CHOSEN_GROUPS}
    for name, path in GRID_PATHS.items():
        value = OmegaConf.select(cfg, path)
        flat[name] = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    given = {}
    for o in overrides:  # the last of repeated overrides wins, as in Hydra
        key, _, value = o.lstrip("+~").partition("=")
        given[key.replace(".", "_").replace("/", "_")] = value
    flat.update({k: v for k, v in given.items() if k not in flat})
    return {k: ",".join(map(str, v)) if isinstance(v, list) else v for k, v in flat.items()}

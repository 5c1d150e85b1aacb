"""Typed run settings: the schema of the run-level keys of ``conf/config.yaml`` (and of its
``paths`` and ``runtime`` groups), registered in Hydra's ConfigStore as ``run_settings`` and
merged first by ``conf/config.yaml``'s defaults list. A wrong type (``evaluate_test=maybe``) or an
unknown key under ``paths`` / ``runtime`` fails at composition, naming the key. The values live
in the YAML files; the dataclasses only say what each key is.

The protocols read :class:`RunSettings` (:func:`run_settings`); the builders that
``instantiate`` components read the config's groups (``model``, ``loss``, ``data`` …) as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, cast

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf


@dataclass
class PathSettings:
    """``conf/paths``: where the code, the corpora and the cell's outputs are."""

    root_dir: str = MISSING
    data_dir: str = MISSING
    output_dir: str | None = MISSING  # None while a sweep plans its cells (Hydra has not made the folder yet)


@dataclass
class RuntimeSettings:
    """``conf/runtime``: process settings of a cell (``ner_lightning/hardware.py``, ``console.py``)."""

    malloc_top_pad_mb: int = MISSING
    fill_uninitialized_memory: bool = MISSING
    quiet: bool = MISSING


@dataclass
class RunSettings:
    """The run-level keys of ``conf/config.yaml`` (their meaning is written there)."""

    size: Any = MISSING  # a number of sentences or "full" (checked by the data module)
    partition: int = MISSING
    seed: int = MISSING
    init_seed: int = MISSING
    aux: list[str] = MISSING
    aux_datasets: dict[str, Any] = MISSING
    aux_size: int | None = MISSING
    aux_test_size: int | None = MISSING
    aux_sort_from: Any = MISSING  # SingleAux sweep folders: one or a list
    head_lr: float | None = MISSING
    tune_partitions: list[int] | None = MISSING
    evaluate_test: bool = MISSING
    monitor: str = MISSING
    keep_checkpoint: bool = MISSING
    export: bool = MISSING
    paths: PathSettings = field(default_factory=PathSettings)  # its keys: from conf/paths
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)  # from conf/runtime

    def out_dir(self) -> Path:
        """The cell's folder (``paths.output_dir``), which every running job has."""
        if self.paths.output_dir is None:
            raise RuntimeError("paths.output_dir is unset: a cell runs inside a Hydra job (or compose_config)")
        return Path(self.paths.output_dir)


def register() -> None:
    """Put the schema in Hydra's ConfigStore (``conf/config.yaml`` names it ``run_settings``).
    Open for the groups and the keys an experiment adds; the declared keys are typed."""
    schema = OmegaConf.structured(RunSettings)
    OmegaConf.set_struct(schema, False)
    for closed in ("paths", "runtime"):
        OmegaConf.set_struct(schema[closed], True)
    ConfigStore.instance().store(name="run_settings", node=schema)


def run_settings(cfg: DictConfig) -> RunSettings:
    """The run settings of a composed config, each resolved against the whole config. The config
    was composed over the schema (``register``), so its declared keys are typed already: the
    settings are built from their values directly (no second merge; several calls per cell)."""
    values: dict[str, Any] = {}
    for f in fields(RunSettings):
        node = cfg[f.name]
        values[f.name] = (
            OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig | ListConfig) else node
        )
    values["paths"], values["runtime"] = PathSettings(**values["paths"]), RuntimeSettings(**values["runtime"])
    return RunSettings(**values)


def as_dict(node: DictConfig, *, resolve: bool, throw_on_missing: bool = False) -> dict[str, Any]:
    """A config mapping as plain containers (``OmegaConf.to_container``), typed as the dict it is."""
    plain = OmegaConf.to_container(node, resolve=resolve, throw_on_missing=throw_on_missing)
    if not isinstance(plain, dict):
        raise TypeError(f"expected a config mapping, got {type(plain).__name__}: {plain!r:.80}")
    return cast(dict[str, Any], plain)

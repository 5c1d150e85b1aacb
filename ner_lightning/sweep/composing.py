"""Composing a sweep's cells fast: Hydra's config loader with two shortcuts, each giving exactly
the config Hydra's own composition gives (``tests/test_composing.py`` compares them).

- **Once per sweep.** The sweeper composes every cell to describe it (folder, identity) and the
  launcher composes it again to run it — the same call. The second call gets the first one's
  config (a copy) and the entry is dropped: a third call composes afresh. At most ``KEPT`` cells
  wait (~0.2 MB each).
- **Values on a composed template.** Hydra's composition costs ~0.35 s a cell, most of it the
  defaults list and the merge of the group files, which depend only on the config-group choices
  (``loss=ce``), not on plain values (``size=20 partition=3``). A cell whose overrides have the
  same keys as a composed cell's, the same group choices, and otherwise only plain value
  assignments, is that cell's config (a copy) with its own values set as Hydra sets a ``key=value``
  override (``OmegaConf.update(..., merge=True)``) and its own ``hydra.overrides.task`` and
  ``hydra.job.override_dirname``. Anything else (``+key``, ``~key``, ``hydra.*`` overrides, a new
  group choice, a key the template lacks or holds a whole node at, a value that does not apply) is
  composed by Hydra.

The caches stay in this process; a worker process builds its own.
"""

from __future__ import annotations

import copy
import re

from hydra.core.config_loader import ConfigLoader
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException


def override_dirname(overrides: list[Override], exclude_keys: list[str], item_sep: str, kv_sep: str) -> str:
    """``hydra.job.override_dirname`` as Hydra writes it: the overrides' lines, sorted, joined."""
    lines = sorted(str(o.input_line) for o in overrides if o.key_or_group not in exclude_keys)
    return re.sub("[=]", kv_sep, item_sep.join(lines))


class ComposedOnce(ConfigLoader):
    """Hydra's config loader with the two shortcuts of the module docstring."""

    KEPT = 1024

    def __init__(self, loader: ConfigLoader):
        self.loader = loader
        self._composed: dict[tuple[int, tuple[str, ...]], DictConfig] = {}
        self._templates: dict[tuple, DictConfig] = {}

    def __getstate__(self) -> dict:
        return {"loader": self.loader, "_composed": {}, "_templates": {}}

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        key = (id(master_config), tuple(sweep_overrides))
        if key in self._composed:
            return self._composed.pop(key)
        composed = self._from_template(master_config, list(sweep_overrides))
        if composed is None:
            composed = self.loader.load_sweep_config(master_config, list(sweep_overrides))
            self._keep_template(master_config, list(sweep_overrides), composed)
        if len(self._composed) < self.KEPT:
            self._composed[key] = copy.deepcopy(composed)
        return composed

    @staticmethod
    def _values(overrides: list[Override], choices: DictConfig) -> list[Override] | None:
        """The plain value assignments among ``overrides`` (each ``key=value`` of a non-group key),
        or None when one is anything else."""
        values = []
        for o in overrides:
            if o.key_or_group in choices:
                continue
            if o.type != OverrideType.CHANGE or o.is_hydra_override() or o.is_sweep_override() or o.package:
                return None
            values.append(o)
        return values

    def _shape(self, master_config: DictConfig, parsed: list[Override], choices: DictConfig) -> tuple:
        """What a cell shares with its template: the master config, each override's key, and the
        group choices' values."""
        return (
            id(master_config),
            tuple(
                (o.key_or_group, o.get_value_element_as_str() if o.key_or_group in choices else None) for o in parsed
            ),
        )

    def _keep_template(self, master_config: DictConfig, overrides: list[str], composed: DictConfig) -> None:
        parsed = OverridesParser.create().parse_overrides(overrides)
        choices = composed.hydra.runtime.choices
        if self._values(parsed, choices) is not None and len(self._templates) < self.KEPT:
            self._templates[self._shape(master_config, parsed, choices)] = copy.deepcopy(composed)

    def _from_template(self, master_config: DictConfig, overrides: list[str]) -> DictConfig | None:
        parsed = OverridesParser.create().parse_overrides(overrides)
        for shape, template in self._templates.items():  # few: one per combination of group choices
            choices = template.hydra.runtime.choices
            values = self._values(parsed, choices)
            if values is None or self._shape(master_config, parsed, choices) != shape:
                continue
            if any(OmegaConf.is_config(OmegaConf.select(template, o.key_or_group, default=template)) for o in values):
                return None  # a value override of a whole node (or of a key it lacks): Hydra's to compose
            cfg = copy.deepcopy(template)
            try:
                for o in values:
                    OmegaConf.update(cfg, o.key_or_group, o.value(), merge=True)
            except OmegaConfBaseException:
                return None  # Hydra's composition says what is wrong with it
            task, job = [o for o in parsed if not o.is_hydra_override()], cfg.hydra.job
            naming = job.config.override_dirname
            with open_dict(cfg.hydra):
                cfg.hydra.overrides.task = [o.input_line for o in task]
                job.override_dirname = override_dirname(task, list(naming.exclude_keys), naming.item_sep, naming.kv_sep)
            OmegaConf.copy_cache(from_config=master_config, to_config=cfg)
            return cfg
        return None

    def load_configuration(self, *args, **kwargs):
        return self.loader.load_configuration(*args, **kwargs)

    def get_search_path(self):
        return self.loader.get_search_path()

    def get_sources(self):
        return self.loader.get_sources()

    def list_groups(self, parent_name: str):
        return self.loader.list_groups(parent_name)

    def get_group_options(self, *args, **kwargs):
        return self.loader.get_group_options(*args, **kwargs)

    def compute_defaults_list(self, *args, **kwargs):
        return self.loader.compute_defaults_list(*args, **kwargs)

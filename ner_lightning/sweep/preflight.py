"""Checks of a composed cell that need neither a model nor a measurement, made before anything
slow (the precision measurement, the encoder, Lightning): every ``_target_`` findable (a module of
the user's own also importable), the corpus folder and files there, ``size`` / ``data.dev_size`` /
``data.test_size`` within their splits, and the values ``config.check_values`` checks. A refusal
is a :class:`Refused`: one line naming the key or file and what to do.

A module of the user's own is looked for where its configs are (each ``--config-dir`` /
``hydra.searchpath`` folder and the folder above it) besides ``sys.path``: :func:`add_user_paths`."""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ner_lightning.config import check_values
from ner_lightning.sweep.identity import installed, module_file, targets


class Refused(ValueError):
    """A cell refused for its input (config value, path, module): the message says what to do."""


def add_user_paths(config_sources) -> list[str]:
    """Append each user config folder (``hydra.runtime.config_sources`` given on the command line)
    and the folder above it to ``sys.path`` (after everything installed: nothing is shadowed), so a
    ``_target_: mylosses.MyLoss`` next to the YAML that names it imports as the docs show."""
    added = []
    for source in config_sources or []:
        path, provider = str(source.get("path") or ""), str(source.get("provider") or "")
        if source.get("schema") != "file" or provider in ("main", "hydra", "schema"):
            continue
        for folder in (Path(path), Path(path).parent):
            if folder.is_dir() and str(folder) not in sys.path:
                sys.path.append(str(folder))
                added.append(str(folder))
    return added


_checked: set[str] = set()  # targets and data settings this process found good (a sweep checks many cells)


def check_targets(cfg: DictConfig) -> None:
    """Each literal ``_target_``'s module is found on the path (nothing of the package or of the
    installed libraries is imported); a module of the user's own is imported and must hold the name."""
    raw = OmegaConf.to_container(cfg, resolve=False)
    for key, target in targets(raw):
        if "${" in target or target.split(".")[0] == "ner_lightning" or f"target:{target}" in _checked:
            continue  # the package's own targets are checked by its tests
        _check_target(key, target)
        _checked.add(f"target:{target}")


_MISSING = object()


def _check_target(key: str, target: str) -> None:
    where = f"{key}._target_" if key else "_target_"
    located = module_file(target)
    if located is None and importlib.util.find_spec(target.split(".")[0]) is not None:
        return  # installed through an import hook (an editable install): found without importing
    if located is None:
        wanted = target.rsplit(".", 1)[0]
        raise Refused(
            f"{where}: no module {wanted!r} for {target!r} — put {wanted.split('.')[0]}.py in your "
            "--config-dir folder (or the folder above it), or add its folder to PYTHONPATH"
        )
    name, path = located
    if installed(path):
        return
    try:
        obj: object = importlib.import_module(name)
    except Exception as err:  # noqa: BLE001 — whatever the user's module raises on import
        raise Refused(f"{where}: importing {name} ({path}) failed: {type(err).__name__}: {err}") from err
    attribute = target[len(name) + 1 :]
    for part in attribute.split(".") if attribute else []:
        obj = getattr(obj, part, _MISSING)
        if obj is _MISSING:
            raise Refused(f"{where}: {path} has no {attribute!r} (for {target!r}): check the name")


def check_data(cfg: DictConfig) -> None:
    """The corpus folder and files exist, and the sizes asked fit its splits."""
    from ner_lightning.data.corpus import load_corpus
    from ner_lightning.data.sampling import drawn_size

    node = cfg.get("dataset")
    if node is None or OmegaConf.select(cfg, "dataset._target_") != "ner_lightning.data.corpus.load_corpus":
        return
    name = OmegaConf.select(cfg, "dataset.name")
    folder = Path(str(OmegaConf.select(cfg, "dataset.dir")))
    given = str(node._get_node("dir")._value())  # as written, before interpolation
    if not folder.is_dir():
        via_data_dir = "paths.data_dir" in given
        fix = (
            "set NER_DATA_DIR (or paths.data_dir=...) to the folder holding one sub-folder per dataset"
            if via_data_dir
            else f"set dataset.dir (now {given!r}) to the folder holding its files"
        )
        raise Refused(f"dataset {name}: folder {folder} not found (dataset.dir) — {fix}")
    for split, file in (OmegaConf.select(cfg, "dataset.splits") or {}).items():
        if file and not (folder / str(file)).is_file():
            raise Refused(
                f"dataset {name}: {folder / str(file)} not found (dataset.splits.{split}) — name its {split} file"
            )
    args = OmegaConf.to_container(node, resolve=True)
    assert isinstance(args, dict)
    at_most = bool(OmegaConf.select(cfg, "data.eval_size_at_most", default=False))
    sizes = {key: OmegaConf.select(cfg, key, default=None) for key in ("size", "data.dev_size", "data.test_size")}
    fingerprint = "data:" + json.dumps([args, sizes, at_most], sort_keys=True, default=str)
    if fingerprint in _checked:
        return
    try:
        corpus = load_corpus(**{str(k): v for k, v in args.items() if k != "_target_"})
    except (OSError, ValueError) as err:  # a file that cannot be read or parsed: the message names it
        raise Refused(f"dataset {name}: {err}") from err
    for key, split, sentences in (
        ("size", "train", corpus.train),
        ("data.dev_size", "dev", corpus.dev),
        ("data.test_size", "test", corpus.test),
    ):
        try:
            drawn_size(sizes[key], len(sentences), str(name), split, key, at_most and key != "size")
        except ValueError as err:  # the data module's own rule and message
            raise Refused(str(err)) from err
    _checked.add(fingerprint)


def check_cell(cfg: DictConfig) -> None:
    """Every check of the module docstring; the first that fails raises :class:`Refused`."""
    try:
        check_values(cfg)
    except ValueError as err:
        raise Refused(str(err)) from err
    check_targets(cfg)
    if OmegaConf.select(cfg, "size", default=None) is not None:
        check_data(cfg)

"""What the report accepts of a ``results.json`` it did not write: a sweep folder shared by a
colleague, copied, edited or half-written by another version is data from elsewhere. Each value
the report reads is checked for its type and range before any of it is used (nothing in the file
is executed or interpreted as code); the first value that fails names the file and its key."""

from __future__ import annotations

import math
from pathlib import Path

SCORES = ("precision", "recall", "f1", "accuracy")  # a share: a real number in [0, 1]
COUNTS = ("support", "correct", "predicted", "gold")  # span counts: integers >= 0
SCORE_SECTIONS = ("test", "dev")  # {micro, macro, per_type, lenient: ...}; test_aux: {corpus: the same}
NUMBER_SECTIONS = ("compute", "phase_s")  # numbers (or null) by name
NUMBERS = ("best_epoch", "best_batch", "epochs", "global_steps", "wall_time_s", "dev_monitor")


class BadResult(ValueError):
    """A ``results.json`` whose content is not what a cell writes."""


def _real(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _scores(node, key: str) -> None:
    if not isinstance(node, dict):
        raise BadResult(f"{key} is {_shown(node)}, not a section of scores")
    for name, value in node.items():
        path = f"{key}.{name}"
        if isinstance(value, dict):
            _scores(value, path)
        elif name in SCORES:
            if not (_real(value) and 0.0 <= value <= 1.0):
                raise BadResult(f"{path} is {_shown(value)}, not a score in [0, 1]")
        elif name in COUNTS:
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
                raise BadResult(f"{path} is {_shown(value)}, not a count (an integer >= 0)")
        elif value is not None and not _real(value):
            raise BadResult(f"{path} is {_shown(value)}, not a number")


def check_result(run) -> None:
    """Raise :class:`BadResult` naming the first key whose value a cell could not have written."""
    if not isinstance(run, dict):
        raise BadResult(f"the file holds {_shown(run)}, not a results.json object")
    if run.get("status", "ok") != "ok":
        raise BadResult(f"status is {_shown(run.get('status'))}, not 'ok' (a finished cell's)")
    if not isinstance(run.get("config"), dict):
        raise BadResult(f"config is {_shown(run.get('config'))}, not the cell's resolved config")
    partition = run.get("partition")
    if not isinstance(partition, dict) or not isinstance(partition.get("sha256"), str):
        raise BadResult(f"partition.sha256 is {_shown((partition or {}).get('sha256'))}, not a partition's hash")
    if not isinstance(run.get("overrides", []), list):
        raise BadResult(f"overrides is {_shown(run.get('overrides'))}, not a list of overrides")
    for section in SCORE_SECTIONS:
        if run.get(section) is not None:
            _scores(run[section], section)
    aux = run.get("test_aux")
    if aux is not None:
        _scores(aux, "test_aux")
    for section in NUMBER_SECTIONS:
        node = run.get(section)
        if node is None:
            continue
        if not isinstance(node, dict):
            raise BadResult(f"{section} is {_shown(node)}, not a section of numbers")
        for name, value in node.items():
            if value is not None and not isinstance(value, str) and not _real(value):
                raise BadResult(f"{section}.{name} is {_shown(value)}, not a number")
    for name in NUMBERS:
        value = run.get(name)
        if value is not None and not (_real(value) and (name == "dev_monitor" or value >= 0)):
            raise BadResult(f"{name} is {_shown(value)}, not a number{'' if name == 'dev_monitor' else ' >= 0'}")


def refusal(path: Path, err: BadResult) -> str:
    """The one line the report stops with."""
    return (
        f"{path}: {err} — not a results.json that a cell writes (edited, truncated or another "
        "version's): rerun that cell (python -m ner_lightning.sweep resume <sweep folder>), or "
        "report without its folder"
    )


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."

"""What the report refuses instead of guessing: keys that name nothing, rows that pool runs of
different settings, the same run counted twice."""

from __future__ import annotations

from collections.abc import Sequence

from ner_lightning.report.runs import (
    RESULT_KEYS,
    RESULT_VALUES,
    baseline_value,
    labels,
    lookup,
    pair_id,
    parse_baseline,
    partition_label,
)
from ner_lightning.results import GRID_PATHS
from ner_lightning.sweep.identity import flat, settings

GROUPS = {
    "loss": ("loss",),
    "model": ("model",),
    "dataset": ("dataset", "data.corpus"),
    "data": ("data",),
    "multitask": ("multitask",),
    "optimizer": ("optimizer", "loss.optimizer"),
    # the auxiliary corpora, as this and earlier versions record them
    "aux": ("aux", "aux_datasets", "multitask.datamodule.auxiliaries", "data.auxiliaries"),
}
# What replicates a cell (partitions, seeds): rows average over these.
REPLICATE_NAMES = ("partition", "seed", "init_seed", "shuffle_seed")


def _paths(key: str) -> tuple[str, ...]:
    """The config paths a --by/--pool key stands for, with the places the config repeats them
    (``loss.optimizer`` is ``${optimizer}``, ``data.corpus`` is ``${dataset}``, ``data.size`` is ``${size}``)."""
    paths = list(GROUPS.get(key, (key,)))
    if key in GRID_PATHS:
        paths.append(GRID_PATHS[key])
    for p in list(paths):
        if p.startswith("optimizer"):
            paths.append("loss." + p)
        if p.startswith("dataset"):
            paths.append("data.corpus" + p[len("dataset") :])
        if "." not in p:
            paths.append(f"data.{p}")
    return tuple(paths)


def _free(key: str, free_paths: tuple[str, ...]) -> bool:
    last = key.rsplit(".", 1)[-1]
    return last in REPLICATE_NAMES or any(key == p or key.startswith(p + ".") for p in free_paths)


def pooled_differences(runs: list[dict], by: list[str], pool: list[str]) -> list[str]:
    """One line per row whose runs differ in a resolved setting other than the ``by`` and ``pool``
    keys and the replicates (partition, seeds), naming the keys and their values."""
    from ner_lightning.report.runs import group

    free = tuple(p for key in [*by, *pool] for p in _paths(key))
    problems = []
    for row, members in group(runs, by).items():
        for key, seen in _settings_of(members, free).items():
            if len(seen) > 1:
                shown = ", ".join(sorted(seen)[:4]) + (" …" if len(seen) > 4 else "")
                problems.append(f"row {' '.join(row)}: runs differ in {key} ({shown})")
    return problems


def _settings_of(members: list[dict], free: tuple[str, ...]) -> dict[str, set[str]]:
    values: dict[str, set[str]] = {}
    for r in members:
        for key, value in flat(settings(r.get("config") or {})).items():
            if not _free(key, free):
                values.setdefault(key, set()).add(value)
    return values


def unpaired_rows(
    rows: dict[tuple, list[dict]], pairs: list[tuple[tuple, tuple]], by: list[str], pool: Sequence[str] = ()
) -> list[str]:
    """One line per (row, baseline row) whose runs differ in a resolved setting other than the
    ``by`` keys, the ``pool`` keys and the replicates — e.g. ``data.label_scheme`` when AUC-2T ran on
    untyped spans and CE on typed labels: a paired difference of those rows measures both at once."""
    free = tuple(p for key in [*by, *pool] for p in _paths(key))
    problems = []
    for row, ref in pairs:
        mine, theirs = _settings_of(rows[row], free), _settings_of(rows[ref], free)
        for key in sorted(set(mine) | set(theirs)):
            if mine.get(key) != theirs.get(key):
                problems.append(
                    f"row {' '.join(row)} vs {' '.join(ref)}: {key} is {_listed(mine.get(key))} vs "
                    f"{_listed(theirs.get(key))}"
                )
    return problems


def duplicates(runs: list[dict], by: list[str]) -> list[str]:
    """Runs of one row on the same partition sentences with the same initialisation, named."""
    seen: dict[tuple, str] = {}
    found = []
    for r in runs:
        key = tuple(str(lookup(r, k)) for k in by) + pair_id(r)
        if key in seen:
            found.append(f"row {' '.join(key[: len(by)])}, partition {partition_label(r)}: {seen[key]} and {r['_dir']}")
        else:
            seen[key] = r["_dir"]
    return found


def unknown_keys(runs: list[dict], by: list[str], metrics: list[str]) -> list[str]:
    """--by and --metrics keys that no run has, each with what exists instead."""
    problems = []
    for key in by:
        if all(lookup(r, key) is None for r in runs):
            top = sorted({k for r in runs for k in (r.get("config") or {})} | set(GROUPS))
            problems.append(f"--by {key}: no run has it; config keys: {', '.join(top)} (or a dotted path under them)")
    for metric in metrics:
        if all(lookup(r, metric) is None for r in runs):
            known = sorted(
                {
                    k
                    for r in runs[:20]
                    for k in flat({s: r.get(s) for s in ("test", "dev", "compute")})
                    if k.count(".") <= 2
                }
            )
            problems.append(
                f"--metrics {metric}: no run has it; e.g. {', '.join(known[:12])} …, or one of "
                f"{', '.join(RESULT_VALUES)} (sections: {', '.join(RESULT_KEYS)})"
            )
    return problems


def unknown_baseline(runs: list[dict], baseline: str | None, by: list[str]) -> list[str]:
    """A --baseline KEY=VALUE whose KEY is not a --by key or whose VALUE no row has."""
    if not baseline:
        return []
    parse_baseline(baseline, by)  # KEY=VALUE with KEY one of --by, or it stops the report
    key, _, value = baseline.partition("=")
    present = set(labels(runs, key))
    if baseline_value(value, present) not in present:
        return [f"--baseline {baseline}: no row has {key}={value}; rows have {key} = {', '.join(sorted(present))}"]
    return []


def _listed(values: set | None) -> str:
    return ", ".join(sorted(values or {"(unset)"}))

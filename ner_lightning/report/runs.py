"""Reading a sweep: every cell's ``results.json`` (and ``failure.json``), values by dotted path."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ner_lightning import run_store
from ner_lightning.report.result_schema import BadResult, check_result, refusal
from ner_lightning.results import RESULT_SECTIONS, RESULT_VALUES, typed_fields
from ner_lightning.sweep.cells import TUNE

RESULT_KEYS = tuple(f"{section}." for section in RESULT_SECTIONS)


def load_runs(dirs: list[Path], strict: bool = False) -> tuple[list[dict], list[Path]]:
    """All results under ``dirs`` (folders, or folders a run store holds: ner_lightning/run_store.py)
    and the failures of cells that have no results (a rerun that succeeded supersedes an old
    ``failure.json`` in the same folder). A results.json that cannot be read is named and
    skipped (``strict``: the report stops); one whose values a cell could not have written
    (``report.result_schema``) stops the report, naming the file and the key."""
    runs, failed = [], []
    for d in dirs:
        if not run_store.exists(Path(d)):
            raise SystemExit(f"{d}: no such folder (nor a run store holding it)")
        results = run_store.files_named(Path(d), "results.json")
        for path in results:
            try:
                run = json.loads(run_store.read_text(path))
            except (OSError, ValueError) as err:
                if strict:
                    raise SystemExit(
                        f"{path}: not a readable results.json ({err}); rerun that cell, or report without its folder"
                    ) from None
                print(f"warning: skipped {path}: not a readable results.json ({err})", file=sys.stderr)
                continue
            try:
                check_result(run)
            except BadResult as err:
                raise SystemExit(refusal(path, err)) from None
            run["_dir"] = str(path.parent)
            runs.append(run)
        done = {p.parent for p in results}
        failed += [f for f in run_store.files_named(Path(d), "failure.json") if f.parent not in done]
    return runs, failed


def load_trials(dirs: list[Path]) -> list[dict]:
    """Tuning trials (``tune.json``, one per Hydra job) in job order, with ``trial`` = job number."""
    trials: list[dict] = []
    for d in dirs:
        for path in run_store.files_named(Path(d), TUNE):
            record = json.loads(run_store.read_text(path))
            number = path.parent.name.split("_", 1)[0]
            record["trial"] = int(number) if number.isdigit() else len(trials)
            trials.append(record)
    return sorted(trials, key=lambda t: t["trial"])


def lookup(run: dict, key: str):
    """``loss``/``model``/``dataset``/``multitask``/``data``: the group option chosen (``data``: the
    regime preset, conf/data); ``test.…``, ``dev.…``, ``compute.…``, ``best_epoch`` …: a path into
    results.json; ``best_is_last``: 1 if the selected evaluation was the last (the training budget
    may bind), else 0 — its mean over a row is the share of such runs; anything else: a path into
    the resolved config."""
    if key in ("loss", "model", "dataset", "multitask", "data"):
        if run.get("grid", {}).get(key) is not None:
            return run["grid"][key]
        for o in run.get("overrides", []):
            if o.startswith(f"{key}="):
                return o.split("=", 1)[1]
        if key == "dataset":
            return (run.get("partition") or {}).get("dataset") or run["config"]["dataset"]["name"]
        if key == "model":
            return typed_fields(run)["encoder"]
        if key == "data":
            return "default"
        return None
    if key == "best_is_last":  # 1 when the selected evaluation was the run's last: its budget may bind
        best, batches = run.get("best_batch"), (run.get("compute") or {}).get("train_batches")
        return None if best is None or batches is None else float(best == batches)
    node = run if key.startswith(RESULT_KEYS) or key in RESULT_VALUES else run["config"]
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return ",".join(map(str, node)) if isinstance(node, list) else node  # aux=[a,b] -> "a,b": a row key


def sort_key(key: tuple) -> list:
    out = []
    for x in key:
        try:
            out.append((0, float(x), ""))
        except ValueError:
            out.append((1, 0.0, x))
    return out


def shown(values: list) -> list[str]:
    """How a row key's values are written: non-integral floats with the fewest significant digits
    (at least 4) that keep different values apart (an Optuna-sampled gamma 7.151893663724195 is
    ``7.152``); everything else as ``str``."""
    floats = {v for v in values if isinstance(v, float) and not v.is_integer()}
    digits = next(d for d in range(4, 18) if len({f"{v:.{d}g}" for v in floats}) == len(floats))
    return [f"{v:.{digits}g}" if v in floats else str(v) for v in values]


def labels(runs: list[dict], key: str) -> list[str]:
    """Each run's value of ``key`` as a row of :func:`group` writes it."""
    return shown([lookup(r, key) for r in runs])


def group(runs: list[dict], by: list[str]) -> dict[tuple, list[dict]]:
    """Runs grouped by the values of the ``by`` keys (written by :func:`shown`), in natural order."""
    columns = [labels(runs, k) for k in by]
    rows: dict[tuple, list[dict]] = {}
    for i, r in enumerate(runs):
        rows.setdefault(tuple(column[i] for column in columns), []).append(r)
    return {k: rows[k] for k in sorted(rows, key=sort_key)}


def pair_id(run: dict) -> tuple:
    """Runs pair when they trained on the same sentences with the same initialisation."""
    init = lookup(run, "compute.init_seed")
    return run["partition"]["sha256"], init if init is not None else run["config"].get("seed")


def partition_label(run: dict) -> str:
    return str(run["config"].get("partition", run["partition"].get("partition")))


def mixed_settings(runs: list[dict], by: list[str], keys=("data.label_scheme", "dataset")) -> list[str]:
    """Settings that differ between runs but do not define rows: their rows are not comparable
    (e.g. a two-task loss switches to untyped labels, whose spans are easier to get right)."""
    notes = []
    for key in keys:
        values = sorted({str(lookup(r, key)) for r in runs})
        if key not in by and len(values) > 1:
            notes.append(
                f"note: runs differ in {key} ({', '.join(values)}) — add it to --by; "
                "rows with different values are not comparable"
            )
    return notes


def select_on_dev(runs: list[dict], key: str, by: list[str]) -> tuple[list[dict], list[str]]:
    """Among runs that differ only in ``key`` (same ``by`` row without ``key``, same partition
    and initialisation), keep the one with the best dev ``monitor`` value — e.g. SingleAux's
    auxiliary corpus chosen on main dev (MUNCHABLES §4.1), never on test. Runs without ``key``
    stay. Every partition of a row must offer the same ``key`` values (a choice among fewer, e.g.
    from a stopped sweep, is refused). Returns the kept runs and one line per choice."""
    groups: dict[tuple, list[dict]] = {}
    kept, notes = [], []
    for r in runs:
        if lookup(r, key) in (None, ""):
            kept.append(r)
            continue
        ident = tuple(str(lookup(r, k)) for k in by if k != key) + (partition_label(r), str(pair_id(r)[1]))
        groups.setdefault(ident, []).append(r)
    offered: dict[tuple, dict[frozenset, list[str]]] = {}
    for ident, rs in groups.items():
        offered.setdefault(ident[:-2], {}).setdefault(frozenset(str(lookup(r, key)) for r in rs), []).append(ident[-2])
    for row, choices in offered.items():
        if len(choices) > 1:
            shown = "; ".join(
                f"partition{'s' * (len(ps) > 1)} {', '.join(ps)}: {len(c)} values" for c, ps in choices.items()
            )
            raise SystemExit(
                f"--select-on-dev {key}: row {' '.join(row) or '(all)'} offers different {key} values on "
                f"different partitions ({shown}) — finish the sweep or leave the short partitions out"
            )
    for ident, rs in groups.items():
        best = max(rs, key=lambda r: (r.get("dev_monitor") is not None, r.get("dev_monitor") or 0.0))
        kept.append(best)
        if len(rs) > 1:
            scores = ", ".join(f"{lookup(r, key)} {r.get('dev_monitor') or float('nan'):.4f}" for r in rs)
            notes.append(
                f"{' '.join(ident[:-2])} partition {ident[-2]}: {key}={lookup(best, key)} chosen on dev ({scores})"
            )
    return kept, notes


def choose_on_dev(runs: list[dict], key: str, by: list[str]) -> list[dict]:
    """A tuning grid's choice: per row of ``by`` (without ``key``), the ``key`` value with the
    highest mean best-dev ``monitor`` over the partitions that every value of the row ran on
    (tuning partitions; test is never read). Ties go to the first value in natural order."""
    rows: dict[tuple, dict] = {}
    for r in runs:
        value = lookup(r, key)
        if value in (None, "") or r.get("dev_monitor") is None:
            continue
        ident = tuple(str(lookup(r, k)) for k in by if k != key)
        rows.setdefault(ident, {}).setdefault(str(value), {})[partition_label(r)] = r["dev_monitor"]
    choices = []
    for ident in sorted(rows, key=sort_key):
        values = rows[ident]
        shared = sorted(set.intersection(*(set(v) for v in values.values())), key=lambda p: sort_key((p,)))
        if not shared:
            raise SystemExit(f"--choose {key}: the values of row {' '.join(ident)} share no partition")
        means = {
            v: sum(values[v][p] for p in shared) / len(shared) for v in sorted(values, key=lambda v: sort_key((v,)))
        }
        best = max(means, key=lambda v: means[v])
        choices.append({"row": ident, "key": key, "best": best, "means": means, "partitions": shared})
    return choices


def parse_baseline(baseline: str, by: list[str]) -> tuple[int, str]:
    key, _, value = baseline.partition("=")
    if key not in by or not value:
        raise SystemExit(f"--baseline {baseline!r}: give KEY=VALUE with KEY one of --by ({','.join(by)})")
    return by.index(key), value


def baseline_value(value: str, present: set[str]) -> str:
    """The row value the baseline names, written as on Hydra's command line: ``false``,
    ``null`` and ``1e-3`` name the rows ``False``, ``None`` and ``0.001``."""
    if value in present:
        return value
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        typed = OverridesParser.create().parse_override(f"k={value}").value()
    except Exception:  # noqa: BLE001 - not a Hydra value: keep the text
        return value
    for text in (str(typed), *shown([typed])):
        if text in present:
            return text
    return value

"""Per-run outputs: ``results.json`` (or ``failure.json``) and checkpoints, written atomically.

:class:`CellResult` is the schema of ``results.json``: the training side fills it
(``ner_lightning.cell.protocols``), the report reads its fields by dotted path
(``ner_lightning.report.runs``). A field added here is a column the report can show.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol, runtime_checkable

from ner_lightning.clock import PROCESS
from ner_lightning.resuming import resume_command


@dataclasses.dataclass(kw_only=True)
class CellResult:
    """One finished grid cell (``results.json``). Scores are seqeval span scores
    (``ner_lightning.metrics.span_scores``: micro, macro, per type, lenient)."""

    status: str  # "ok" (a failed or interrupted cell writes failure.json instead)
    cell: str  # its name in logs: "run", or "cell k/n" in a sweep
    overrides: list[str]  # the command-line overrides that made this cell
    config_sha256: str | None  # the cell's identity: resolved settings + input files (sweep.identity)
    device: dict | None  # where it ran (sweep.devices)
    resumed_from: str | None  # the last.ckpt an interrupted attempt left, if resumed
    finished: str  # ISO time
    grid: dict  # chosen groups and swept keys by flat name (results.grid_keys)
    config: dict  # the whole resolved config (what W&B shows; readers use the fields below)
    encoder: str  # model.name_or_path
    objective: str  # the objective family's class (loss._target_)
    token_loss: str | None  # its token loss's class, if it takes one (loss.token_loss._target_)
    partition: dict  # dataset, size, partition, seed, sha256 of the training sentences
    partition_file: str  # partition.json: the sentences themselves
    training_set: dict  # regime, label statistics before and after it, sha256
    dev: dict | None  # dev scores of the selected evaluation
    best_epoch: int | None
    best_batch: int | None  # training batches before the selected evaluation
    monitor: str  # the val/ metric that selected it
    dev_monitor: float | None  # its value (what a sweeper optimises; never a test score)
    test: dict | None  # test scores of the selected weights (None: evaluate_test=false)
    test_aux: dict | None  # each auxiliary corpus's test scores with its own head (multi-corpus)
    phases: list | None = None  # MUNCH-Stack's phases (callbacks.multi_corpus.AuxiliaryPhases)
    epochs: int
    global_steps: int
    # What the cell cost, to compare objectives at equal compute: OVA-AUC takes 3 optimiser
    # steps (and forward passes) per batch, compositional COMAUC-2T 2; resampling changes the
    # batches per epoch.
    compute: dict  # train_batches, optimizer_steps, train_forward_passes, init_seed, encoder_lr, head_lr
    checkpoint: str | None  # best.ckpt kept (keep_checkpoint=true)
    wall_time_s: float
    phase_s: dict  # setup, fit, test seconds
    throughput: dict = dataclasses.field(default_factory=dict)  # callbacks.monitoring.TokenThroughput.summary()
    precision: dict  # train, eval
    identity: dict | None = None  # sweep.identity.cell_identity: sha256 (= config_sha256), settings, inputs
    code: dict | None = None  # package version, git commit, uncommitted changes (sweep.identity.code_version)
    attempts: list | None = None  # each attempt of the cell: started, wall_time_s, resumed_from (cell.json)
    singleaux: dict | None = None  # SingleAux: the auxiliary chosen on dev and every candidate
    labels: dict | None = None  # entity types of each head: main and, multi-corpus, each auxiliary corpus
    predictions: dict | None = None  # split -> CoNLL file of the selected model's predictions (callbacks.predictions)
    export: str | None = None  # the exported model's folder (export=true; ner_lightning.export)
    lockstep: dict | None = None  # the lockstep group it trained in (hydra/launcher=lockstep; ner_lightning.lockstep)
    # wall-clock (Unix seconds) of this attempt: set-up began ("started"), results written ("ended")
    timeline: dict | None = None

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for optional in ("singleaux", "lockstep", "timeline"):
            if out[optional] is None:
                del out[optional]
        return out

    def write(self, path: str | os.PathLike) -> Path:
        return write_json_atomic(path, self.to_json())


def typed_fields(result: dict) -> dict:
    """A ``results.json`` record with the fields readers use (``encoder``, ``objective``,
    ``token_loss``); a record written before they existed gets them from its ``config``."""
    if "objective" in result or "config" not in result:
        return result
    loss = result["config"].get("loss") or {}
    return {
        **result,
        "encoder": (result["config"].get("model") or {}).get("name_or_path"),
        "objective": loss.get("_target_"),
        "token_loss": (loss.get("token_loss") or {}).get("_target_"),
    }


@runtime_checkable
class ResultSection(Protocol):
    """A part of the run (a callback) that contributes fields of :class:`CellResult` — token
    throughput, MUNCH-Stack's phases, the prediction files — declared by the part itself and
    collected by one loop (:func:`contributed_sections`)."""

    def result_section(self, out_dir: Path) -> dict[str, Any]:
        """``{CellResult field: value}``; paths relative to the cell's folder ``out_dir``."""


def contributed_sections(parts: list, out_dir: Path) -> dict[str, Any]:
    """The fields every :class:`ResultSection` among ``parts`` contributes (a field twice is an error)."""
    fields = {f.name for f in dataclasses.fields(CellResult)}
    out: dict[str, Any] = {}
    for part in parts:
        if not isinstance(part, ResultSection):
            continue
        for key, value in part.result_section(out_dir).items():
            if key not in fields or key in out:
                raise ValueError(
                    f"{type(part).__name__}.result_section: {key!r} is "
                    f"{'not a results.json field' if key not in fields else 'contributed twice'}"
                )
            out[key] = value
    return out


def assemble_result(measured: dict[str, Any], contributed: dict[str, Any]) -> CellResult:
    """A cell's :class:`CellResult` from what the run measured (``measured``: the module's record,
    the trainer's counters, the config) and every section its parts declare (``contributed``:
    :func:`contributed_sections`, all of them kept); a part may not declare a field the run fills."""
    clash = sorted(set(measured) & set(contributed))
    if clash:
        raise ValueError(
            f"results.json fields {clash} are filled by the run and also declared by a part "
            "(result_section): rename the part's section"
        )
    return CellResult(**measured, **contributed)


# Fields of results.json that hold a section of scores or records (read as ``test.micro.f1`` …)
# and those that hold one value; every other dotted key is read from the resolved config.
RESULT_SECTIONS = ("test", "test_aux", "dev", "training_set", "partition", "throughput", "compute", "grid")
RESULT_VALUES = ("best_epoch", "best_batch", "epochs", "global_steps", "wall_time_s", "dev_monitor")


def write_json_atomic(path: str | os.PathLike, obj) -> Path:
    """Write JSON to a temp file in the same folder, then rename: never a half-written file."""
    return write_atomic(path, lambda fh: fh.write(json.dumps(obj, indent=2, sort_keys=False, default=str).encode()))


def write_atomic(path: str | os.PathLike, write: Callable[[IO[bytes]], object], fsync: bool = True) -> Path:
    """Call ``write`` on a temp file in ``path``'s folder, then rename it to ``path``: a reader (or
    a rerun after a crash) sees the old file or the new one, never half of one. ``fsync=False``
    skips waiting for the disk (checkpoints of hundreds of MB, which ``run._loadable`` checks)."""
    with PROCESS.phase("writes"):
        return _write_atomic(Path(path), write, fsync)


def _write_atomic(path: Path, write: Callable[[IO[bytes]], object], fsync: bool) -> Path:
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
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if _disk_full(err, path.parent):
            raise OSError(
                errno.ENOSPC,
                f"no space left on device at {path.parent} (writing {path.name}): free "
                "space there — e.g. the checkpoints of old or failed cells, multirun/**/checkpoints — "
                f"then resume with: {resume_command()}",
            ) from err
        raise
    return path


def _disk_full(err: BaseException, folder: Path) -> bool:
    """ENOSPC, or an error of a C++ writer (torch.save's "unexpected pos") on a nearly full disk."""
    if isinstance(err, OSError) and err.errno == errno.ENOSPC:
        return True
    try:
        return isinstance(err, RuntimeError) and shutil.disk_usage(folder).free < (64 << 20)
    except OSError:
        return False


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def best_epoch(history: list[dict], monitor: str, mode: str = "max") -> dict | None:
    """The evaluation ModelCheckpoint keeps with ``save_top_k=1``: the first, then each strictly
    better ``monitor`` (highest for ``mode="max"``, lowest for ``"min"``; a NaN ranks worst)."""
    if mode not in ("max", "min"):
        raise ValueError(f"mode={mode!r}: max or min")
    worst = float("-inf") if mode == "max" else float("inf")
    best, best_value = None, worst
    for row in history:
        value = float(row["metrics"][monitor])
        value = worst if value != value else value
        if best is None or (value > best_value if mode == "max" else value < best_value):
            best, best_value = row, value
    return best


# Flat names of what a grid varies -> their dotted path in the resolved config. Logged as
# top-level W&B config values (group-by and parallel coordinates without JSON paths) and
# written to results.json as "grid".
GRID_PATHS = {
    "size": "size",
    "partition": "partition",
    "seed": "seed",
    "init_seed": "init_seed",
    "monitor": "monitor",
    "head_lr": "loss.head_lr",
    "lr": "optimizer.lr",
    "max_epochs": "trainer.max_epochs",
    "label_scheme": "data.label_scheme",
    "entity_types": "data.entity_types",
    "entity_share": "data.imbalance.entity_share",
    "resample": "data.resample",
    "resample_variant": "data.resample_variant",
    "undersample": "data.undersample",
    "augment": "data.augment.methods",
    "dev_size": "data.dev_size",
    "aux": "aux",
    "aux_size": "aux_size",
    "aux_order": "multitask.aux_order",
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

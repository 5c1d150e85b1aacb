"""Hydra entry point: ``python -m ner_lightning.run [-m] key=value ...``.

Composes the config, records the cell in its sweep (``cell.json``: identity, device, attempts),
fills in what the config leaves to the run (``config.complete_config``: the data the objective
needs, the auxiliary corpora's dataset nodes) and
runs the cell's protocol (``ner_lightning.cell.protocols``). A failing run writes ``failure.json``
(traceback included) and, in a multirun, the other cells still run; Hydra reports the failure
when the sweep ends.
"""

from __future__ import annotations

import faulthandler
import gc
import logging
import os
import shutil
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

import ner_lightning  # noqa: F401  (registers the config resolvers)
from ner_lightning.config import CONFIG_DIR
from ner_lightning.sweep import cells, folder_lock
from ner_lightning.sweep.preflight import Refused, add_user_paths, check_cell
from ner_lightning.sweep.signals import interrupts_raised

log = logging.getLogger("ner_lightning")


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def main(cfg: DictConfig) -> float | None:
    """Runs one cell; returns its best dev ``monitor`` value — never a test score — for sweepers
    that optimise the return value.

    The cell holds its folder (a second process starting it is refused), records itself
    (``cell.json``: identity, device, host, pid, attempts) and drops what an earlier attempt left;
    a ``last.ckpt`` of the same identity is resumed. Ctrl-C / SIGTERM exit 130 / 143. A failure writes
    ``failure.json`` and keeps the checkpoints for a rerun; a success writes ``results.json``
    and drops them."""
    hc = HydraConfig.get()
    add_user_paths(hc.runtime.config_sources)
    if hc.mode == RunMode.RUN:  # a sweep's cells were checked by its sweeper before any started
        refused_at_once(cfg, Path(hc.runtime.output_dir))
    # Lightning and the models load only now: a refusal above takes seconds
    from ner_lightning.cell import protocols
    from ner_lightning.cell.job import begin_cell, ended_job, open_job, recorded_failure

    out_dir, progress, t0 = open_job(cfg)
    # FolderInUse (another process's folder) is left alone; failure.json is written while the folder is ours
    with (
        ended_job(),
        interrupts_raised(),
        folder_lock.exclusive(out_dir, "cell"),
        recorded_failure(out_dir, progress, t0),
    ):
        cell, resume = begin_cell(cfg, out_dir, progress)
        return protocols.run_protocol(cfg, cell, resume)


def refused_at_once(cfg: DictConfig, out_dir: Path) -> None:
    """A single run whose input is wrong (``preflight``) or whose folder another process holds
    stops in one line (exit 1), before anything slow, and leaves no folder behind that it made."""
    fresh = not (out_dir / cells.CELL).exists()
    try:
        with folder_lock.exclusive(out_dir, "cell"):
            check_cell(cfg)
        return
    except folder_lock.FolderInUse as err:
        message, fresh = str(err), False
    except Refused as err:
        message = str(err)
    if fresh:
        remove_new_folder(out_dir)
    raise SystemExit(f"ner-lightning: refused: {message}") from None


def remove_new_folder(out_dir: Path) -> None:
    """The run folder Hydra made for a refused run (its ``.hydra``, ``train.log`` and lock only),
    and the time and date folders above it when they hold nothing else."""
    if any(p.name not in (".hydra", "train.log", folder_lock.LOCK) for p in out_dir.iterdir()):
        return
    logging.shutdown()  # train.log's handler lets go of the file
    shutil.rmtree(out_dir, ignore_errors=True)
    for parent in list(out_dir.parents)[:2]:
        try:
            parent.rmdir()  # only when empty
        except OSError:
            break


def cli() -> None:
    """The ``ner-lightning`` command (``python -m ner_lightning.run``); ``ner-lightning study FILE``
    runs a study (``ner_lightning.study``). A hard crash (abort, segfault) prints every thread's
    Python stack to stderr first, so the cell's log says where."""
    if sys.argv[1:2] == ["study"]:  # `ner-lightning study CLAIMS.yaml`: ner_lightning/study/runner.py
        from ner_lightning.study.runner import main as study

        return study(sys.argv[2:])
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    faulthandler.enable()
    try:
        main()
    finally:
        gc.freeze()  # the interpreter's collections at exit would walk every object left (~1.3 s with torch)


if __name__ == "__main__":
    cli()

"""The exact command that resumes what this process runs. By default every launch makes a new
time-stamped folder, so "the same command" would start over: a sweep resumes with
``python -m ner_lightning.sweep resume <sweep folder>`` (its manifest holds the command line and
the folder it ran in), a single run with its command plus ``hydra.run.dir=<its folder>``."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

SWEEP_DIR, RUN_DIR = "hydra.sweep.dir", "hydra.run.dir"


def with_folder(arguments: list[str], key: str, folder: str | Path) -> list[str]:
    """``arguments`` with ``key=<folder>`` (absolute) in place of any earlier ``key=``."""
    kept = [a for a in arguments if not a.lstrip("+").startswith(f"{key}=")]
    return [*kept, f"{key}={Path(folder).resolve()}"]


def sweep_resume_command(sweep_dir: str | Path) -> str:
    return shlex.join(["python", "-m", "ner_lightning.sweep", "resume", str(Path(sweep_dir).resolve())])


def run_resume_command(run_dir: str | Path, arguments: list[str] | None = None) -> str:
    """A single run's command line (``arguments``, by default this process's) in ``run_dir``."""
    args = sys.argv[1:] if arguments is None else arguments
    return shlex.join(["python", "-m", "ner_lightning.run", *with_folder(args, RUN_DIR, run_dir)])


def resume_command() -> str:
    """The command that resumes this process's sweep or run (inside Hydra's runtime); outside it,
    a description."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    try:
        hc = HydraConfig.get()
    except ValueError:
        return "the same command with its output folder given (hydra.run.dir= or hydra.sweep.dir=)"
    if hc.mode == RunMode.MULTIRUN:
        return sweep_resume_command(hc.sweep.dir)
    return run_resume_command(hc.run.dir)

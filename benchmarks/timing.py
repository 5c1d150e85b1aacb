"""What the benchmarks here share: a timed child process, and a cell's fit read from its
``results.json``. Compare figures only within one invocation: the VMs we run on vary up to 2x in
speed from one day to the next (``bench_ce.py`` interleaves its contenders in rounds)."""
from __future__ import annotations

import contextlib
import json
import subprocess
import time
from pathlib import Path
from typing import Iterator, Sequence


def timed_process(cmd: Sequence[str], cwd: Path | None = None, log: Path | None = None, check: bool = True,
                  **popen) -> tuple[int, float]:
    """Run ``cmd`` to its end (output to ``log``, or dropped); its exit code and wall seconds."""
    t0 = time.perf_counter()
    with open(log, "w") if log else open("/dev/null", "w") as out:
        rc = subprocess.call(list(cmd), cwd=cwd, stdout=out, stderr=subprocess.STDOUT, **popen)
    seconds = time.perf_counter() - t0
    if check and rc != 0:
        raise subprocess.CalledProcessError(rc, list(cmd))
    return rc, seconds


def fit_seconds(phase_s: dict) -> float:
    """A cell's fit (training and its dev evaluations, with the checkpoint writes between them) from
    its ``results.json`` ``phase_s``: ``train + dev + writes`` of the process clock, or the ``fit``
    of a results.json written before that clock."""
    if "fit" in phase_s:
        return phase_s["fit"]
    return phase_s["train"] + phase_s["dev"] + phase_s.get("writes", 0.0)


@contextlib.contextmanager
def checkouts(repo: Path, baseline: str | None, folder: Path) -> Iterator[dict[str, Path]]:
    """``{name: folder}`` of ``baseline`` (checked out with ``git worktree`` into ``folder``, removed
    afterwards), if given, and of ``repo`` as it is (``this checkout (<commit>)``)."""
    git = ["git", "-C", str(repo)]
    rev = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    if baseline is None:
        yield {f"this checkout ({rev})": repo}
        return
    subprocess.run([*git, "worktree", "add", "--detach", str(folder), baseline], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield {f"baseline {baseline}": folder, f"this checkout ({rev})": repo}
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(folder)], check=False)


def write_raw(out: Path, record: dict) -> Path:
    """A benchmark's raw file: ``record`` as JSON, with the commit it ran at first."""
    commit = subprocess.run(["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"commit": commit, **record}, indent=1))
    return out

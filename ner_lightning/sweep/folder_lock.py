"""One launch per folder: a sweep folder or a cell folder is held by an ``flock`` on its ``.lock``
while a launch runs there (:func:`exclusive`); a second launch is refused at once naming the
holder, and :func:`holder` tells whether one runs now (``sweep status``). A sweep run under its
lock stops with exit code 130 / 143 on Ctrl-C / SIGTERM and says how to resume
(:func:`run_exclusively`)."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ner_lightning.resuming import sweep_resume_command
from ner_lightning.sweep.cells import now
from ner_lightning.sweep.signals import exit_code, interrupts_raised

LOCK = ".lock"
log = logging.getLogger("ner_lightning")


class FolderInUse(RuntimeError):
    """Another process holds a sweep folder or a cell folder."""


@contextlib.contextmanager
def exclusive(folder: Path, what: str) -> Iterator[None]:
    """Hold ``folder/.lock`` (an ``flock``) while the block runs: a second launch into a sweep
    folder, or a second process starting the same cell, is refused at once with who holds it.
    The kernel releases the lock when its process ends, however it ends: a dead holder never
    blocks a rerun."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 4096).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise FolderInUse(
            f"{folder} is in use by {holder}: a {what} runs there now. Wait for it to end "
            "(python -m ner_lightning.sweep status shows progress) or use another folder"
        ) from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {now()}".encode())
        yield
    finally:
        os.close(fd)


def holder(folder: Path) -> str | None:
    """Who holds ``folder``'s lock now (a launch running there), or None."""
    path = folder / LOCK
    if not path.is_file():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.read(fd, 4096).decode(errors="replace").strip() or "another process"
    finally:
        os.close(fd)  # closing releases a lock taken here
    return None


def run_exclusively(sweep_dir: Path, sweep: Callable[[], Any]) -> Any:
    """One launch per sweep folder (a second is refused while the first runs); Ctrl-C / SIGTERM
    stop the sweep with exit code 130 / 143."""
    try:
        with interrupts_raised(), exclusive(sweep_dir, "sweep"):
            return sweep()
    except BaseException as err:
        code = exit_code(err)
        if code is None:
            raise
        log.warning("sweep %s stopped; resume with: %s", sweep_dir, sweep_resume_command(sweep_dir))
        if isinstance(err, SystemExit) and err.code == code:
            raise
        raise SystemExit(code) from None

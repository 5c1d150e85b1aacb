"""Where a process's seconds go: one clock per process, charging every moment to the phase open
at that moment (the innermost one), so that a cell's ``results.json`` accounts for its whole
process and not only for its fit.

The clock starts at the process's start (read from ``/proc``; elsewhere: when this module was
imported, the first thing the package does), in the phase ``startup`` (interpreter, imports,
config composition, sweep planning). A cell takes (:meth:`PhaseClock.take`) what was charged since
the previous cell took its share, so in a sweep that runs several cells in one process every
second is charged to exactly one cell: the first pays the imports, a later one the launcher's
work between the two. Phases a cell opens: ``precision`` (choosing or measuring it), ``data``
(reading, partitioning, tokenisation), ``model`` (encoder load, family, Trainer), ``train``,
``dev`` (evaluations during the fit), ``test``, ``writes`` (checkpoints, predictions, partition
and results files, loggers, export). Time with no phase open is ``unaccounted``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

PHASES = ("startup", "precision", "data", "model", "train", "dev", "test", "writes")


def seconds_since_process_start() -> float | None:
    """Seconds since this process started (Linux: its start time in clock ticks after boot, in
    ``/proc/self/stat``, against the boot-time clock); None where that cannot be read."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of proc(5): starttime
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, IndexError, ValueError, AttributeError):
        return None


class PhaseClock:
    """Exclusive time per phase: a phase opened inside another stops the outer one's clock."""

    def __init__(self, start: float, first: str | None = None):
        """``start``: a ``time.perf_counter()`` reading; ``first``: the phase open from then on."""
        self.start = start
        self._since = start
        self._stack: list[str] = [first] if first else []
        self._seconds: dict[str, float] = {}
        self._unaccounted = 0.0

    def _charge(self, now: float) -> None:
        spent = now - self._since
        if self._stack:
            self._seconds[self._stack[-1]] = self._seconds.get(self._stack[-1], 0.0) + spent
        else:
            self._unaccounted += spent
        self._since = now

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Charge the time inside the block to ``name`` (and not to the phase around it)."""
        self.open(name)
        try:
            yield
        finally:
            self.close(name)

    def open(self, name: str) -> None:
        self._charge(time.perf_counter())
        self._stack.append(name)

    def close(self, name: str) -> None:
        """Close ``name`` (the innermost open phase; a phase left open by an error inside it is
        closed with it); a phase that is not open is left alone."""
        self._charge(time.perf_counter())
        if name in self._stack:
            while self._stack.pop() != name:
                pass

    def close_all(self) -> None:
        """Close every open phase (the end of ``startup``: the cell's own phases follow)."""
        self._charge(time.perf_counter())
        self._stack.clear()

    def take(self) -> dict:
        """What was charged since the last take (or the start): ``wall_s``, seconds per phase and
        ``unaccounted``; the clock then counts afresh (open phases stay open)."""
        now = time.perf_counter()
        self._charge(now)
        phases = {
            name: round(self._seconds.get(name, 0.0), 3)
            for name in (*PHASES, *sorted(set(self._seconds) - set(PHASES)))
        }
        out = {"wall_s": round(now - self.start, 3), "phases": phases, "unaccounted": round(self._unaccounted, 3)}
        self.start, self._seconds, self._unaccounted = now, {}, 0.0
        return out


def _process_clock() -> PhaseClock:
    since = seconds_since_process_start()
    return PhaseClock(time.perf_counter() - (since or 0.0), first="startup")


PROCESS = _process_clock()  # the clock of this process; its start is the process's

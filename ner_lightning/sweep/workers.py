"""The worker processes of ``hydra/launcher=parallel`` and ``lockstep``: each starts once and runs
task after task — a task is one cell (``parallel``) or a lockstep group of cells (``lockstep``).

A worker is spawned with the path of a file holding what every task of the launch shares (the
launcher's :class:`TaskRunner`, which holds Hydra's context and the sweep's config, and Hydra's
singletons: written once, read once per worker) and then receives only a task's cells. (Handed to
``Process`` as an argument, the payload would go down the spawn pipe, whose write blocks until the
child has imported the main module: workers would start one after another, ~18 s apart on a GPU
machine.) So imports, the device slot (``sweep/devices.py``), the measured precision and the
corpora it has read stay with the worker for its life: a later cell starts in well under a second.
No worker is ended because its memory grew (loky, joblib's executor, ends a worker whose memory
grew by 300 MB during a task, which a CUDA context always does, and the next cell pays a fresh
start-up). A worker that dies (a segfault, an out-of-memory kill, ``os._exit``) fails the cells of
the task it was running, with its exit code, and is replaced; the other tasks go on, and a rerun
of the sweep resumes the failed cells as usual. Ctrl-C or SIGTERM reach the workers too: their
cells write ``failure.json`` (interrupted) and the launch ends with the cells' exit code; a
launcher killed outright takes its workers with it (Linux: they get SIGTERM when it dies). Each
worker starts with its share of the cores as its thread count (``OMP_NUM_THREADS`` and its kin,
unless set): n workers that each start 1 thread per core would contend for every core (what loky
does too).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import shutil
import signal
import tempfile
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Protocol, cast

import cloudpickle
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, setup_globals
from omegaconf import DictConfig

log = logging.getLogger("ner_lightning")

STOP = None  # what a worker receives when the launch has no cell left for it
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class WorkerDied(RuntimeError):
    """The worker process running a task died before the task returned."""


@dataclass
class Job:
    """A cell of the launch: its number, its overrides and, where the launcher composed it
    already, its sweep config (else the worker composes it)."""

    index: int
    overrides: list[str]
    config: DictConfig | None = None

    def composed(self) -> DictConfig:
        """Its sweep config, for a launcher that composed it (to plan by it) before running it."""
        if self.config is None:
            raise ValueError(f"cell {self.index} ({' '.join(self.overrides)}) has no composed config")
        return self.config


class TaskRunner(Protocol):
    """What a worker runs: a task's cells as Hydra jobs, one ``JobReturn`` per cell in order."""

    def __call__(self, task: Sequence[Job]) -> list[JobReturn]: ...


def serve(conn: Connection, shared_file: str) -> None:
    """A worker's life: unpack the launch's :class:`TaskRunner` and Hydra's singletons, then run
    each task received and send back its cells' returns; a task interrupted by a signal sends its
    exit code and ends the worker."""
    _end_with_parent()
    runner, singleton_state = cloudpickle.loads(Path(shared_file).read_bytes())
    setup_globals()
    Singleton.set_state(singleton_state)
    while (task := _receive_job(conn)) is not STOP:
        try:
            returns = runner(task)
        except SystemExit as stop:  # an interrupted cell (run.main: exit 130 / 143)
            conn.send_bytes(cloudpickle.dumps(("exit", stop.code)))
            return
        except Exception as err:  # noqa: BLE001 — Hydra could not set the task up: its cells fail alone
            returns = [
                JobReturn(overrides=list(job.overrides), status=JobStatus.FAILED, _return_value=err) for job in task
            ]
        conn.send_bytes(cloudpickle.dumps(("done", returns)))


def _receive_job(conn: Connection):
    """The next job, or STOP when the launcher has none left or is gone."""
    try:
        return conn.recv()
    except (EOFError, OSError):
        return STOP


def _end_with_parent() -> None:
    """On Linux, SIGTERM this worker when the launching process dies (killed with SIGKILL, say):
    its cell then records the interruption, and no orphan keeps the device slot."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@dataclass
class Worker:
    process: mp.process.BaseProcess
    conn: Connection
    job: int | None = None  # position of the task it runs


class WorkerPool:
    """``n`` long-lived workers serving the tasks of one launch with ``runner`` (module docstring)."""

    def __init__(self, n: int, runner: TaskRunner) -> None:
        self.n = n
        self.shared = cloudpickle.dumps((runner, Singleton.get_state()))
        self.shared_file: Path | None = None
        self.context = mp.get_context("spawn")  # CUDA cannot be used in a forked child
        self.started = 0

    def _start(self) -> Worker:
        parent, child = self.context.Pipe()
        process = self.context.Process(
            target=serve, args=(child, str(self.shared_file)), daemon=True, name=f"ner_lightning-worker-{self.started}"
        )
        with _thread_share(max(1, (os.cpu_count() or 1) // self.n)):
            process.start()
        child.close()
        self.started += 1
        return Worker(process, parent)

    def run(
        self, jobs: Sequence[Sequence[Job]], on_return: Callable[[JobReturn], None] = lambda ret: None
    ) -> list[list[JobReturn]]:
        """Each task (its cells) run on a worker; its cells' returns, in the order of ``jobs``;
        ``on_return`` sees each cell's return as its task ends."""
        pending = deque(range(len(jobs)))
        returns: list[list[JobReturn]] = [[] for _ in jobs]
        folder = Path(tempfile.mkdtemp(prefix="ner_lightning_workers_"))
        self.shared_file = folder / "shared.pkl"
        self.shared_file.write_bytes(self.shared)
        workers: list[Worker] = []
        exit_code: int | None = None
        try:
            workers = [self._start() for _ in range(min(self.n, len(jobs)))]
            while pending or any(w.job is not None for w in workers):
                for w in workers:
                    if w.job is None and pending and exit_code is None:
                        w.job = pending.popleft()
                        w.conn.send(jobs[w.job])
                busy = [(w, w.job) for w in workers if w.job is not None]
                if not busy:
                    break
                wait([w.conn for w, _ in busy] + [w.process.sentinel for w, _ in busy])
                for w, pos in busy:
                    message = self._receive(w)
                    if message is None:
                        continue
                    kind, value = message
                    w.job = None
                    if kind == "done":
                        returns[pos] = cast(list[JobReturn], value)  # the task's returns (serve)
                    else:  # interrupted (its exit code), or its worker died (why)
                        exit_code = cast(int, value) if kind == "exit" else exit_code
                        returns[pos] = [
                            JobReturn(
                                overrides=list(job.overrides),
                                status=JobStatus.FAILED,
                                _return_value=SystemExit(value) if kind == "exit" else value,
                            )
                            for job in jobs[pos]
                        ]
                    for ret in returns[pos]:
                        on_return(ret)
                    if kind == "died":
                        workers.remove(w)
                        if pending and exit_code is None:
                            workers.append(self._start())
                            log.info(
                                "worker pid %d takes the place of worker pid %d", workers[-1].process.pid, w.process.pid
                            )
        except KeyboardInterrupt:  # the workers got the same Ctrl-C: their cells record it
            exit_code = 130
        finally:
            self._stop(workers)
            shutil.rmtree(folder, ignore_errors=True)
        if exit_code is not None:
            raise SystemExit(exit_code)
        return returns

    @staticmethod
    def _receive(w: Worker) -> tuple[str, object] | None:
        """The message a busy worker sent, ``("died", JobReturn)`` if it ended without one, or
        None while it still works."""
        if w.conn.poll():
            try:
                return cloudpickle.loads(w.conn.recv_bytes())
            except (EOFError, OSError):
                pass
        elif w.process.is_alive():
            return None
        w.process.join(5)
        code = w.process.exitcode
        why = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
        log.error(
            "the worker (pid %d) running task #%d died (%s): its cells failed, the others go on; the sweep's "
            "end says how to resume them",
            w.process.pid,
            w.job,
            why,
        )
        return "died", WorkerDied(f"the worker process died ({why}) while running this cell's task")

    @staticmethod
    def _stop(workers: list[Worker]) -> None:
        for w in workers:
            try:
                if w.process.is_alive() and w.job is None:
                    w.conn.send(STOP)
            except (BrokenPipeError, OSError):
                pass
        for w in workers:
            w.process.join(60 if w.job is None else 120)
            if w.process.is_alive():
                w.process.terminate()
                w.process.join(10)


@contextlib.contextmanager
def _thread_share(threads: int) -> Iterator[None]:
    """The environment a spawned worker inherits: ``threads`` for each thread-count variable the
    user has not set."""
    added = [name for name in THREAD_VARIABLES if name not in os.environ]
    os.environ.update({name: str(threads) for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)

"""A callback that ends its process at once (``os._exit``) in the cells of partition 1: the crash
of a parallel launcher's worker, for tests/test_sweep.py (kept apart so a worker imports only this)."""
from __future__ import annotations

import os

import pytorch_lightning as pl
from hydra.core.hydra_config import HydraConfig

from ner_lightning.callbacks.predictions import PredictionWriter


class ExitProcess(pl.Callback):
    """Ends the process with exit code 9 when built for a cell whose overrides hold ``partition=1``."""

    def __init__(self):
        if "partition=1" in HydraConfig.get().overrides.task:
            os._exit(9)


class ExitOnceInDev(PredictionWriter):
    """A prediction writer (``callbacks.predictions``, a callback a lockstep group runs) that ends
    its process with exit code 9 at the second dev file a ``loss=focal`` cell writes (dev files are
    written with each of the group's ``last.ckpt``: mid-fit, after the first one reached the disk) —
    once: it leaves ``$CRASH_FLAG`` behind, and a rerun runs on."""

    def __init__(self, dirpath: str):
        super().__init__(dirpath)
        self.crash = "loss=focal" in HydraConfig.get().overrides.task and not os.path.exists(os.environ["CRASH_FLAG"])
        self.dev_files = 0

    def write(self, dm, predicted, split) -> None:
        self.dev_files += split == "dev"
        if self.crash and self.dev_files == 2:
            open(os.environ["CRASH_FLAG"], "w").close()
            os._exit(9)
        super().write(dm, predicted, split)


class FailForPartition1(pl.Callback):
    """Raises (an ordinary failure, not a crash) when built for a cell of ``partition=1``."""

    def __init__(self):
        if "partition=1" in HydraConfig.get().overrides.task:
            raise ValueError("this cell fails on purpose (tests/worker_crash.py)")

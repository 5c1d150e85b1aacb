"""A callback that ends its process at once (``os._exit``) in the cells of partition 1: the crash
of a parallel launcher's worker, for tests/test_sweep.py (kept apart so a worker imports only this)."""
from __future__ import annotations

import os

import pytorch_lightning as pl
from hydra.core.hydra_config import HydraConfig


class ExitProcess(pl.Callback):
    """Ends the process with exit code 9 when built for a cell whose overrides hold ``partition=1``."""

    def __init__(self):
        if "partition=1" in HydraConfig.get().overrides.task:
            os._exit(9)

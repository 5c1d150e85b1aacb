"""A worker process that holds a device slot, for the slot tests in test_launching.py.

Kept apart from the test module so a spawned worker imports only ``ner_lightning.sweep.devices``,
not torch and the test module's imports."""
from __future__ import annotations

import os
import time

from ner_lightning.sweep import devices


def hold_slot(lock_dir, n, queue, release_file):
    """Claim a slot twice (a reused loky worker keeps its slot), report (pid, slot, again), then
    hold it, as a live worker does, until ``release_file`` exists (at most 600 s: a test gone wrong)."""
    slot = devices.claim_slot(lock_dir, n)
    again = devices.claim_slot(lock_dir, n)
    queue.put((os.getpid(), slot, again))
    deadline = time.monotonic() + 600
    while not os.path.exists(release_file) and time.monotonic() < deadline:
        time.sleep(0.05)

"""``hydra/launcher=local``: Hydra's basic launcher, one cell at a time, with each cell isolated —
an error while Hydra sets a cell up (before our code runs: its folder or log file cannot be
written) fails that cell, not the sweep."""
from __future__ import annotations

import logging
from typing import Sequence

from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra.core.utils import JobReturn, JobStatus

log = logging.getLogger("ner_lightning")


class LocalLauncher(BasicLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        returns = []
        for i, overrides in enumerate(job_overrides):
            try:
                returns += super().launch([overrides], initial_job_idx=initial_job_idx + i)
            except Exception as err:  # noqa: BLE001 — any set-up error fails this cell only
                log.error("cell %s could not start: %s: %s", " ".join(overrides), type(err).__name__, err)
                returns.append(JobReturn(overrides=list(overrides), status=JobStatus.FAILED, _return_value=err))
        return returns

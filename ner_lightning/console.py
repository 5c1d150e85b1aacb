"""What the console shows (``runtime.quiet``): our own lines — the sweep's plan and progress, a
few lines per cell — plus progress bars and real warnings; not the libraries' start-up chatter.

Quiet hides, at their source: Lightning's info lines (seed, accelerator, tips, "Restoring
states…"), warnings known to be harmless here (listed below with why), Hugging Face's load
reports and progress bars, and W&B's banners (``WANDB_SILENT``; set ``WANDB_SILENT=false`` to
see them; ``wandb_logging.WandbLogger`` leaves out the one setting W&B warns about on every run).
Everything else, and every log line in each cell's ``train.log``, stays.
"""

from __future__ import annotations

import logging
import os
import warnings

# (message regex, why it is harmless here)
HARMLESS_WARNINGS = (
    (r".*isinstance\(treespec, LeafSpec\)", "a deprecation inside Lightning's own _pytree helper (Lightning's to fix)"),
    (r"Precision .* is not supported by the model summary", "only the model summary's size estimate"),
    (
        r".*does not have many workers which may be a bottleneck",
        "evaluation batches are built once and held in memory (data.num_workers)",
    ),
    (
        r".*The number of training batches \(\d+\) is smaller than the logging interval",
        "tiny training sets have fewer batches than log_every_n_steps",
    ),
)
CHATTY_LOGGERS = (
    "pytorch_lightning.utilities.rank_zero",
    "lightning.pytorch.utilities.rank_zero",
    "lightning_fabric.utilities.seed",
    "lightning_fabric.utilities.rank_zero",
    "pytorch_lightning.accelerators.cuda",
    "lightning.pytorch.accelerators.cuda",
)


def quiet(enabled: bool = True) -> None:
    """Apply the quiet console (idempotent; each cell's process calls it)."""
    if not enabled:
        return
    for message, _why in HARMLESS_WARNINGS:
        warnings.filterwarnings("ignore", message=message)
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    os.environ.setdefault("WANDB_SILENT", "true")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()

"""A lockstep group's cells before and after its fit: who each is (:class:`Member`), which configs
can train in a group at all (:func:`config_refusal`) and which set-up cells can train together
(:func:`setup_refusal`)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig

from ner_lightning.cell.protocols import protocol_of
from ner_lightning.cell.steps import Cell, CellRun

# The callbacks a group runs for each of its cells (``lockstep.cell_fit``); a cell with another
# callback runs alone.
GROUP_CALLBACKS = (
    "early_stopping",
    "model_checkpoint",
    "last_checkpoint",
    "predictions",
    "eval_precision",
    "token_throughput",
)


@dataclass
class Member:
    """One cell of a lockstep group: its config, who it is, what its set-up built, and what the
    group's fit left for it (``position``: epochs, optimiser steps; ``checkpoint``: its selected
    weights; ``tested``: the group's stacked test scored them; ``error``: why it stopped without a
    result)."""

    cfg: DictConfig
    cell: Cell
    run: CellRun
    resume: Path | None = None  # a last.ckpt of this cell alone: it then fits alone, from there
    hold: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)  # its folder's lock
    started: float = 0.0  # time.time() of its set-up
    position: tuple[int, int] = (0, 0)
    checkpoint: str | None = None
    tested: bool = False
    error: BaseException | None = None


def config_refusal(cfg: DictConfig) -> str | None:
    """Why a cell of this config cannot train in a lockstep group, read from its config alone
    (the family's own refusal, ``lockstep_refusal()``, is asked once it is built)."""
    precision = str(cfg.trainer.precision)
    if precision == "16-mixed":
        return (
            "16-mixed scales the loss with one GradScaler per fit, and a group's cells would share one "
            "(a skipped step would skip every cell's): bf16-mixed or 32-true group"
        )
    if protocol_of(cfg) != "single":
        return f"a {protocol_of(cfg)} cell runs several fits"
    if cfg.multitask.get("scheme") not in (None, "singletask"):
        return f"multitask={cfg.multitask.scheme} trains on several corpora"
    if int(cfg.trainer.get("max_epochs") or -1) < 1 or cfg.trainer.get("max_steps") not in (None, -1):
        return "lockstep trains whole epochs (trainer.max_epochs >= 1, no max_steps)"
    if int(cfg.trainer.get("accumulate_grad_batches") or 1) != 1:
        return "a group steps every batch (trainer.accumulate_grad_batches=1)"
    others = sorted(k for k, v in (cfg.get("callbacks") or {}).items() if v is not None and k not in GROUP_CALLBACKS)
    if others:
        return f"callbacks.{others[0]}: a group runs only {', '.join(GROUP_CALLBACKS)} for its cells"
    return checkpoint_refusal(cfg)


# What a group cannot honour of a cell's ModelCheckpoint, which it drives through its own hooks at
# the cell's dev evaluations and epoch ends (lockstep.cell_fit): save_top_k, every_n_epochs,
# save_on_train_epoch_end and filename templates act as alone; these settings run the cell alone.
AT_EVALUATIONS = "a group drives a cell's checkpoint at its dev evaluations and epoch ends only"
CHECKPOINT_SETTINGS = {
    "save_last": (lambda v: not v, "a group's resume checkpoint is its own last.ckpt"),
    "save_weights_only": (lambda v: v is None or bool(v), "a group writes each cell's weights only"),
    "every_n_train_steps": (lambda v: not v, AT_EVALUATIONS),
    "train_time_interval": (lambda v: v is None, AT_EVALUATIONS),
}


def checkpoint_refusal(cfg: DictConfig) -> str | None:
    """The first setting of the cell's ``callbacks.model_checkpoint`` or W&B logger that a group
    cannot honour for it, by name (None: it honours them all)."""
    checkpoint = (cfg.get("callbacks") or {}).get("model_checkpoint") or {}
    for key, (honoured, why) in CHECKPOINT_SETTINGS.items():
        if key in checkpoint and not honoured(checkpoint[key]):
            return f"callbacks.model_checkpoint.{key}={checkpoint[key]}: {why}"
    if ((cfg.get("logger") or {}).get("wandb") or {}).get("log_model"):
        return "logger.wandb.log_model: a group's cells do not upload their checkpoints to W&B"
    return None


def setup_refusal(members: list[Member], cpu_max_hidden: int) -> str | None:
    """Why these cells, set up, train alone (None: they form a group): their family's reason,
    different batches per epoch (a regime that resamples each partition differently), different
    dev or test sets, or a CPU where their encoder is too large for stacking to pay
    (``hydra.launcher.cpu_max_hidden``)."""
    member, module = members[0], members[0].run.module
    why = module.lockstep_refusal()
    batches = sorted({len(m.run.datamodule.train_dataloader()) for m in members})
    if why is None and len(batches) > 1:
        why = f"their partitions make different numbers of batches per epoch ({batches})"
    for split in ("dev", "test"):
        first = member.run.datamodule.sentences_of(split)
        if why is None and any(m.run.datamodule.sentences_of(split) != first for m in members[1:]):
            why = f"their {split} sets differ (a group reads one {split} set for every cell)"
    hidden = module.encoder.hidden_size
    if why is None and member.run.trainer.strategy.root_device.type == "cpu" and hidden > cpu_max_hidden:
        why = (
            f"on a CPU an encoder of hidden size {hidden} trains slower stacked than alone (compute-bound; "
            f"docs/benchmarks.md): raise hydra.launcher.cpu_max_hidden above it to group anyway"
        )
    return why

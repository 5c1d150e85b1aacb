"""A lockstep group's fit: the cells of a grid that differ only in partition (and initialisation
seed) — set up one by one as cells alone are (``cell.setup_cell``) — trained as one stacked model
(``lockstep.LockstepGroup``), each on its own partition's batches, with what its Trainer would do
for it alone:

* the linear warm-up/decay schedule over ``trainer.max_epochs`` × batches per epoch, gradient
  clipping at ``trainer.gradient_clip_val``, each cell's own AdamW state;
* a dev evaluation every ``trainer.check_val_every_n_epoch`` epochs (the K models in one stacked
  forward per dev batch, decoded and span-scored per cell as ``NERModule._score`` does), appended
  to the cell's ``history``;
* early stopping per cell by ``callbacks.early_stopping`` (patience, ``min_delta``, not before
  ``trainer.min_epochs``) and the selected (first best) dev evaluation's weights kept per cell, as
  ``ModelCheckpoint`` keeps them; a cell that stopped is no longer evaluated, and the group ends
  when every cell stopped or at ``max_epochs``;
* a cell whose loss is not finite stops with an error of its own; the others go on.

Each cell then ends as a cell alone does (``cell.finish_cell``: test with its selected weights,
``results.json``), its ``lockstep`` section naming the group. Dropout draws differ from the run
alone (one random stream per cell inside ``vmap``), so a lockstep cell is another draw of the same
experiment; ``benchmarks/lockstep_grid.py`` compares the two.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
from omegaconf import DictConfig

from ner_lightning.cell import Cell, CellRun
from ner_lightning.clock import PROCESS
from ner_lightning.lockstep import LockstepGroup, stack_batches
from ner_lightning.metrics import flat_scores, span_scores
from ner_lightning.models.word_grid import host_entries, layout_of
from ner_lightning.protocols import protocol_of
from ner_lightning.settings import as_dict

log = logging.getLogger("ner_lightning")


@dataclass
class Member:
    """One cell of a lockstep group: its config, who it is, what its set-up built, and what the
    group's fit left for it (``position``: epochs, optimiser steps; ``error``: why it stopped
    without a result)."""

    cfg: DictConfig
    cell: Cell
    run: CellRun
    resume: Path | None = None  # a last.ckpt of this cell: it then fits alone, from there
    hold: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)  # its folder's lock
    started: float = 0.0  # time.time() of its set-up
    position: tuple[int, int] = (0, 0)
    error: BaseException | None = None
    best: dict | None = field(default=None, repr=False)  # the selected evaluation's parameters
    best_value: float | None = None  # its monitor value
    stop_best: float | None = None  # early stopping's best value (min_delta applied)
    waited: int = 0  # dev evaluations since early stopping's best one
    stopped: bool = False


def config_refusal(cfg: DictConfig) -> str | None:
    """Why a cell of this config cannot train in a lockstep group, read from its config alone
    (the family's own refusal, ``lockstep_refusal()``, is asked once it is built)."""
    precision = str(cfg.trainer.precision)
    if precision not in ("32", "32-true"):
        return f"lockstep trains in fp32 (trainer.precision={precision})"
    if protocol_of(cfg) != "single":
        return f"a {protocol_of(cfg)} cell runs several fits"
    if cfg.multitask.get("scheme") not in (None, "singletask"):
        return f"multitask={cfg.multitask.scheme} trains on several corpora"
    if int(cfg.trainer.get("max_epochs") or -1) < 1 or cfg.trainer.get("max_steps") not in (None, -1):
        return "lockstep trains whole epochs (trainer.max_epochs >= 1, no max_steps)"
    if any(
        k
        not in (
            "early_stopping",
            "model_checkpoint",
            "last_checkpoint",
            "predictions",
            "eval_precision",
            "token_throughput",
        )
        for k, v in (cfg.get("callbacks") or {}).items()
        if v is not None
    ):
        return "a callback outside those a lockstep group runs (early stopping, checkpoint selection, predictions)"
    return None


def _selection(cfg: DictConfig) -> tuple[str | None, dict | None]:
    """The monitor that selects the weights (None: the final ones) and the early-stopping rule."""
    callbacks = cfg.get("callbacks") or {}
    checkpoint = callbacks.get("model_checkpoint")
    monitor = checkpoint.get("monitor") if checkpoint is not None else cfg.monitor
    stopping = callbacks.get("early_stopping")
    return monitor, as_dict(stopping, resolve=True) if stopping is not None else None


def fit_group(members: list[Member]) -> None:
    """Train the members in lockstep (module docstring); each member's module ends holding its
    selected weights, its ``history`` its dev evaluations, its ``position`` where it stopped."""
    cfg = members[0].cfg
    modules = [m.run.module for m in members]
    device = members[0].run.trainer.strategy.root_device
    for module in modules:
        module.to(device)
    n_batches = {len(m.run.datamodule.train_dataloader()) for m in members}
    if len(n_batches) != 1:
        raise ValueError(f"the group's cells have different batches per epoch ({sorted(n_batches)})")
    batches_per_epoch, max_epochs = n_batches.pop(), int(cfg.trainer.max_epochs)
    group = LockstepGroup(
        modules, total_steps=max_epochs * batches_per_epoch, clip_norm=cfg.trainer.get("gradient_clip_val")
    )
    monitor, rule = _selection(cfg)
    every, min_epochs = int(cfg.trainer.get("check_val_every_n_epoch") or 1), int(cfg.trainer.get("min_epochs") or 0)
    pad = members[0].run.datamodule.tokenizer.pad_token_id
    log.info(
        "lockstep group of %d cells (%s) | %d batches an epoch, up to %d epochs",
        len(members),
        ", ".join(m.cell.prefix for m in members),
        batches_per_epoch,
        max_epochs,
    )
    for epoch in range(max_epochs):
        active = [not (m.stopped or m.error) for m in members]
        if not any(active):
            break
        with PROCESS.phase("train"):
            losses = _train_epoch(group, members, device, pad)
        for k, m in enumerate(members):
            if not active[k]:
                continue
            m.position = (epoch + 1, (epoch + 1) * batches_per_epoch)
            m.run.module.train_batches += batches_per_epoch
            m.run.module.forward_passes += batches_per_epoch
            if not torch.isfinite(losses[k]):
                m.error = FloatingPointError(f"the training loss is not finite at epoch {epoch} (diverged)")
                log.error("%s | %s: this cell stops, the group goes on", m.cell.prefix, m.error)
        if (epoch + 1) % every == 0:
            with PROCESS.phase("dev"):
                _evaluate(group, members, device, pad, epoch, monitor, rule, min_epochs)
        log.info("lockstep epoch %d/%d | %s", epoch + 1, max_epochs, _summary(members, monitor))
    for k, m in enumerate(members):
        state = m.best if m.best is not None else group.cell_state(k)
        m.run.module.load_state_dict(state, strict=False)


def _train_epoch(group: LockstepGroup, members: list[Member], device, pad: int) -> torch.Tensor:
    """One epoch of every cell's own batches, one lockstep step per batch; the cells' summed losses."""
    loaders = [m.run.datamodule.train_dataloader() for m in members]
    total = torch.zeros(len(members), device=device)
    for batches in zip(*loaders, strict=True):
        moved = [m.run.datamodule.transfer_batch_to_device(b, device, 0) for m, b in zip(members, batches, strict=True)]
        total += group.step(stack_batches(moved, pad))
    return total.cpu()


def _evaluate(
    group: LockstepGroup,
    members: list[Member],
    device,
    pad: int,
    epoch: int,
    monitor: str | None,
    rule: dict | None,
    min_epochs: int,
) -> None:
    """Every active cell's dev scores (one stacked forward per dev batch), history, selection and
    early stopping."""
    active = [k for k, m in enumerate(members) if not (m.stopped or m.error)]
    collected: dict[int, list] = {k: [] for k in active}
    for batches in zip(*(members[k].run.datamodule.val_dataloader() for k in active), strict=True):
        moved = [
            members[k].run.datamodule.transfer_batch_to_device(b, device, 0)
            for k, b in zip(active, batches, strict=True)
        ]
        ids = group.family.decode_scores(group.scores(stack_batches(moved, pad), cells=active))
        for row, (k, batch) in enumerate(zip(active, moved, strict=True)):
            rows, words = batch["word_mask"].shape
            collected[k].append((ids[row, :rows, :words], layout_of(batch)))
    for k in active:
        m = members[k]
        module, dm = m.run.module, m.run.datamodule
        gold = dm.gold_tags("dev", dm.corpus_names[0])
        pred = module.predicted_tags(host_entries(collected[k], module.entry).get(0, []), [len(g) for g in gold], "val")
        scores = span_scores(gold, pred)
        metrics = flat_scores(scores, "val")
        module.history.append({"epoch": epoch, "batches": module.train_batches, "metrics": metrics, "scores": scores})
        _select(group, k, m, metrics, monitor, rule, epoch, min_epochs)


def _select(
    group: LockstepGroup,
    k: int,
    m: Member,
    metrics: dict,
    monitor: str | None,
    rule: dict | None,
    epoch: int,
    min_epochs: int,
) -> None:
    """``ModelCheckpoint`` (the first best ``monitor``) and ``EarlyStopping`` (mode max: an
    improvement exceeds the best by more than ``min_delta``) for one cell."""
    if monitor is not None and (m.best_value is None or metrics[monitor] > m.best_value):
        m.best_value, m.best = metrics[monitor], {name: t.clone() for name, t in group.cell_state(k).items()}
    if rule is None:
        return
    value = metrics[rule["monitor"]]
    if m.stop_best is None or value - abs(float(rule.get("min_delta", 0.0))) > m.stop_best:
        m.stop_best, m.waited = value, 0
    else:
        m.waited += 1
    m.stopped = m.waited >= int(rule["patience"]) and epoch + 1 >= min_epochs


def _summary(members: list[Member], monitor: str | None) -> str:
    values = [m.run.module.history[-1]["metrics"][monitor] for m in members if m.run.module.history and monitor]
    training = sum(not (m.stopped or m.error) for m in members)
    spread = f"dev {monitor} {min(values):.4f}–{max(values):.4f} | " if values else ""
    return f"{spread}{training} of {len(members)} cells still training"

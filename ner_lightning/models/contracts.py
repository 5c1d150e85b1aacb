"""What an objective family takes and gives, as types: the settings every family's config gives
it (:class:`FamilySettings`), the optimiser steps of a multi-step batch (:class:`Step`), the
record a fitted family reports (:class:`TrainingRecord`), and what may own the length of its
learning-rate schedule (:class:`ScheduleOwner`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple, Protocol, TypedDict

import pytorch_lightning as pl
import torch

from ner_lightning.models.encoder import TransformerEncoder


@dataclasses.dataclass(frozen=True)
class TrainingRecord:
    """What a fitted (and tested) family reports for ``results.json``."""

    history: list[dict]  # every dev evaluation: epoch, batches, flat metrics, span scores
    test: dict | None  # test span scores of the main corpus
    test_aux: dict[str, dict]  # test span scores of each auxiliary corpus (multi-corpus)
    train_batches: int
    forward_passes: int  # training forward passes (one per optimiser step)
    eval_precision: str | None  # the precision dev/test ran in (None: trainer.precision)


class Step(NamedTuple):
    """One optimiser step of a multi-step batch: ``kind`` ("ce" or "auc", read by PDSCA) and a
    callable doing a fresh forward pass and returning the step's loss."""

    kind: str
    loss: Callable[[], torch.Tensor]


class ScheduleOwner(Protocol):
    """What owns the length of the learning-rate schedule when the fit's stepping batches do not
    (a batch budget, MUNCH-Stack's phases: ``callbacks.schedules.ScheduleHorizon``).
    ``restarts_schedule``: the schedule starts over during training (one run of it per phase),
    so the end of the learning rate does not end training."""

    restarts_schedule: bool

    def schedule_steps(self, trainer: pl.Trainer) -> int:
        """Optimiser-scheduler steps of one run of the schedule."""


class RatePolicy(Protocol):
    """What sets the learning rate from the training loss instead of the schedule (the
    MUNCHABLES paper's annealing, ``callbacks.schedules.AnnealOnPlateau``): read by a phase
    that ends when the rate has fallen below its minimum ``min_lr``, and restarts it."""

    min_lr: float

    def below_minimum(self, trainer: pl.Trainer) -> bool:
        """Whether the rate has fallen below the policy's minimum."""

    def restart(self, trainer: pl.Trainer) -> None:
        """Back to the initial rate (a new phase)."""


class FamilySettings(TypedDict):
    """What every family's config gives it beside its own keys (``conf/loss/_family.yaml``, the
    head learning rate from the family's file): each family takes them as ``**settings``."""

    optimizer: Callable[..., torch.optim.Optimizer]  # a partial of the optimiser class (conf/optimizer)
    warmup_ratio: float  # the share of the schedule's steps spent warming the learning rate up
    head_lr: float | None  # every parameter trained from scratch (None: the optimiser's lr)
    dropout: float  # on the word states, before the heads


class Stackable(Protocol):
    """A family whose cells train in lockstep (``ner_lightning.lockstep.stacking``; its
    ``lockstep_refusal()`` is None): its main corpus's word scores and its training loss of a
    padded fp32 batch from fixed-shape operations only (no packing, no host reads), so
    ``torch.func.vmap`` runs the cells of a group as one model; their decoding; what moves
    outside the optimiser."""

    encoder: TransformerEncoder  # the backbone (a group runs its attention as plain matmuls)

    def padded_scores(self, batch: dict, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Main-corpus word scores ``(B, W, labels)`` in fp32, the encoder in ``dtype`` (None: fp32)."""

    def padded_loss(self, batch: dict, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The training loss of the batch's real words, the encoder in ``dtype`` (None: fp32)."""

    def decode_scores(self, scores: torch.Tensor) -> torch.Tensor:
        """Label ids ``(..., W)`` from :meth:`padded_scores` (the family's decoding, on the device)."""

    def lockstep_after_step(self, params: dict[str, torch.Tensor]) -> None:
        """What the family moves after each optimiser step, on the stacked parameters (named as in
        ``state_dict``, with a leading cell axis): the AUC losses' α ascent."""

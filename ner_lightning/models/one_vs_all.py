"""One-vs-all family (OVA-AUC paper): one binary classifier per label, O included.

``loss=ova_bce``: binary CE per label. ``loss=ova_auc``: AUC_M per label (eq. 1, libauc
``AUCMLoss`` v1), labels grouped by prefix B- / I- / O with one optimisation step per group
per batch (Algorithm 1). ``loss=ova_auc_maml``: per step, ``m`` labels sampled reproducibly
from the seed, one step on their summed AUC_M (Algorithm 2, first order). Prediction is the
argmax of the K sigmoid scores (eq. 2).

The AUC variants take several optimiser steps per batch, so they use the shared manual loop
of ``NERModule`` (clipping with the Trainer's ``gradient_clip_val``, the learning-rate
schedule stepped once per batch, α ascended after each step).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn
from typing_extensions import Unpack  # typing.Unpack: Python 3.11+

from ner_lightning.data.corpus import LabelSet
from ner_lightning.models.auc import AUCMinMax, auc_losses, aucm
from ner_lightning.models.contracts import FamilySettings, Step
from ner_lightning.models.encoder import TransformerEncoder

OBJECTIVES = ("ova_bce", "ova_auc", "ova_auc_maml")


def prefix_groups(labels: list[str]) -> list[list[int]]:
    """Label ids grouped by prefix, in the order B, I, O (Algorithm 1, line 2)."""
    groups = [[k for k, lab in enumerate(labels) if lab.startswith(p)] for p in ("B", "I", "O")]
    return [g for g in groups if g]


class OneVsAllModule(AUCMinMax):
    def __init__(
        self,
        encoder: TransformerEncoder,
        label_set: LabelSet,
        objective: str,
        margin: float,
        m: int,
        lr_alpha: float,
        lr_ab: float | None,
        seed: int,
        **settings: Unpack[FamilySettings],
    ):
        super().__init__(encoder, label_set, **settings)
        if objective not in OBJECTIVES:
            raise ValueError(f"loss.objective must be one of {OBJECTIVES}, got {objective!r}")
        k = len(label_set)
        if objective == "ova_auc_maml" and not 1 <= m <= k:
            raise ValueError(f"loss.m must be between 1 and the number of labels ({k}), got {m}")
        self.objective, self.m, self.seed = objective, m, seed
        self.lr_alpha, self.lr_ab = lr_alpha, lr_ab
        self.dropout = nn.Dropout(self.dropout_rate)
        self.heads = nn.Linear(encoder.hidden_size, k)
        self.auc = auc_losses(k, margin) if objective != "ova_bce" else None
        self.automatic_optimization = objective == "ova_bce"
        self.label_steps: list[list[int]] = []  # the label groups of every optimiser step taken

    # --- scores and losses -----------------------------------------------------------------------
    def label_scores(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Sigmoid scores (N, K) and gold label ids (N,) of the batch's real words."""
        words = self.real_words(batch)
        s = torch.sigmoid(self.heads(words.select(self.dropout(self.word_states(batch)))))
        return s, words.select(self.word_labels(batch))

    def auc_loss(self, s: torch.Tensor, y: torch.Tensor, labels: list[int]) -> torch.Tensor:
        """Σ_{k in labels} AUC_M(label k vs rest) (eq. 1)."""
        terms = self.auc_terms()
        return sum((aucm(terms[k], s[:, k], (y == k).long()) for k in labels), s.new_zeros(()))

    def group_loss(self, batch: dict, labels: list[int]) -> torch.Tensor:
        """:meth:`auc_loss` of ``labels`` on a fresh forward pass of ``batch`` (one optimiser step)."""
        return self.auc_loss(*self.label_scores(batch), labels)

    def training_loss(self, batch: dict) -> torch.Tensor:
        s, y = self.label_scores(batch)
        if self.objective == "ova_bce":
            onehot = F.one_hot(y, s.size(1)).float()
            return F.binary_cross_entropy(s, onehot, reduction="none").mean(0).sum()
        return self.auc_loss(s, y, list(range(s.size(1))))

    def step_groups(self) -> list[list[int]]:
        """Label groups, one optimiser step each, for the next batch."""
        if self.objective == "ova_auc":
            return prefix_groups(self.label_set.labels)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + len(self.label_steps))
        return [sorted(torch.randperm(len(self.label_set), generator=g)[: self.m].tolist())]

    def lockstep_refusal(self) -> str | None:
        """OVA-AUC takes one optimiser step per label group (B, I, O) on a fresh forward each, and
        OVA-AUC-MAML samples its labels per step: a group's one stacked step per batch is neither."""
        if self.automatic_optimization:
            return "ova_bce has no fixed-shape loss (contracts.Stackable)"
        return f"{self.objective} takes several optimiser steps per batch (OVA-AUC Algorithms 1 and 2)"

    def decode(self, batch: dict) -> torch.Tensor:
        return torch.sigmoid(self.heads(self.word_states(batch))).argmax(-1)  # eq. 2

    # --- optimisation ------------------------------------------------------------------------------
    def optimisation_steps(self, batch: dict) -> list[Step]:
        """One step per label group (Algorithm 1: B, I, O; Algorithm 2: m sampled labels)."""
        steps = []
        for labels in self.step_groups():
            self.label_steps.append(labels)
            steps.append(Step("auc", functools.partial(self.group_loss, batch, labels)))
        return steps

"""Two-task family (AUC-2T paper): per word, *inside an entity* (B or I) and *begins one* (B).

``loss=ce2t``: binary CE on both tasks. ``loss=auc2t``: AUC_M(entity) + λ·AUC_M(begin)
(eqs. 3-4) with libauc's ``AUCMLoss`` (v1) per task. ``loss=comauc2t``: alternates a
multi-class CE step over B/I/O with the two-task AUC step, ``period`` steps each; with
``optimizer=pdsca`` (libauc's compositional optimiser) the module tells PDSCA which kind of
step comes next.
Decoding is the paper's Algorithm 1 (:func:`two_task_decode`). The spans are untyped: the
data must carry one entity type (``data.label_scheme=untyped`` or ``data.entity_types=[X]``).

The AUC min-max update of α is shared with the one-vs-all family (``models/auc.py``).
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ner_lightning.data.corpus import LabelSet
from ner_lightning.models.auc import AUCMinMax, auc_losses, aucm
from ner_lightning.models.base import NERModule
from ner_lightning.models.encoder import TransformerEncoder
from ner_lightning.optim import set_pdsca_phase

OBJECTIVES = ("ce2t", "auc2t", "comauc2t")


def two_task_decode(entity: torch.Tensor, begin: torch.Tensor, threshold: float) -> torch.Tensor:
    """Algorithm 1: entity ∧ begin -> B (1), entity ∧ ¬begin -> I (2), else O (0)."""
    e, b = entity >= threshold, begin >= threshold
    out = torch.zeros_like(entity, dtype=torch.long)
    out[e & b] = 1
    out[e & ~b] = 2
    return out


def two_task_targets(word_labels: torch.Tensor, label_set: LabelSet) -> tuple[torch.Tensor, torch.Tensor]:
    """Entity (B or I) and begin (B) targets as 0/1 from single-type BIO label ids."""
    b_id, i_id = label_set.label2id[label_set.labels[1]], label_set.label2id[label_set.labels[2]]
    return ((word_labels == b_id) | (word_labels == i_id)).long(), (word_labels == b_id).long()


class TwoTaskModule(AUCMinMax, NERModule):
    def __init__(
        self,
        encoder: TransformerEncoder,
        label_set: LabelSet,
        optimizer: Callable[..., torch.optim.Optimizer],
        warmup_ratio: float,
        objective: str,
        lam: float,
        margin: float,
        threshold: float,
        period: int,
        lr_alpha: float,
        lr_ab: float,
        dropout: float,
    ):
        super().__init__(encoder, label_set, optimizer, warmup_ratio)
        if objective not in OBJECTIVES:
            raise ValueError(f"loss.objective must be one of {OBJECTIVES}, got {objective!r}")
        if len(label_set.entity_types) != 1:
            raise ValueError(
                f"{objective} predicts untyped spans, but the labels have {len(label_set.entity_types)} "
                f"entity types {list(label_set.entity_types)}: set data.label_scheme=untyped, or keep "
                "one type with data.entity_types=[TYPE]"
            )
        self.objective, self.lam, self.threshold = objective, lam, threshold
        self.period, self.lr_alpha, self.lr_ab = period, lr_alpha, lr_ab
        self.dropout = nn.Dropout(dropout)
        self.heads = nn.Linear(encoder.hidden_size, 2)  # entity, begin
        self.bio_head = nn.Linear(encoder.hidden_size, 3) if objective == "comauc2t" else None
        self.auc = auc_losses(2, margin) if objective != "ce2t" else None

    def task_scores(self, states: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.heads(states))  # (B, W, 2)

    def training_loss(self, batch: dict) -> torch.Tensor:
        mask = batch["word_mask"]
        states = self.dropout(self.word_states(batch))[mask]
        entity, begin = two_task_targets(self.word_labels(batch)[mask], self.label_set)
        if self.ce_phase():
            return F.cross_entropy(self.bio_head(states), 2 * entity - begin)  # O 0, B 1, I 2
        s = self.task_scores(states)
        if self.objective == "ce2t":
            return (F.binary_cross_entropy(s[:, 0], entity.float())
                    + self.lam * F.binary_cross_entropy(s[:, 1], begin.float()))
        return self.auc_loss(s, entity, begin)

    def ce_phase(self) -> bool:
        """COMAUC-2T: whether this step is a multi-class CE step (the first ``period`` of each cycle)."""
        return self.objective == "comauc2t" and (self.global_step // self.period) % 2 == 0

    def on_before_optimizer_step(self, optimizer) -> None:
        set_pdsca_phase(optimizer, auc=self.objective != "ce2t" and not self.ce_phase())

    def auc_loss(self, s: torch.Tensor, entity: torch.Tensor, begin: torch.Tensor) -> torch.Tensor:
        """Eq. 4: AUC_M(entity) + λ·AUC_M(begin) on real words only (boolean-indexed)."""
        return aucm(self.auc[0], s[:, 0], entity) + self.lam * aucm(self.auc[1], s[:, 1], begin)

    def decode(self, batch: dict) -> list[list[int]]:
        s = self.task_scores(self.word_states(batch))
        tags = two_task_decode(s[..., 0], s[..., 1], self.threshold)
        return [row[m].tolist() for row, m in zip(tags, batch["word_mask"])]

"""Two-task family (AUC-2T paper): per word, *inside an entity* (B or I) and *begins one* (B).

``loss=ce2t``: binary CE on both tasks. ``loss=auc2t``: AUC_M(entity) + λ·AUC_M(begin)
(eqs. 3-4) with libauc's ``AUCMLoss`` (v1) per task. ``loss=comauc2t``: compositional training
(Yuan et al. 2021a, the paper's reference for COMAUC-2T): on every batch a multi-class CE step
over B/I/O, then the AUC-2T step at the updated weights — the cost of AUC-2T *plus* CE's, the
AUC heads getting as many updates as under AUC-2T. With ``optimizer=pdsca`` (libauc's
optimiser for this training) PDSCA is told which kind each step is.

``loss.ce_head``: ``two_task`` (paper-faithful: the CE is taken on the decoding heads, as
Yuan et al. take CE and AUC on the same scores: p(O) = 1 − e, p(B) = e·b, p(I) = e·(1 − b),
Algorithm 1's reading of the two scores) or ``separate`` (an extra B/I/O softmax head that
only shapes the shared encoder; decoding never uses it). ``loss.schedule``: ``compositional``
(above) or ``alternate`` (``period`` batches of one CE step, then ``period`` of one AUC step:
the CE steps replace AUC steps — kept to reproduce the earlier reading).

Decoding is the paper's Algorithm 1 (:func:`two_task_decode`). The spans are untyped: the
data must carry one entity type (``data.label_scheme=untyped`` or ``data.entity_types=[X]``).
The AUC min-max update of α is shared with the one-vs-all family (``models/auc.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from typing_extensions import Unpack  # typing.Unpack: Python 3.11+

from ner_lightning.data.corpus import LabelSet
from ner_lightning.models.auc import AUCMinMax, auc_losses, aucm, masked_aucm
from ner_lightning.models.contracts import FamilySettings, Step
from ner_lightning.models.encoder import TransformerEncoder
from ner_lightning.optim import set_pdsca_phase

OBJECTIVES = ("ce2t", "auc2t", "comauc2t")
SCHEDULES = ("compositional", "alternate")
CE_HEADS = ("two_task", "separate")


def two_task_decode(entity: torch.Tensor, begin: torch.Tensor, threshold: float) -> torch.Tensor:
    """Algorithm 1: entity ∧ begin -> B (1), entity ∧ ¬begin -> I (2), else O (0)."""
    e, b = entity >= threshold, begin >= threshold
    return torch.where(e, torch.where(b, 1, 2), 0)


def two_task_targets(word_labels: torch.Tensor, label_set: LabelSet) -> tuple[torch.Tensor, torch.Tensor]:
    """Entity (B or I) and begin (B) targets as 0/1 from single-type BIO label ids."""
    b_id, i_id = label_set.label2id[label_set.labels[1]], label_set.label2id[label_set.labels[2]]
    return ((word_labels == b_id) | (word_labels == i_id)).long(), (word_labels == b_id).long()


def bio_log_probs(entity_logit: torch.Tensor, begin_logit: torch.Tensor) -> torch.Tensor:
    """log p over (O, B, I) composed from the two heads' logits: p(O) = 1 − e, p(B) = e·b,
    p(I) = e·(1 − b), with e = σ(entity_logit), b = σ(begin_logit) (log-sigmoid, stable)."""
    log_e, log_not_e = F.logsigmoid(entity_logit), F.logsigmoid(-entity_logit)
    log_b, log_not_b = F.logsigmoid(begin_logit), F.logsigmoid(-begin_logit)
    return torch.stack([log_not_e, log_e + log_b, log_e + log_not_b], dim=-1)


class TwoTaskModule(AUCMinMax):
    untyped_spans = True  # Algorithm 1 decodes B/I/O of one entity type

    def __init__(
        self,
        encoder: TransformerEncoder,
        label_set: LabelSet,
        objective: str,
        lam: float,
        margin: float,
        threshold: float,
        schedule: str,
        ce_head: str,
        period: int,
        lr_alpha: float,
        lr_ab: float | None,
        **settings: Unpack[FamilySettings],
    ):
        super().__init__(encoder, label_set, **settings)
        if objective not in OBJECTIVES:
            raise ValueError(f"loss.objective must be one of {OBJECTIVES}, got {objective!r}")
        if schedule not in SCHEDULES:
            raise ValueError(f"loss.schedule must be one of {SCHEDULES}, got {schedule!r}")
        if ce_head not in CE_HEADS:
            raise ValueError(f"loss.ce_head must be one of {CE_HEADS}, got {ce_head!r}")
        if len(label_set.entity_types) != 1:
            raise ValueError(
                f"{objective} predicts untyped spans, but the labels have {len(label_set.entity_types)} "
                f"entity types {list(label_set.entity_types)}: set data.label_scheme=untyped, or keep "
                "one type with data.entity_types=[TYPE]"
            )
        self.objective, self.lam, self.threshold = objective, lam, threshold
        self.schedule, self.ce_head, self.period = schedule, ce_head, period
        self.lr_alpha, self.lr_ab = lr_alpha, lr_ab
        self.dropout = nn.Dropout(self.dropout_rate)
        self.heads = nn.Linear(encoder.hidden_size, 2)  # entity, begin
        composite = objective == "comauc2t"
        self.bio_head = nn.Linear(encoder.hidden_size, 3) if composite and ce_head == "separate" else None
        self.auc = auc_losses(2, margin) if objective != "ce2t" else None
        # COMAUC-2T's compositional schedule takes two steps per batch (manual optimisation).
        self.automatic_optimization = not (composite and schedule == "compositional")

    def task_scores(self, states: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.heads(states))  # (B, W, 2)

    def _states_and_targets(self, batch: dict):
        words = self.real_words(batch)
        states = words.select(self.dropout(self.word_states(batch)))
        return states, *two_task_targets(words.select(self.word_labels(batch)), self.label_set)

    def ce_loss(self, batch: dict) -> torch.Tensor:
        """COMAUC-2T's multi-class CE over B/I/O (targets O 0, B 1, I 2)."""
        states, entity, begin = self._states_and_targets(batch)
        target = 2 * entity - begin
        if self.bio_head is not None:
            return F.cross_entropy(self.bio_head(states), target)
        logits = self.heads(states)
        return F.nll_loss(bio_log_probs(logits[:, 0], logits[:, 1]), target)

    def task_loss(self, batch: dict) -> torch.Tensor:
        """CE-2T's BCE or eq. 4, on real words only."""
        states, entity, begin = self._states_and_targets(batch)
        s = self.task_scores(states)
        if self.objective == "ce2t":
            return F.binary_cross_entropy(s[:, 0], entity.float()) + self.lam * F.binary_cross_entropy(
                s[:, 1], begin.float()
            )
        return self.auc_loss(s, entity, begin)

    def training_loss(self, batch: dict) -> torch.Tensor:
        return self.ce_loss(batch) if self.ce_phase() else self.task_loss(batch)

    def optimisation_steps(self, batch: dict) -> list[Step]:
        """Compositional COMAUC-2T: a CE step, then an AUC step at the updated weights."""
        return [Step("ce", lambda: self.ce_loss(batch)), Step("auc", lambda: self.task_loss(batch))]

    def ce_phase(self) -> bool:
        """Alternating COMAUC-2T: whether this batch is a CE batch (the first ``period`` of each cycle)."""
        return (
            self.objective == "comauc2t" and self.schedule == "alternate" and (self.global_step // self.period) % 2 == 0
        )

    def on_before_optimizer_step(self, optimizer) -> None:
        if self.automatic_optimization:
            set_pdsca_phase(optimizer, auc=self.objective != "ce2t" and not self.ce_phase())

    def auc_loss(self, s: torch.Tensor, entity: torch.Tensor, begin: torch.Tensor) -> torch.Tensor:
        """Eq. 4: AUC_M(entity) + λ·AUC_M(begin) on real words only (boolean-indexed)."""
        entity_term, begin_term = self.auc_terms()
        return aucm(entity_term, s[:, 0], entity) + self.lam * aucm(begin_term, s[:, 1], begin)

    def decode(self, batch: dict) -> torch.Tensor:
        s = self.task_scores(self.word_states(batch))
        return two_task_decode(s[..., 0], s[..., 1], self.threshold)

    # --- lockstep (contracts.Stackable) ------------------------------------------------------
    def lockstep_refusal(self) -> str | None:
        """CE-2T and AUC-2T take one optimiser step per batch; COMAUC-2T's CE steps do not stack."""
        return "comauc2t takes a CE step and an AUC step per batch" if self.objective == "comauc2t" else None

    def padded_scores(self, batch: dict, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Entity and begin scores ``(B, W, 2)`` of a padded fp32 batch (dropout on the word
        states while training, as :meth:`task_loss`)."""
        return self.task_scores(self.dropout(self.padded_word_states(batch, dtype)))

    def padded_loss(self, batch: dict, dtype: torch.dtype | None = None) -> torch.Tensor:
        """:meth:`task_loss` over the real words, as masked sums over every word slot."""
        s, keep = self.padded_scores(batch, dtype), batch["word_mask"]
        entity, begin = two_task_targets(self.word_labels(batch), self.label_set)
        if self.objective == "ce2t":
            bce = F.binary_cross_entropy(
                s[..., 0], entity.float(), reduction="none"
            ) + self.lam * F.binary_cross_entropy(s[..., 1], begin.float(), reduction="none")
            return (bce * keep).sum() / keep.sum()
        entity_term, begin_term = self.auc_terms()
        return masked_aucm(entity_term, s[..., 0], entity, keep) + self.lam * masked_aucm(
            begin_term, s[..., 1], begin, keep
        )

    def decode_scores(self, scores: torch.Tensor) -> torch.Tensor:
        return two_task_decode(scores[..., 0], scores[..., 1], self.threshold)

"""Token classification family: a softmax head on each word's first sub-token (``loss=ce``)."""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from ner_lightning.data.corpus import LabelSet
from ner_lightning.losses import TokenLoss
from ner_lightning.models.base import NERModule
from ner_lightning.models.encoder import TransformerEncoder


class TokenClassificationModule(NERModule):
    """Linear head over word states; ``token_loss(logits (N, K), targets (N,), sentence)``.

    ``token_loss`` is any ``ner_lightning.losses`` loss (ce, wce1, wce2, focal, dice, mom).

    Only first sub-tokens of real words enter the loss, so padding and continuation pieces
    never contribute. Decoding is the per-word argmax.
    """

    def __init__(
        self,
        encoder: TransformerEncoder,
        label_set: LabelSet,
        token_loss: TokenLoss,
        optimizer: Callable[..., torch.optim.Optimizer],
        warmup_ratio: float,
        head_lr: float | None,
        dropout: float,
    ):
        super().__init__(encoder, label_set, optimizer, warmup_ratio, head_lr)
        self.token_loss = token_loss
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.hidden_size, len(label_set))

    def logits(self, batch: dict) -> torch.Tensor:
        return self.classifier(self.dropout(self.word_states(batch)))

    def setup(self, stage: str) -> None:
        if hasattr(self.token_loss, "fit_counts") and self.trainer is not None and self.trainer.datamodule:
            self.token_loss.fit_counts(self.trainer.datamodule.label_counts())

    def training_loss(self, batch: dict) -> torch.Tensor:
        logits = self.logits(batch)
        mask = batch["word_mask"]
        rows = torch.arange(mask.size(0), device=mask.device)[:, None].expand_as(mask)
        return self.token_loss(logits[mask], self.word_labels(batch)[mask], sentence=rows[mask])

    def decode(self, batch: dict) -> list[list[int]]:
        best = self.logits(batch).argmax(-1)
        return [row[m].tolist() for row, m in zip(best, batch["word_mask"])]

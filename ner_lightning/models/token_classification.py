"""Token classification family: a softmax head on each word's first sub-token (``loss=ce``)."""
from __future__ import annotations

import copy
from typing import Unpack

import torch

from ner_lightning.data.corpus import LabelSet
from ner_lightning.losses import TokenLoss
from ner_lightning.models.contracts import FamilySettings
from ner_lightning.models.encoder import TransformerEncoder
from ner_lightning.models.heads import HeadModule, SoftmaxHead


class TokenClassificationModule(HeadModule):
    """Linear head over word states (:class:`~ner_lightning.models.heads.SoftmaxHead`);
    ``token_loss(logits (N, K), targets (N,), sentence)`` is any ``ner_lightning.losses`` loss
    (ce, wce1, wce2, focal, dice, mom), a copy of it per corpus.

    Only first sub-tokens of real words enter the loss, so padding and continuation pieces
    never contribute. Decoding is the per-word argmax.
    """

    def __init__(self, encoder: TransformerEncoder, label_set: LabelSet, token_loss: TokenLoss,
                 aux_label_sets: dict[str, LabelSet] | None = None, **settings: Unpack[FamilySettings]):
        def make_head(labels: LabelSet) -> SoftmaxHead:
            return SoftmaxHead(encoder.hidden_size, labels, copy.deepcopy(token_loss), settings["dropout"])

        super().__init__(encoder, label_set, make_head, aux_label_sets, **settings)

    @property
    def token_loss(self) -> TokenLoss:
        return self.head.token_loss

    def logits(self, batch: dict) -> torch.Tensor:
        """Main-head scores ``(B, W, K)``."""
        return self.head.scores(self.word_states(batch), batch["word_mask"])

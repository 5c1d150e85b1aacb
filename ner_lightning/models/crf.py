"""CRF family: word-level emissions (first sub-token) + linear-chain CRF (``torchcrf``).

``loss=crf``: linear emissions over the encoder's word states. ``loss=bilstm_crf``: a BiLSTM
over the word states, then linear emissions. Training minimises the negative log-likelihood
(mean over sentences); decoding is Viterbi, optionally restricted to valid IOB2 transitions.
The head is :class:`~ner_lightning.models.heads.CRFHead`, one per corpus in multi-corpus schemes.
"""
from __future__ import annotations

from typing import Unpack

import torch

from ner_lightning.data.corpus import LabelSet
from ner_lightning.models.contracts import FamilySettings
from ner_lightning.models.encoder import TransformerEncoder
from ner_lightning.models.heads import CRFHead, HeadModule


class CRFModule(HeadModule):
    """Encoder -> (optional BiLSTM) -> linear emissions -> CRF."""

    def __init__(self, encoder: TransformerEncoder, label_set: LabelSet, lstm_hidden: int | None,
                 constrain_transitions: bool, aux_label_sets: dict[str, LabelSet] | None = None,
                 **settings: Unpack[FamilySettings]):
        def make_head(labels: LabelSet) -> CRFHead:
            return CRFHead(encoder.hidden_size, labels, settings["dropout"], lstm_hidden, constrain_transitions)

        super().__init__(encoder, label_set, make_head, aux_label_sets, **settings)

    def emissions(self, batch: dict) -> torch.Tensor:
        """Main-head emission scores ``(B, W, K)``."""
        return self.head.scores(self.word_states(batch), batch["word_mask"])

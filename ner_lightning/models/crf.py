"""CRF family: word-level emissions (first sub-token) + linear-chain CRF (``torchcrf``).

``loss=crf``: linear emissions over the encoder's word states. ``loss=bilstm_crf``: a BiLSTM
over the word states, then linear emissions. Training minimises the negative log-likelihood
(mean over sentences); decoding is Viterbi, optionally restricted to valid IOB2 transitions.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torchcrf import CRF

from ner_lightning.data.corpus import LabelSet
from ner_lightning.decoding import NEG, bio_transition_mask, viterbi_decode
from ner_lightning.models.base import NERModule
from ner_lightning.models.encoder import TransformerEncoder


class CRFModule(NERModule):
    """Encoder -> (optional BiLSTM) -> linear emissions -> CRF."""

    def __init__(
        self,
        encoder: TransformerEncoder,
        label_set: LabelSet,
        optimizer: Callable[..., torch.optim.Optimizer],
        warmup_ratio: float,
        head_lr: float | None,
        dropout: float,
        lstm_hidden: int | None,
        constrain_transitions: bool,
    ):
        super().__init__(encoder, label_set, optimizer, warmup_ratio, head_lr)
        self.dropout = nn.Dropout(dropout)
        width = encoder.hidden_size
        self.lstm = None
        if lstm_hidden:
            self.lstm = nn.LSTM(width, lstm_hidden, batch_first=True, bidirectional=True)
            width = 2 * lstm_hidden
        self.emit = nn.Linear(width, len(label_set))
        self.crf = CRF(len(label_set), batch_first=True)
        self.constrain_transitions = constrain_transitions
        start_ok, trans_ok = bio_transition_mask(label_set.labels)
        self.register_buffer("start_ok", start_ok, persistent=False)
        self.register_buffer("trans_ok", trans_ok, persistent=False)

    def emissions(self, batch: dict) -> torch.Tensor:
        states = self.dropout(self.word_states(batch))
        if self.lstm is not None:
            lengths = batch["word_mask"].sum(1).cpu()
            packed = pack_padded_sequence(states, lengths, batch_first=True, enforce_sorted=False)
            states, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=states.size(1))
        return self.emit(states)

    def training_loss(self, batch: dict) -> torch.Tensor:
        mask = batch["word_mask"]
        tags = self.word_labels(batch).clamp(min=0)  # padding words are masked out by the CRF
        return -self.crf(self.emissions(batch), tags, mask=mask, reduction="mean")

    def decode(self, batch: dict) -> list[list[int]]:
        start, trans = self.crf.start_transitions, self.crf.transitions
        if self.constrain_transitions:
            start = start.masked_fill(~self.start_ok, NEG)
            trans = trans.masked_fill(~self.trans_ok, NEG)
        return viterbi_decode(self.emissions(batch), batch["word_mask"], start, self.crf.end_transitions, trans)

"""CRF family: word-level emissions (first sub-token) + linear-chain CRF (``torchcrf``).

``loss=crf``: linear emissions over the encoder's word states. ``loss=bilstm_crf``: a BiLSTM
over the word states, then linear emissions. Training minimises the negative log-likelihood
(mean over sentences); decoding is Viterbi, optionally restricted to valid IOB2 transitions.
The head is :class:`CRFHead`, one per corpus in multi-corpus schemes (``models.heads.HeadModule``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torchcrf import CRF
from typing_extensions import Unpack  # typing.Unpack: Python 3.11+

from ner_lightning.data.corpus import LabelSet
from ner_lightning.models.contracts import FamilySettings
from ner_lightning.models.decoding import NEG, bio_transition_mask, viterbi_decode
from ner_lightning.models.encoder import TransformerEncoder
from ner_lightning.models.heads import Counts, Head, HeadModule
from ner_lightning.models.word_grid import host_index


class CRFHead(Head):
    """Dropout -> (optional BiLSTM) -> linear emissions -> CRF (``torchcrf``); Viterbi decoding,
    optionally restricted to valid IOB2 transitions. No class weights (``fit_counts``: none), no
    per-word classifier (Viterbi over the whole sentence)."""

    start_ok: Tensor  # valid first tags (buffer)
    trans_ok: Tensor  # valid tag transitions (buffer)

    def __init__(
        self,
        hidden_size: int,
        label_set: LabelSet,
        dropout: float,
        lstm_hidden: int | None,
        constrain_transitions: bool,
    ):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        width = hidden_size
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

    def scores(self, states: Tensor, word_mask: Tensor, word_counts: Counts = None) -> Tensor:
        """Emissions; ``word_counts`` (words per row, known on the host) spares the BiLSTM asking
        the device for the lengths."""
        states = self.dropout(states)
        if self.lstm is not None:
            counts = word_counts if word_counts is not None else tuple(word_mask.sum(1).tolist())
            order = sorted(range(len(counts)), key=lambda i: -counts[i])  # longest first, sorted on the host
            back = sorted(range(len(order)), key=order.__getitem__)
            to_order, to_back = (host_index(x, states.device) for x in (order, back))
            packed = pack_padded_sequence(
                states.index_select(0, to_order),
                torch.tensor([counts[i] for i in order]),
                batch_first=True,
                enforce_sorted=True,
            )
            states, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=states.size(1))
            states = states.index_select(0, to_back)
        return self.emit(states)

    def loss(self, states: Tensor, labels: Tensor, word_mask: Tensor, word_counts: Counts = None) -> Tensor:
        tags = labels.clamp(min=0)  # padding words are masked out by the CRF
        return -crf_log_likelihood(self.crf, self.scores(states, word_mask, word_counts), tags, word_mask).mean()

    def decode(self, states: torch.Tensor, word_mask: torch.Tensor, word_counts: tuple[int, ...]) -> torch.Tensor:
        start, trans = self.crf.start_transitions, self.crf.transitions
        if self.constrain_transitions:
            start = start.masked_fill(~self.start_ok, NEG)
            trans = trans.masked_fill(~self.trans_ok, NEG)
        emissions = self.scores(states, word_mask, word_counts)
        return viterbi_decode(emissions, word_mask, start, self.crf.end_transitions, trans)


def crf_log_likelihood(crf: CRF, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Log-likelihood of each sentence's tags under a linear-chain CRF (MUNCHABLES eq. 7): the
    path's score minus the log-partition, computed as ``torchcrf.CRF(batch_first=True)(emissions,
    tags, mask, reduction="none")`` computes it (same operations in the same order) without its
    input checks, whose ``mask[:, 0].all()`` waits for the device at every step. ``emissions (B,
    T, K)``; ``mask (B, T)`` with each sentence's words first (collated batches always are)."""
    emissions, tags, on = emissions.transpose(0, 1), tags.transpose(0, 1), mask.transpose(0, 1)
    length, batch = tags.shape
    rows = torch.arange(batch, device=tags.device)
    weight = on.float()
    score = crf.start_transitions[tags[0]]
    score += emissions[0, rows, tags[0]]
    for i in range(1, length):
        score += crf.transitions[tags[i - 1], tags[i]] * weight[i]
        score += emissions[i, rows, tags[i]] * weight[i]
    score += crf.end_transitions[tags[weight.long().sum(dim=0) - 1, rows]]
    partition = crf.start_transitions + emissions[0]
    for i in range(1, length):
        step = torch.logsumexp(partition.unsqueeze(2) + crf.transitions + emissions[i].unsqueeze(1), dim=1)
        partition = torch.where(on[i].unsqueeze(1), step, partition)
    partition += crf.end_transitions
    return score - torch.logsumexp(partition, dim=1)


class CRFModule(HeadModule[CRFHead]):
    """Encoder -> (optional BiLSTM) -> linear emissions -> CRF."""

    def __init__(
        self,
        encoder: TransformerEncoder,
        label_set: LabelSet,
        lstm_hidden: int | None,
        constrain_transitions: bool,
        aux_label_sets: dict[str, LabelSet] | None = None,
        **settings: Unpack[FamilySettings],
    ):
        def make_head(labels: LabelSet) -> CRFHead:
            return CRFHead(encoder.hidden_size, labels, settings["dropout"], lstm_hidden, constrain_transitions)

        super().__init__(encoder, label_set, make_head, aux_label_sets, **settings)

    def emissions(self, batch: dict) -> torch.Tensor:
        """Main-head emission scores ``(B, W, K)``."""
        return self.head.scores(self.word_states(batch), batch["word_mask"])

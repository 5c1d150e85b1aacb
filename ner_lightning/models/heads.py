"""Output heads over shared word states: scores + loss + decoding for one label set.

A head is what a corpus owns in a model whose encoder several corpora share (the MUNCHABLES
paper's Fig. 1: shared layers, one CRF per dataset). :class:`HeadModule` families hold one
head per corpus — the main corpus's and, in a multi-corpus scheme (``multitask=``), one per
auxiliary corpus with that corpus's own labels — and route each batch row to its corpus's head.

* :class:`SoftmaxHead` — linear scores, any ``ner_lightning.losses`` token loss, per-word argmax.
* ``models.crf.CRFHead`` — optional BiLSTM, linear emissions, linear-chain CRF (MUNCHABLES
  eqs. 5-8: negative log-likelihood, mean over sentences), Viterbi decoding (eq. 6).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar, cast

import torch
from torch import Tensor, nn
from typing_extensions import Unpack  # typing.Unpack: Python 3.11+

from ner_lightning.data.contract import ModelData, datamodule_of
from ner_lightning.data.corpus import LabelSet
from ner_lightning.data.datamodule import MAIN
from ner_lightning.losses import TokenLoss
from ner_lightning.models.base import NERModule
from ner_lightning.models.contracts import FamilySettings
from ner_lightning.models.encoder import TransformerEncoder
from ner_lightning.models.word_grid import RealWords, host_index, layout_of

Counts = tuple[int, ...] | None  # words per row, known on the host (spares asking the device)


class Head(nn.Module):
    """What :class:`HeadModule` asks of a head. ``word_counts``: words per row, known on the host
    (the batch's layout), so no head has to ask the device for lengths."""

    def scores(self, states: Tensor, word_mask: Tensor, word_counts: Counts = None) -> Tensor:
        """Word scores ``(B, W, K)`` of rows ``states (B, W, H)``."""
        raise NotImplementedError

    def fit_counts(self, counts: Tensor) -> None:
        """Training label counts (class weights; a no-op here)."""

    def loss(self, states: Tensor, labels: Tensor, word_mask: Tensor, word_counts: Counts = None) -> Tensor:
        """The training loss of rows ``states (B, W, H)`` with ``labels (B, W)``."""
        raise NotImplementedError

    def decode(self, states: Tensor, word_mask: Tensor, word_counts: tuple[int, ...]) -> Tensor:
        """Label ids ``(B, W)`` on the device."""
        raise NotImplementedError

    def per_word_classifier(self) -> nn.Linear | None:
        """The linear layer whose per-word argmax is this head's decoding, or None (here)."""
        return None


class SoftmaxHead(Head):
    """Dropout + linear scores ``(B, W, K)``; ``token_loss(logits (N, K), targets (N,), sentence)``
    over the real words only; decoding is the per-word argmax."""

    def __init__(self, hidden_size: int, label_set: LabelSet, token_loss: TokenLoss, dropout: float):
        super().__init__()
        self.token_loss = token_loss
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden_size, len(label_set))

    def scores(self, states: Tensor, word_mask: Tensor, word_counts: Counts = None) -> Tensor:
        return self.classifier(self.dropout(states))

    def fit_counts(self, counts: torch.Tensor) -> None:
        """Class weights from training label counts (the weighted losses; no-op for others)."""
        self.token_loss.fit_counts(counts)

    def loss(self, states: Tensor, labels: Tensor, word_mask: Tensor, word_counts: Counts = None) -> Tensor:
        logits = self.scores(states, word_mask)
        counts = word_counts if word_counts is not None else tuple(word_mask.sum(1).tolist())
        words = RealWords.of(counts, word_mask.size(1), word_mask.device)
        return self.token_loss(words.select(logits), words.select(labels), sentence=words.rows)

    def decode(self, states: torch.Tensor, word_mask: torch.Tensor, word_counts: tuple[int, ...]) -> torch.Tensor:
        return self.scores(states, word_mask).argmax(-1)

    def per_word_classifier(self) -> nn.Linear:
        return self.classifier


H = TypeVar("H", bound=Head)


class HeadModule(NERModule, Generic[H]):
    """A family that is one head over the shared encoder's word states, with one head per corpus.

    ``heads["main"]`` scores the main corpus; a multi-corpus data module
    (``ner_lightning.data.multi_corpus``) adds one head per auxiliary corpus
    (``aux_label_sets``), each over that corpus's own labels. A batch's ``corpus`` row indices
    (0 = main, absent = all main) route every row to its corpus's head; a batch mixing corpora
    (MUNCH-Conc) costs the row-weighted mean of the heads' losses. Each epoch's mean training
    loss per corpus is logged (``train/loss_<corpus>``) and read by MUNCH-Stack's convergence test.
    """

    def __init__(
        self,
        encoder: TransformerEncoder,
        label_set: LabelSet,
        make_head: Callable[[LabelSet], H],
        aux_label_sets: dict[str, LabelSet] | None,
        **settings: Unpack[FamilySettings],
    ):
        super().__init__(encoder, label_set, **settings)
        corpora = {MAIN: label_set, **(aux_label_sets or {})}
        self.corpus_names = list(corpora)
        self.label_sets = corpora
        self.heads = nn.ModuleDict({name: make_head(ls) for name, ls in corpora.items()})
        self.epoch_losses: dict[str, list[torch.Tensor]] = {}

    @property
    def head(self) -> H:
        """The main corpus's head."""
        return self.head_of(MAIN)

    def head_of(self, corpus: str) -> H:
        """``corpus``'s head (every entry of ``heads`` is one ``make_head`` built)."""
        return cast(H, self.heads[corpus])

    def per_word_classifier(self) -> nn.Linear | None:
        return self.head.per_word_classifier()

    def setup(self, stage: str) -> None:
        dm = datamodule_of(self._trainer)
        if dm is not None:
            self.fit_to_data(dm)

    def fit_to_data(self, dm: ModelData) -> None:
        """Each head's class weights from its corpus's training label counts (the weighted losses)."""
        trained = dm.corpus_names
        if trained != self.corpus_names:
            raise ValueError(
                f"the model has heads for corpora {self.corpus_names} but the data module trains "
                f"{trained}: build the module with the data module's aux_label_sets"
            )
        for name in self.corpus_names:
            self.head_of(name).fit_counts(dm.label_counts(name))

    def _rows(self, batch: dict) -> list[tuple[str, torch.Tensor | None, tuple[int, ...]]]:
        """(corpus name, its rows' indices or None for all rows, words per row) of each corpus
        present in the batch, from its layout (known on the host)."""
        layout = layout_of(batch)
        present = sorted(set(layout.corpora))
        if len(present) == 1:
            return [(self.corpus_names[present[0]], None, layout.words)]
        device = batch["word_mask"].device
        return [
            (
                self.corpus_names[c],
                host_index([i for i, k in enumerate(layout.corpora) if k == c], device),
                tuple(n for n, k in zip(layout.words, layout.corpora, strict=True) if k == c),
            )
            for c in present
        ]

    def training_loss(self, batch: dict) -> torch.Tensor:
        states, labels, mask = self.word_states(batch), self.word_labels(batch), batch["word_mask"]
        total = states.new_zeros(())
        for name, rows, words in self._rows(batch):
            if rows is None:
                loss, share = self.head_of(name).loss(states, labels, mask, words), 1.0
            else:
                loss = self.head_of(name).loss(states[rows], labels[rows], mask[rows], words)
                share = len(words) / mask.size(0)
            total = total + share * loss
            self.epoch_losses.setdefault(name, []).append(loss.detach())  # no host sync per step
        return total

    def decode(self, batch: dict) -> torch.Tensor:
        states, mask = self.word_states(batch), batch["word_mask"]
        parts = self._rows(batch)
        if len(parts) == 1:
            name, _, words = parts[0]
            return self.head_of(name).decode(states, mask, words)
        out = torch.zeros(mask.shape, dtype=torch.long, device=mask.device)
        for name, rows, words in parts:
            out[rows] = self.head_of(name).decode(states[rows], mask[rows], words)
        return out

    def on_train_epoch_start(self) -> None:
        self.epoch_losses = {}

    def epoch_loss(self, corpus: str = MAIN) -> float | None:
        """Mean training loss of ``corpus``'s batches in the current (or just finished) epoch."""
        losses = self.epoch_losses.get(corpus)
        return float(torch.stack(losses).mean()) if losses else None

    def on_train_epoch_end(self) -> None:
        super().on_train_epoch_end()
        if len(self.corpus_names) > 1:
            for name in self.epoch_losses:
                loss = self.epoch_loss(name)
                if loss is not None:
                    self.log(f"train/loss_{name}", loss)

    def id2label_of(self, corpus: str) -> dict[int, str]:
        return self.label_sets[corpus].id2label

    def head_label_sets(self) -> dict[str, LabelSet]:
        return dict(self.label_sets)


def build_family(loss, encoder: TransformerEncoder, label_sets: dict[str, LabelSet]) -> NERModule:
    """The objective family of a ``loss`` config around ``encoder``: the main corpus's labels
    (``label_sets["main"]``) and, in a multi-corpus scheme, one head per auxiliary corpus — which
    only :class:`HeadModule` families have."""
    from hydra.utils import get_class, instantiate

    aux = {name: ls for name, ls in label_sets.items() if name != MAIN}
    if not aux:
        return instantiate(loss, encoder=encoder, label_set=label_sets[MAIN])
    family = get_class(loss["_target_"])
    if not issubclass(family, HeadModule):
        raise ValueError(
            f"{family.__name__} ({loss['_target_']}) has no per-corpus head: multi-corpus schemes "
            "(multitask=...) need a family with one head per corpus (ner_lightning.models.heads.HeadModule: "
            "the token classification and CRF families)"
        )
    return instantiate(loss, encoder=encoder, label_set=label_sets[MAIN], aux_label_sets=aux)

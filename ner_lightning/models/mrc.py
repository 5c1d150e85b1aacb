"""MRC framing (``loss=mrc``): BERT-MRC (Li et al. 2020) as the MoM paper runs it (§IV-A-b).

Each input asks one question — ``[CLS] query [SEP] sentence [SEP]``, one per sentence and
entity type (``data.framing=mrc``, queries in ``dataset.queries``) — and a head over the word
states of the sentence answers it:

* ``head=tagger`` (the MoM paper's model, "the same architecture as sequential labeling with
  Y changed to 2"): per word, inside an entity of the queried type or not; ``O`` is "not in an
  entity of this type" (class 0, the class MoM's L_MoM sums over).
* ``head=pointer`` (Li et al.'s start/end heads): per word, starts an entity of the type or
  not, ends one or not; the loss is the mean of the two.

The token loss (``loss.token_loss``, any loss of ``conf/token_loss``) is applied to every binary
decision. Decoding (``ner_lightning.models.decoding``) turns each type's answer into spans
and merges the types into one IOB2 sequence per sentence (greedy by score, no overlaps), so the
span metrics score MRC like every other family.
"""

from __future__ import annotations

import torch
from torch import nn
from typing_extensions import Unpack  # typing.Unpack: Python 3.11+

from ner_lightning.data.alignment import SPAN_TAGS, BatchLayout
from ner_lightning.data.contract import datamodule_of
from ner_lightning.data.corpus import LabelSet
from ner_lightning.losses import TokenLoss
from ner_lightning.models.base import NERModule
from ner_lightning.models.contracts import FamilySettings
from ner_lightning.models.decoding import inside_spans, merge_typed_spans, pointer_spans
from ner_lightning.models.encoder import TransformerEncoder
from ner_lightning.span_counts import PlacedWords, SplitCounter

HEADS = ("tagger", "pointer")
_B, _E, _S = (SPAN_TAGS.index(t) for t in "BES")


class MRCModule(NERModule):
    """Shared encoder + a binary tagger (or start/end pointer) head over queried sentences."""

    framing = "mrc"

    def __init__(
        self,
        encoder: TransformerEncoder,
        label_set: LabelSet,
        token_loss: TokenLoss,
        head: str,
        **settings: Unpack[FamilySettings],
    ):
        super().__init__(encoder, label_set, **settings)
        if head not in HEADS:
            raise ValueError(f"loss.head must be one of {HEADS}, got {head!r}")
        self.head = head
        self.token_loss = token_loss
        self.dropout = nn.Dropout(self.dropout_rate)
        self.classifier = nn.Linear(encoder.hidden_size, 2 if head == "tagger" else 4)  # pointer: start, end

    def setup(self, stage: str) -> None:
        """Weighted losses see the binary decision's counts: [negatives, positives] — words inside
        an entity of the queried type (tagger), or spans (pointer: as many starts as ends)."""
        dm = datamodule_of(self._trainer)
        if dm is not None:
            counts = dm.label_counts()
            positive = counts[1:].sum() if self.head == "tagger" else counts[_B] + counts[_S]
            self.token_loss.fit_counts(torch.stack([counts.sum() - positive, positive]))

    def logits(self, batch: dict) -> torch.Tensor:
        """``(B, W, 2)`` (tagger) or ``(B, W, 4)``: start logits in [..., :2], end in [..., 2:]."""
        return self.classifier(self.dropout(self.word_states(batch)))

    def targets(self, tags: torch.Tensor) -> list[torch.Tensor]:
        """Binary targets from the per-type word labels (``SPAN_TAGS`` ids): [inside] or [start, end]."""
        if self.head == "tagger":
            return [(tags > 0).long()]
        return [((tags == _B) | (tags == _S)).long(), ((tags == _E) | (tags == _S)).long()]

    def training_loss(self, batch: dict) -> torch.Tensor:
        words = self.real_words(batch)
        logits = words.select(self.logits(batch))
        targets = self.targets(words.select(self.word_labels(batch)))
        losses = [self.token_loss(logits[:, 2 * k : 2 * k + 2], y, sentence=words.rows) for k, y in enumerate(targets)]
        return sum(losses) / len(losses)

    def decode(self, batch: dict) -> torch.Tensor:
        """Per example and word, ``(B, W, 1)`` P(inside) or ``(B, W, 2)`` P(start), P(end), on the
        device (decoded into spans once the whole sentence is collected, :meth:`predicted_tags`)."""
        logits = self.logits(batch)
        return torch.stack([logits[..., k : k + 2].softmax(-1)[..., 1] for k in range(0, logits.size(-1), 2)], -1)

    def entry(self, layout: BatchLayout, row: int, values: list) -> tuple:
        """``(sentence index, word offset, type index, answers)`` of one (chunk, queried type)."""
        return layout.sentences[row], layout.offsets[row], layout.types[row], values

    def placed_tags(self, batches: list, counter: SplitCounter, corpus: int, stage: str, limited: bool) -> PlacedWords:
        """Answers are probabilities per (word, type): decoded into spans on the host
        (:meth:`predicted_tags`), then laid end to end as tags."""
        chunks = self._host_entries(batches).get(corpus, [])
        return counter.place(self.predicted_tags(chunks, counter.lengths, stage))

    def predicted_tags(
        self, collected: list, lengths: list[int], stage: str, id2label: dict[int, str] | None = None
    ) -> list[list[str]]:
        """Reassemble each (sentence, type) answer over its chunks, decode it into spans and
        merge the types (:func:`ner_lightning.models.decoding.merge_typed_spans`)."""
        types = self.label_set.entity_types
        answers: dict[tuple[int, int], list] = {}
        for si, off, ti, p in collected:
            row = answers.setdefault((si, ti), [None] * lengths[si])
            row[off : off + len(p)] = p
        missing = sum(lengths) * len(types) - sum(sum(x is not None for x in row) for row in answers.values())
        if missing:
            raise RuntimeError(f"{stage}: {missing} (word, type) answers missing of {sum(lengths) * len(types)}")
        pred = []
        for si, n in enumerate(lengths):
            candidates = []
            for ti, etype in enumerate(types):
                row = answers[(si, ti)]
                found = (
                    inside_spans([p[0] for p in row])
                    if self.head == "tagger"
                    else pointer_spans([p[0] for p in row], [p[1] for p in row])
                )
                candidates += [(etype, first, last, score) for first, last, score in found]
            pred.append(merge_typed_spans(candidates, n, types))
        return pred

"""Span counts of a whole split as tensor operations, for one model or a stack of them.

The words of a split's sentences are laid end to end (``L`` words, a flag at each sentence's
first word); a model's decoded tags are tag indices ``(..., L)`` on the device. Spans follow
:func:`ner_lightning.metrics.spans` — strict IOB2 and lenient (conlleval) — as three vectorised
facts per word: it *continues* the previous word (``I-X`` after ``B-X``/``I-X``, same sentence),
its span's *head* is the last word at or before it that does not continue (a running maximum),
and it *ends* a span when it lies in one and the next word does not continue it. A strict span
needs a ``B-`` head; a lenient one any non-``O`` head. A predicted span is correct when a gold
span ends at the same word with the same head and type. Counts per type — correct, predicted,
gold — for both modes come back to the host in one copy (``(..., 2, 3, T)``) and are scored by
:func:`ner_lightning.metrics.scores_from_counts`: the numbers of :func:`~ner_lightning.metrics.span_scores`
(``tests/test_span_counts.py`` compares both, and seqeval, on random tag sets).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from ner_lightning.metrics import MODES, scores_from_counts

OUTSIDE, BEGIN, INSIDE = 0, 1, 2
_PREFIX = {"O": OUTSIDE, "B": BEGIN, "I": INSIDE}


class TagCodes:
    """A tag vocabulary (index → ``O`` / ``B-X`` / ``I-X``) as prefix and type codes; ``types``
    sorted (seqeval's row order), ``O`` has type -1."""

    def __init__(self, tags: Sequence[str]):
        self.tags = list(tags)
        if "O" not in self.tags:
            self.tags.append("O")
        self.index = {t: i for i, t in enumerate(self.tags)}
        parts = [t.partition("-") for t in self.tags]
        bad = [t for t, (p, _, _) in zip(self.tags, parts, strict=True) if p not in _PREFIX or (p == "O" and t != "O")]
        if bad:
            raise ValueError(f"tag {bad[0]!r} is not O, B-<type> or I-<type>")
        self.types = sorted({ty for p, _, ty in parts if p != "O"})
        type_of = {ty: k for k, ty in enumerate(self.types)}
        self.prefix = torch.tensor([_PREFIX[p] for p, _, _ in parts], dtype=torch.int8)
        self.type = torch.tensor([type_of[ty] if p != "O" else -1 for p, _, ty in parts], dtype=torch.int16)
        self.outside = self.index["O"]

    def encode(self, sentences: Sequence[Sequence[str]]) -> torch.Tensor:
        """The tags of ``sentences`` end to end as indices ``(L,)``."""
        try:
            return torch.tensor([self.index[t] for s in sentences for t in s], dtype=torch.long)
        except KeyError as err:
            raise ValueError(f"tag {err.args[0]!r} is not in the label set {self.tags}") from None


def span_ends(prefix: torch.Tensor, type_: torch.Tensor, first: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per mode, ``(..., L)``: 0 where no span ends at the word, else ``2 * h + 3`` (``h``:
    the index of that span's first word, so two spans match when these and their types are equal), from the
    words' prefix and type codes ``(..., L)``; ``first``: ``(L,)`` a sentence's first word. The
    modes differ only in which heads open a span: strict a ``B-`` one, lenient any."""
    before_prefix = torch.nn.functional.pad(prefix[..., :-1], (1, 0), value=OUTSIDE)
    before_type = torch.nn.functional.pad(type_[..., :-1], (1, 0), value=-1)
    continues = (prefix == INSIDE) & (before_prefix != OUTSIDE) & (before_type == type_) & ~first
    # one running maximum gives each word its span's head and whether that head is a B- tag
    position = torch.arange(0, 2 * prefix.size(-1), 2, device=prefix.device, dtype=torch.int32)
    head = torch.cummax(torch.where(continues, 0, position + (prefix == BEGIN)), dim=-1).values
    closes = ~torch.nn.functional.pad(continues[..., 1:], (0, 1), value=False)  # the next word does not continue
    marked = (head | 1) + 2  # 2 * the head's index + 3, whatever its prefix (> 0)
    lenient = torch.where((prefix != OUTSIDE) & closes, marked, 0)
    return {"lenient": lenient, "strict": torch.where((head & 1).bool(), lenient, 0)}


class PlacedWords(NamedTuple):
    """A split's decoded words laid end to end, as :class:`SplitCounter` counts them."""

    tags: torch.Tensor  # (..., L) tag indices, O where no word was decoded
    counted: torch.Tensor | None  # (L,) words of sentences decoded whole (None: every sentence)
    seen: list[int] | None  # those sentences (None: every sentence)


class SplitCounter:
    """The gold spans of one split, indexed once (on ``device``), and the span counts of any
    number of models' tags of it (module docstring). ``lengths``: words per sentence."""

    def __init__(self, codes: TagCodes, gold: Sequence[Sequence[str]], device: torch.device | str = "cpu"):
        self.codes = codes
        self.lengths = [len(s) for s in gold]
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64) if gold else np.zeros(0)
        self.words = int(sum(self.lengths))
        first = torch.zeros(self.words, dtype=torch.bool)
        first[torch.as_tensor(self.starts[np.asarray(self.lengths) > 0], dtype=torch.long)] = True
        self.device = torch.device(device)
        self.first = first.to(self.device)
        self._prefix, self._type = codes.prefix.to(self.device), codes.type.to(self.device)
        self.gold = codes.encode(gold).to(self.device)
        self._gold_spans = span_ends(*self._codes(self.gold), self.first)
        self._gold_type = self._type[self.gold].long()
        self._gold_counts = self._gold_totals(None)

    def _codes(self, tags: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._prefix[tags], self._type[tags]

    def _gold_totals(self, counted: torch.Tensor | None) -> torch.Tensor:
        """Gold spans per mode and type ``(2, T)`` (of the ``counted`` words' sentences)."""
        n_types = len(self.codes.types)
        rows = []
        for mode in MODES:
            ends = self._gold_spans[mode] > 0
            ends = ends if counted is None else ends & counted
            index = torch.where(ends, self._gold_type, n_types)
            rows.append(
                torch.zeros(n_types + 1, dtype=torch.long, device=self.device).scatter_add_(
                    0, index, torch.ones_like(index)
                )
            )
        return torch.stack(rows)[:, :n_types]

    def counts(self, pred: torch.Tensor, counted: torch.Tensor | None = None) -> torch.Tensor:
        """Per model and type ``(..., 2, 3, T)`` (modes strict, lenient; correct, predicted, gold)
        of the tag indices ``pred`` ``(..., L)``; ``counted``: ``(L,)`` the words whose sentences
        count (None: all). The predicted counts in one histogram per model; the gold ones per split."""
        n_types = len(self.codes.types)
        lead = pred.shape[:-1]
        gold = self._gold_counts if counted is None else self._gold_totals(counted)
        if pred.size(-1) == 0:
            return torch.zeros(*lead, len(MODES), 3, n_types, dtype=torch.long, device=pred.device)
        prefix, type_ = self._codes(pred)
        spans = span_ends(prefix, type_, self.first)
        same_type = type_ == self._gold_type
        # each word's four facts as bits (strict: ends, correct; lenient: ends, correct) beside its
        # type, so one histogram per model counts them all
        bits = torch.zeros_like(type_, dtype=torch.int16)
        for m, mode in enumerate(MODES):
            ends = spans[mode] > 0 if counted is None else (spans[mode] > 0) & counted
            correct = ends & (spans[mode] == self._gold_spans[mode]) & same_type
            bits |= ends.to(torch.int16) << (2 * m)
            bits |= correct.to(torch.int16) << (2 * m + 1)
        key = (type_.clamp(min=0).to(torch.int16) << 4 | bits).reshape(-1, pred.size(-1)).long()
        hist = torch.zeros(key.size(0), n_types << 4, dtype=torch.long, device=pred.device)
        hist.scatter_add_(1, key, torch.ones(1, dtype=torch.long, device=pred.device).expand_as(key))
        hist = hist.reshape(*lead, n_types, 16)
        has = torch.arange(16, device=pred.device)
        found = [
            hist[..., ((has >> bit) & 1).bool()].sum(-1)  # (..., T): words with that bit set, by type
            for m in range(len(MODES))
            for bit in (2 * m + 1, 2 * m)  # correct, then predicted
        ]
        found_t = torch.stack(found, -2).reshape(*lead, len(MODES), 2, n_types)
        return torch.cat([found_t, gold.expand(*lead, len(MODES), n_types).unsqueeze(-2)], -2)

    def scores(self, counts: np.ndarray) -> dict:
        """``span_scores``'s dict from one model's counts ``(2, 3, T)`` (on the host)."""
        strict, lenient = (scores_from_counts(self.codes.types, *counts[m]) for m in range(len(MODES)))
        return {**strict, "lenient": lenient}

    def tags(self, pred: np.ndarray, sentences: Sequence[int] | None = None) -> list[list[str]]:
        """Whole-sentence tags of one model's tag indices ``(L,)`` (``sentences``: only these)."""
        names = self.codes.tags
        flat = [names[i] for i in pred.tolist()]
        keep = range(len(self.lengths)) if sentences is None else sentences
        return [flat[self.starts[s] : self.starts[s] + self.lengths[s]] for s in keep]

    def place(self, sentences: Sequence[Sequence[str]]) -> PlacedWords:
        """Tags given as strings, one list per sentence of the split, laid end to end."""
        if [len(s) for s in sentences] != self.lengths:
            raise ValueError("predicted and gold sentences must align sentence by sentence, word by word")
        return PlacedWords(self.codes.encode(sentences).to(self.device), None, None)


class PredictedTags:
    """One model's decoded tags of a split, kept where they were decoded until a file needs them
    as strings (:meth:`as_lists`: whole sentences; only those counted after a limited evaluation)."""

    def __init__(self, counter: SplitCounter, tags: torch.Tensor, seen: list[int] | None = None):
        self.counter, self.tags, self.seen = counter, tags, seen

    def as_lists(self) -> list[list[str]]:
        return self.counter.tags(self.tags.cpu().numpy(), self.seen)

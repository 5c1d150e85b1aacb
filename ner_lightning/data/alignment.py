"""Word -> sub-word alignment, the Hugging Face way, with no word ever dropped.

The first sub-token of a word carries the word's label; other sub-tokens, special tokens and
padding carry ``-100``. Each distinct word is tokenised once per tokenizer (cached across
splits and across the runs of one process). A sentence longer than the encoder's limit is cut
into consecutive word chunks that each fit, so every gold word is predicted and evaluation is
always against the full gold sequence.

The MRC framing (``loss=mrc``, Li et al. 2020) asks one question per entity type: each input
is ``[CLS] query [SEP] sentence [SEP]`` (the tokenizer's own pair frame), the query tokenised
once per type, and a word's label is its tag projected on the queried type (:data:`SPAN_TAGS`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from ner_lightning.data.corpus import LabelSet, Sentence
from ner_lightning.data.packing import pack_plan

IGNORE_INDEX = -100

_PIECE_CACHE: dict[tuple[str, ...], dict[str, list[int]]] = {}
_ENCODED: OrderedDict[tuple, list[Feature]] = OrderedDict()  # (aligner frame, labels, sentences) -> features
ENCODED_KEPT = 8  # splits kept encoded (dev and test of a few corpora)


@dataclass(frozen=True)
class Feature:
    """One encoder input: a whole sentence, or a chunk of one, with its word positions."""

    sentence_index: int  # index into the split's sentence list
    word_offset: int  # index of the chunk's first word in the sentence
    input_ids: list[int]
    labels: list[int]  # word label on first sub-tokens, IGNORE_INDEX elsewhere
    word_starts: list[int]  # position of each word's first sub-token in input_ids
    type_index: int = -1  # MRC: index of the queried entity type (-1: not an MRC input)
    segment_start: int = 0  # MRC: first position of the sentence segment (token type 1); 0 = one segment

    @property
    def n_words(self) -> int:
        return len(self.word_starts)


def word_chunks(pieces: Sequence[Sequence[int]], budget: int) -> list[tuple[int, int]]:
    """Consecutive ``[start, end)`` word ranges whose sub-tokens fit in ``budget`` (every word's
    pieces already cut to ``budget``)."""
    chunks, start = [], 0
    while start < len(pieces):
        end, used = start, 0
        while end < len(pieces) and used + len(pieces[end]) <= budget:
            used += len(pieces[end])
            end += 1
        chunks.append((start, end))
        start = end
    return chunks


class SubwordAligner:
    """Turns sentences into :class:`Feature` lists for one tokenizer and length limit."""

    def __init__(self, tokenizer, max_length: int):
        self.tokenizer = tokenizer
        limit = getattr(tokenizer, "model_max_length", max_length) or max_length
        self.max_length = int(min(max_length, limit))
        self.prefix, self.suffix = special_token_frame(tokenizer)
        self.n_special = len(self.prefix) + len(self.suffix)
        if self.max_length <= self.n_special:
            raise ValueError(f"max_length={max_length} leaves no room for tokens")
        # a tokenizer: its class, name and the settings that change its pieces (RoBERTa's add_prefix_space)
        self._piece_key = (
            tokenizer.__class__.__name__,
            str(getattr(tokenizer, "name_or_path", id(tokenizer))),
            repr(tokenizer.init_kwargs.get("add_prefix_space")),
            repr(tokenizer.init_kwargs.get("do_lower_case")),
        )
        self._pieces = _PIECE_CACHE.setdefault(self._piece_key, {})

    def word_pieces(self, words: Sequence[str]) -> list[list[int]]:
        """Sub-token ids of each word; a word the tokenizer erases maps to ``[UNK]``."""
        missing = sorted({w for w in words if w not in self._pieces})
        if missing:
            encoded = self.tokenizer(missing, add_special_tokens=False)["input_ids"]
            unk = [self.tokenizer.unk_token_id]
            for w, ids in zip(missing, encoded, strict=True):
                self._pieces[w] = list(ids) or unk
        return [self._pieces[w] for w in words]

    def frame(self) -> tuple:
        """What decides the inputs besides the sentences and labels: tokenizer, length limit, special
        tokens (an MRC aligner adds its queries)."""
        return type(self).__name__, self._piece_key, self.max_length, tuple(self.prefix), tuple(self.suffix)

    def encode(self, sentences: Sequence[Sentence], label_set: LabelSet) -> list[Feature]:
        """The inputs of ``sentences`` under ``label_set``. The same sentences encoded the same way
        again (dev and test in every cell of a sweep that runs in one process) are the features
        made the first time: the list is shared, treat it as read-only."""
        key = (self.frame(), repr(label_set), tuple(sentences))
        if key in _ENCODED:
            _ENCODED.move_to_end(key)
            return _ENCODED[key]
        features = self._encode(sentences, label_set)
        _ENCODED[key] = features
        while len(_ENCODED) > ENCODED_KEPT:
            _ENCODED.popitem(last=False)
        return features

    def _encode(self, sentences: Sequence[Sentence], label_set: LabelSet) -> list[Feature]:
        """One feature per sentence chunk, labelled with ``label_set``'s ids."""
        label2id = label_set.label2id
        self.word_pieces([w for s in sentences for w in s.tokens])
        budget = self.max_length - self.n_special
        features: list[Feature] = []
        for si, sent in enumerate(sentences):
            pieces = [self._pieces[w][:budget] for w in sent.tokens]
            for start, end in word_chunks(pieces, budget):
                features.append(self._feature(si, start, pieces[start:end], sent.tags[start:end], label2id))
        return features

    def _feature(self, si, offset, pieces, tags, label2id) -> Feature:
        body: list[int] = []
        starts: list[int] = []
        for p in pieces:
            starts.append(len(body))
            body.extend(p)
        input_ids = self.prefix + body + self.suffix
        labels = [IGNORE_INDEX] * len(input_ids)
        word_starts = [s + len(self.prefix) for s in starts]
        for pos, tag in zip(word_starts, tags, strict=True):
            labels[pos] = label2id[tag]
        return Feature(si, offset, input_ids, labels, word_starts)


# Per-type word labels of the MRC framing: a tag projected on the queried type X (B-X, I-X of
# the last word of a span, single-word span, other I-X, anything else). The heads read what
# they need: inside = id > 0, start = B or S, end = E or S.
SPAN_TAGS = ("O", "B", "E", "S", "I")


def project_on_type(tags: Sequence[str], entity_type: str) -> list[int]:
    """Word labels (ids into :data:`SPAN_TAGS`) of one sentence for one queried type, from its
    IOB2 tags: spans of other types are ``O``."""
    inside = [t[2:] == entity_type and t[0] in "BI" for t in tags]
    out = []
    for i, tag in enumerate(tags):
        if not inside[i]:
            out.append(0)
            continue
        begins = tag[0] == "B" or i == 0 or not inside[i - 1]
        ends = i + 1 == len(tags) or not (inside[i + 1] and tags[i + 1][0] == "I")
        out.append(
            SPAN_TAGS.index(
                {(True, False): "B", (False, True): "E", (True, True): "S", (False, False): "I"}[(begins, ends)]
            )
        )
    return out


def special_token_frame(tokenizer) -> tuple[list[int], list[int]]:
    """Special token ids placed before and after a single sentence (``[CLS]``/``[SEP]``, ...)."""
    enc = tokenizer(["a"], is_split_into_words=True)
    ids, word_ids = enc["input_ids"], enc.word_ids()
    first = word_ids.index(0)
    last = len(word_ids) - 1 - word_ids[::-1].index(0)
    return list(ids[:first]), list(ids[last + 1 :])


def pair_token_frame(tokenizer) -> tuple[list[int], list[int], list[int]]:
    """Special token ids before, between and after a (query, sentence) pair: ``[CLS]``, ``[SEP]``,
    ``[SEP]`` for BERT; ``<s>``, ``</s></s>``, ``</s>`` for RoBERTa."""
    enc = tokenizer(["a"], ["b"], is_split_into_words=True)
    ids, seq = enc["input_ids"], enc.sequence_ids()
    first, second = seq.index(0), seq.index(1)
    last = len(seq) - 1 - seq[::-1].index(1)
    return list(ids[:first]), list(ids[first + 1 : second]), list(ids[last + 1 :])


class QueryAligner(SubwordAligner):
    """MRC inputs: one :class:`Feature` per (sentence chunk, queried type). A sentence too long
    together with the query is chunked like in :class:`SubwordAligner`, with the query repeated
    in every chunk; labels are :func:`project_on_type` ids."""

    def __init__(self, tokenizer, max_length: int, queries: Sequence[str]):
        super().__init__(tokenizer, max_length)
        self.prefix, self.middle, self.suffix = pair_token_frame(tokenizer)
        self.queries = [list(q) for q in tokenizer(list(queries), add_special_tokens=False)["input_ids"]]
        for q, text in zip(self.queries, queries, strict=True):
            if self.max_length - len(self.prefix + q + self.middle + self.suffix) < 8:
                raise ValueError(
                    f"the MRC query {text!r} leaves fewer than 8 of data.max_length={self.max_length} "
                    "sub-tokens for the sentence: shorten it (dataset.queries) or raise max_length"
                )

    def frame(self) -> tuple:
        return (*super().frame(), tuple(self.middle), tuple(tuple(q) for q in self.queries))

    def _encode(self, sentences: Sequence[Sentence], label_set: LabelSet) -> list[Feature]:
        """One feature per sentence chunk and entity type of ``label_set`` (one query each)."""
        self.word_pieces([w for s in sentences for w in s.tokens])
        features: list[Feature] = []
        for ti, (etype, query) in enumerate(zip(label_set.entity_types, self.queries, strict=True)):
            head = self.prefix + query + self.middle
            budget = self.max_length - len(head) - len(self.suffix)
            for si, sent in enumerate(sentences):
                labels = project_on_type(sent.tags, etype)
                pieces = [self._pieces[w][:budget] for w in sent.tokens]
                for start, end in word_chunks(pieces, budget):
                    features.append(self._query_feature(si, start, ti, head, pieces[start:end], labels[start:end]))
        return features

    def _query_feature(self, si, offset, ti, head, pieces, word_labels) -> Feature:
        input_ids, word_starts = list(head), []
        for p in pieces:
            word_starts.append(len(input_ids))
            input_ids.extend(p)
        input_ids += self.suffix
        labels = [IGNORE_INDEX] * len(input_ids)
        for pos, label in zip(word_starts, word_labels, strict=True):
            labels[pos] = label
        return Feature(si, offset, input_ids, labels, word_starts, type_index=ti, segment_start=len(head))


class BatchLayout(NamedTuple):
    """What the host knows of a batch's rows when it builds it (``batch["layout"]``): read on the
    host instead of asking the device, where every question waits for the queued work. (Its
    sub-word counts are the shapes of its packing plan, ``batch["pack"]``.)"""

    words: tuple[int, ...]  # words of each row
    sentences: tuple[int, ...]  # sentence index of each row in its split
    offsets: tuple[int, ...]  # index of each row's first word in its sentence
    types: tuple[int, ...]  # MRC: the queried entity type of each row (empty: not MRC)
    corpora: tuple[int, ...]  # corpus index of each row (0 = main; multi-corpus batches)


FRAMINGS = ("tagging", "mrc")


def aligner_for(framing: str, tokenizer, max_length: int, queries: Sequence[str] = ()) -> SubwordAligner:
    """The encoder inputs an objective's ``framing`` reads (``NERModule.framing``, ``data.framing``):
    ``tagging`` one input per sentence chunk (:class:`SubwordAligner`), ``mrc`` one per chunk and
    entity type with that type's query (:class:`QueryAligner`, ``queries`` in label order). The
    data module, an exported model and prediction all build their inputs through this."""
    if framing == "mrc":
        return QueryAligner(tokenizer, max_length, list(queries))
    if framing == "tagging":
        return SubwordAligner(tokenizer, max_length)
    raise ValueError(f"data.framing must be one of {FRAMINGS}, got {framing!r}")


def collate_features(features: Sequence[Feature], pad_token_id: int) -> dict:
    """Pad a batch to its longest member; ``word_starts`` padded with 0 and masked. Also carries
    its :class:`BatchLayout` (``layout``) and packing plan (``pack``, ``data/packing.py``)."""
    n = len(features)
    t = max(len(f.input_ids) for f in features)
    w = max(f.n_words for f in features)
    lengths = [len(f.input_ids) for f in features]
    batch: dict[str, Any] = {  # one tensor per field from padded lists (a tensor per row and field cost ~3x more)
        "input_ids": torch.tensor(
            [f.input_ids + [pad_token_id] * (t - k) for f, k in zip(features, lengths, strict=True)]
        ),
        "attention_mask": torch.tensor([[1] * k + [0] * (t - k) for k in lengths]),
        "labels": torch.tensor([f.labels + [IGNORE_INDEX] * (t - k) for f, k in zip(features, lengths, strict=True)]),
        "word_starts": torch.tensor([f.word_starts + [0] * (w - f.n_words) for f in features]),
        "word_mask": torch.tensor([[True] * f.n_words + [False] * (w - f.n_words) for f in features]),
        "sentence_index": torch.tensor([f.sentence_index for f in features]),
        "word_offset": torch.tensor([f.word_offset for f in features]),
    }
    batch["pack"] = pack_plan(lengths, t)
    batch["layout"] = BatchLayout(
        words=tuple(f.n_words for f in features),
        sentences=tuple(f.sentence_index for f in features),
        offsets=tuple(f.word_offset for f in features),
        types=tuple(f.type_index for f in features) if features[0].type_index >= 0 else (),
        corpora=(0,) * n,
    )
    if features[0].type_index >= 0:  # MRC: the queried type, and segment ids (query 0, sentence 1)
        batch["type_index"] = torch.tensor([f.type_index for f in features])
        segment = torch.tensor([f.segment_start for f in features])
        batch["token_type_ids"] = (
            (torch.arange(t)[None, :] >= segment[:, None]) & batch["attention_mask"].bool()
        ).long()
    return batch

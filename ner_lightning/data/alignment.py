"""Word -> sub-word alignment, the Hugging Face way, with no word ever dropped.

The first sub-token of a word carries the word's label; other sub-tokens, special tokens and
padding carry ``-100``. Each distinct word is tokenised once per tokenizer (cached across
splits and across the runs of one process). A sentence longer than the encoder's limit is cut
into consecutive word chunks that each fit, so every gold word is predicted and evaluation is
always against the full gold sequence.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ner_lightning.data.corpus import Sentence

IGNORE_INDEX = -100

_PIECE_CACHE: dict[tuple[str, str], dict[str, list[int]]] = {}


@dataclass(frozen=True)
class Feature:
    """One encoder input: a whole sentence, or a chunk of one, with its word positions."""

    sentence_index: int  # index into the split's sentence list
    word_offset: int  # index of the chunk's first word in the sentence
    input_ids: list[int]
    labels: list[int]  # word label on first sub-tokens, IGNORE_INDEX elsewhere
    word_starts: list[int]  # position of each word's first sub-token in input_ids

    @property
    def n_words(self) -> int:
        return len(self.word_starts)


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
        key = (tokenizer.__class__.__name__, str(getattr(tokenizer, "name_or_path", id(tokenizer))))
        self._pieces = _PIECE_CACHE.setdefault(key, {})

    def word_pieces(self, words: Sequence[str]) -> list[list[int]]:
        """Sub-token ids of each word; a word the tokenizer erases maps to ``[UNK]``."""
        missing = sorted({w for w in words if w not in self._pieces})
        if missing:
            encoded = self.tokenizer(missing, add_special_tokens=False)["input_ids"]
            unk = [self.tokenizer.unk_token_id]
            for w, ids in zip(missing, encoded):
                self._pieces[w] = list(ids) or unk
        return [self._pieces[w] for w in words]

    def encode(self, sentences: Sequence[Sentence], label2id: dict[str, int]) -> list[Feature]:
        self.word_pieces([w for s in sentences for w in s.tokens])
        budget = self.max_length - self.n_special
        features: list[Feature] = []
        for si, sent in enumerate(sentences):
            pieces = [self._pieces[w][:budget] for w in sent.tokens]
            start = 0
            while start < len(pieces):
                end, used = start, 0
                while end < len(pieces) and used + len(pieces[end]) <= budget:
                    used += len(pieces[end])
                    end += 1
                features.append(self._feature(si, start, pieces[start:end], sent.tags[start:end], label2id))
                start = end
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
        for pos, tag in zip(word_starts, tags):
            labels[pos] = label2id[tag]
        return Feature(si, offset, input_ids, labels, word_starts)


def special_token_frame(tokenizer) -> tuple[list[int], list[int]]:
    """Special token ids placed before and after a single sentence (``[CLS]``/``[SEP]``, ...)."""
    enc = tokenizer(["a"], is_split_into_words=True)
    ids, word_ids = enc["input_ids"], enc.word_ids()
    first = word_ids.index(0)
    last = len(word_ids) - 1 - word_ids[::-1].index(0)
    return list(ids[:first]), list(ids[last + 1 :])


def collate_features(features: Sequence[Feature], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Pad a batch to its longest member; ``word_starts`` padded with 0 and masked."""
    n = len(features)
    t = max(len(f.input_ids) for f in features)
    w = max(f.n_words for f in features)
    input_ids = torch.full((n, t), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((n, t), dtype=torch.long)
    labels = torch.full((n, t), IGNORE_INDEX, dtype=torch.long)
    word_starts = torch.zeros((n, w), dtype=torch.long)
    word_mask = torch.zeros((n, w), dtype=torch.bool)
    for i, f in enumerate(features):
        k = len(f.input_ids)
        input_ids[i, :k] = torch.tensor(f.input_ids)
        attention_mask[i, :k] = 1
        labels[i, :k] = torch.tensor(f.labels)
        word_starts[i, : f.n_words] = torch.tensor(f.word_starts)
        word_mask[i, : f.n_words] = True
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "labels": labels,
        "word_starts": word_starts,
        "word_mask": word_mask,
        "sentence_index": torch.tensor([f.sentence_index for f in features]),
        "word_offset": torch.tensor([f.word_offset for f in features]),
    }

"""Where a batch's words are, as the host knows it: its :class:`BatchLayout` (words per row,
sentence, word offset, corpus), the real words of its ``(B, W)`` grid, indices sent to the
device without waiting for it, and whole sentences reassembled from the decoded chunks of an
evaluation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from ner_lightning.data.alignment import BatchLayout
from ner_lightning.data.corpus import OUTSIDE
from ner_lightning.span_counts import PlacedWords


def layout_of(batch: dict) -> BatchLayout:
    """The batch's :class:`BatchLayout`: carried by every collated batch; rebuilt here (asking
    the device) for a batch made by hand."""
    if "layout" in batch:
        return batch["layout"]
    rows = batch["word_mask"].size(0)
    return BatchLayout(
        words=tuple(batch["word_mask"].sum(1).tolist()),
        sentences=tuple(batch["sentence_index"].tolist()) if "sentence_index" in batch else tuple(range(rows)),
        offsets=tuple(batch["word_offset"].tolist()) if "word_offset" in batch else (0,) * rows,
        types=tuple(batch["type_index"].tolist()) if "type_index" in batch else (),
        corpora=tuple(batch["corpus"].tolist()) if "corpus" in batch else (0,) * rows,
    )


def host_index(values: list[int] | np.ndarray, device: torch.device) -> torch.Tensor:
    """Indices the host knows, as a long tensor on ``device`` without waiting for it: on a GPU a
    pinned copy sent asynchronously (a plain copy to the GPU waits for every queued kernel)."""
    index = torch.as_tensor(values, dtype=torch.long)
    return index.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else index


class RealWords(NamedTuple):
    """The real (non-padding) words of a ``(B, W)`` word grid, from the words per row the host
    knows (:class:`BatchLayout`): ``x.flatten(0, 1)[flat]`` is ``x[word_mask]`` (same words, same
    order) without the device computing where the mask is true, which waits for the queued work."""

    flat: torch.Tensor  # (N,) index of each real word in the flattened grid
    rows: torch.Tensor  # (N,) its row

    @classmethod
    def of(cls, words: tuple[int, ...], width: int, device: torch.device) -> RealWords:
        flat = [r * width + j for r, n in enumerate(words) for j in range(n)]
        return cls(host_index(flat, device), host_index([r for r, n in enumerate(words) for _ in range(n)], device))

    def select(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, W, ...) -> (N, ...)``: the real words' entries, as ``x[word_mask]``."""
        return x.flatten(0, 1)[self.flat]


def whole_sentences(collected: list, lengths: list[int], id2label: dict[int, str], stage: str) -> list[list[str]]:
    """Whole-sentence IOB2 tags from the ``(sentence, word offset, label ids)`` of every decoded
    chunk; ``lengths``: words per sentence, each predicted exactly once (else an error naming
    ``stage``)."""
    pred = [[OUTSIDE] * n for n in lengths]
    covered = 0
    for si, off, ids in collected:
        pred[si][off : off + len(ids)] = [id2label[i] for i in ids]
        covered += len(ids)
    if covered != sum(lengths):
        raise RuntimeError(f"{stage}: predicted {covered} words for {sum(lengths)} words")
    return pred


def host_entries(
    collected: list[tuple[torch.Tensor, BatchLayout]], entry: Callable[[BatchLayout, int, list], tuple]
) -> dict[int, list[tuple]]:
    """Per corpus index, ``entry(layout, row, values)`` of every example of the decoded batches
    ``collected`` (output ``(B, W, ...)`` with its layout): every output moved to the host in one
    transfer."""
    if not collected:
        return {}
    width = max(out.size(1) for out, _ in collected)
    padded = [F.pad(out, (0, 0) * (out.dim() - 2) + (0, width - out.size(1))) for out, _ in collected]
    values = iter(torch.cat(padded).tolist())
    entries: dict[int, list[tuple]] = {}
    for _, layout in collected:
        for row, n_words in enumerate(layout.words):
            entries.setdefault(layout.corpora[row], []).append(entry(layout, row, next(values)[:n_words]))
    return entries


@dataclass
class Placement:
    """Where :func:`placed_words` takes each word from and puts it, for one list of batches."""

    layouts: list[BatchLayout]
    shapes: list[tuple[int, int]]
    source: torch.Tensor  # (N,) on the device
    target: torch.Tensor
    covered: np.ndarray  # words decoded per sentence

    def fits(self, layouts: list[BatchLayout], shapes: list[tuple[int, int]], device: torch.device) -> bool:
        """The same batches again: the same layout objects (a cached loader), shapes and device."""
        same = len(layouts) == len(self.layouts) and all(a is b for a, b in zip(layouts, self.layouts, strict=True))
        return same and shapes == self.shapes and self.source.device == device


def _placement(
    layouts: list[BatchLayout], shapes: list[tuple[int, int]], starts: np.ndarray, sentences_n: int, corpus: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For :func:`placed_words`: each of ``corpus``'s words, its index in the batches' outputs
    flattened and concatenated (``shapes``: each one's rows and width) and in the split, and the
    words decoded per sentence."""
    batch_base = np.cumsum([0] + [rows * width for rows, width in shapes])[:-1]
    # every row of every batch: its first word's place in the concatenated outputs
    row_source = np.concatenate(
        [base + np.arange(rows) * width for base, (rows, width) in zip(batch_base, shapes, strict=True)]
    )
    sentences = np.concatenate([np.asarray(layout.sentences, dtype=np.int64) for layout in layouts])
    offsets = np.concatenate([np.asarray(layout.offsets, dtype=np.int64) for layout in layouts])
    words = np.concatenate([np.asarray(layout.words, dtype=np.int64) for layout in layouts])
    mine = np.concatenate([np.asarray(layout.corpora, dtype=np.int64) for layout in layouts]) == corpus
    row_source, sentences, offsets, words = row_source[mine], sentences[mine], offsets[mine], words[mine]
    within = np.arange(int(words.sum())) - np.repeat(np.cumsum(words) - words, words)  # word index in its row
    source = np.repeat(row_source, words) + within
    target = np.repeat(starts[sentences] + offsets, words) + within
    covered = np.bincount(sentences, weights=words, minlength=sentences_n).astype(np.int64)
    return source, target, covered


def placed_words(
    collected: list[tuple[torch.Tensor, BatchLayout]],
    starts: np.ndarray,
    lengths: list[int],
    corpus: int,
    outside: int,
    stage: str,
    limited: bool,
    cache: dict | None = None,
) -> PlacedWords:
    """The decoded label ids of corpus ``corpus``'s rows of every batch ``collected`` (output
    ``(..., B, W)`` with its layout) at their words' places in the split (``starts``: each
    sentence's first word; ``lengths``: its words), in one gather on the device; the indices
    built on the host from the layouts, all rows at once. Each word is predicted exactly once
    (else an error naming ``stage``); ``limited``: only some batches ran, so only the sentences
    they covered whole count. ``cache``: a dict kept between evaluations of the same split; its
    indices are reused while the batches' layouts are the same objects (a cached dev loader)."""
    total = int(sum(lengths))
    if not collected:
        nothing = torch.full((total,), outside, dtype=torch.long)
        if not limited:
            if total:
                raise RuntimeError(f"{stage}: predicted 0 words for {total} words")
            return PlacedWords(nothing, None, None)
        return PlacedWords(nothing, torch.zeros(total, dtype=torch.bool), [])
    layouts = [layout for _, layout in collected]
    shapes = [(out.size(-2), out.size(-1)) for out, _ in collected]
    device = collected[0][0].device
    placement = cache.get("placement") if cache is not None else None
    if placement is None or not placement.fits(layouts, shapes, device):
        source, target, covered = _placement(layouts, shapes, starts, len(lengths), corpus)
        placement = Placement(layouts, shapes, host_index(source, device), host_index(target, device), covered)
        if cache is not None:
            cache["placement"] = placement
    covered = placement.covered
    flat = torch.cat([out.flatten(-2) for out, _ in collected], -1)
    tags = torch.full((*flat.shape[:-1], total), outside, dtype=torch.long, device=device)
    tags[..., placement.target] = flat[..., placement.source].long()
    if not limited:
        if int(covered.sum()) != total:
            raise RuntimeError(f"{stage}: predicted {int(covered.sum())} words for {total} words")
        return PlacedWords(tags, None, None)
    whole = covered == np.asarray(lengths)
    counted = torch.as_tensor(np.repeat(whole, lengths))
    counted = counted.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else counted
    return PlacedWords(tags, counted, [int(s) for s in np.flatnonzero(whole)])

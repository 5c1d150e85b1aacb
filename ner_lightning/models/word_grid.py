"""Where a batch's words are, as the host knows it: its :class:`BatchLayout` (words per row,
sentence, word offset, corpus), the real words of its ``(B, W)`` grid, indices sent to the
device without waiting for it, and whole sentences reassembled from the decoded chunks of an
evaluation."""

from __future__ import annotations

from collections.abc import Callable
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


def placed_words(
    collected: list[tuple[torch.Tensor, BatchLayout]],
    starts: np.ndarray,
    lengths: list[int],
    corpus: int,
    outside: int,
    stage: str,
    limited: bool,
) -> PlacedWords:
    """The decoded label ids of corpus ``corpus``'s rows of every batch ``collected`` (output
    ``(..., B, W)`` with its layout) at their words' places in the split (``starts``: each
    sentence's first word; ``lengths``: its words), in one gather on the device; indices built on
    the host from the layouts. Each word is predicted exactly once (else an error naming
    ``stage``); ``limited``: only some batches ran, so only the sentences they covered whole count."""
    sources, targets, flats, offset = [], [], [], 0
    covered = np.zeros(len(lengths), dtype=np.int64)
    for out, layout in collected:
        rows, width = out.size(-2), out.size(-1)
        mine = np.flatnonzero(np.asarray(layout.corpora) == corpus)  # rows of this corpus
        sentences, offsets = np.asarray(layout.sentences)[mine], np.asarray(layout.offsets)[mine]
        words = np.asarray(layout.words)[mine]
        column = np.arange(width)
        valid = column[None, :] < words[:, None]
        sources.append((mine[:, None] * width + column[None, :] + offset)[valid])
        targets.append(((starts[sentences] + offsets)[:, None] + column[None, :])[valid])
        np.add.at(covered, sentences, words)
        flats.append(out.flatten(-2))
        offset += rows * width
    total = int(sum(lengths))
    lead = flats[0].shape[:-1] if flats else ()
    device = flats[0].device if flats else torch.device("cpu")
    tags = torch.full((*lead, total), outside, dtype=torch.long, device=device)
    if flats:
        source, target = np.concatenate(sources), np.concatenate(targets)
        tags[..., host_index(target, device)] = torch.cat(flats, -1)[..., host_index(source, device)].long()
    if not limited:
        if int(covered.sum()) != total:
            raise RuntimeError(f"{stage}: predicted {int(covered.sum())} words for {total} words")
        return PlacedWords(tags, None, None)
    whole = covered == np.asarray(lengths)
    counted = torch.as_tensor(np.repeat(whole, lengths))
    counted = counted.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else counted
    return PlacedWords(tags, counted, [int(s) for s in np.flatnonzero(whole)])

"""Where a batch's words are, as the host knows it: its :class:`BatchLayout` (words per row,
sentence, word offset, corpus), the real words of its ``(B, W)`` grid, indices sent to the
device without waiting for it, and whole sentences reassembled from the decoded chunks of an
evaluation."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F

from ner_lightning.data.alignment import BatchLayout
from ner_lightning.data.corpus import OUTSIDE


def sentences_seen(gold: list[list[str]], chunks: list) -> tuple[list[list[str]], list]:
    """The gold sentences whose every word was predicted by ``chunks`` (``(sentence, word
    offset, label ids)``), and those chunks renumbered to them: what a batch-limited evaluation
    can score."""
    words: dict[int, int] = {}
    for si, _, ids in chunks:
        words[si] = words.get(si, 0) + len(ids)
    seen = sorted(si for si, n in words.items() if n == len(gold[si]))
    new_index = {si: i for i, si in enumerate(seen)}
    return [gold[si] for si in seen], [(new_index[si], off, ids) for si, off, ids in chunks if si in new_index]


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


def host_index(values: list[int], device: torch.device) -> torch.Tensor:
    """Indices the host knows, as a long tensor on ``device`` without waiting for it: on a GPU a
    pinned copy sent asynchronously (a plain copy to the GPU waits for every queued kernel)."""
    index = torch.tensor(values, dtype=torch.long)
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

"""How a split becomes batches: the training samplers (an epoch's order, or length-grouped
batches, each reproducible from (seed, epoch)) and the evaluation batches (sorted by length and
collated once per process)."""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Sequence
from typing import cast

import numpy as np
from torch.utils.data import DataLoader, Dataset, Sampler

from ner_lightning.data.alignment import ENCODED_KEPT, Feature, collate_features
from ner_lightning.data.sampling import partition_rng


class EpochShuffleSampler(Sampler[int]):
    """A random order of ``n`` examples that depends only on (``seed``, epoch): Lightning calls
    ``set_epoch`` before every epoch, so a run resumed from a checkpoint at epoch e sees the
    batches an uninterrupted run sees."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        yield from partition_rng("train-order", self.seed, self.epoch).permutation(self.n).tolist()


class EpochForwarding:
    """Lightning sets the epoch on a loader's ``sampler`` and ``batch_sampler.sampler`` only
    (lightning_fabric ``_set_sampler_epoch``), never on a batch sampler itself: a batch sampler
    whose batches depend on the epoch exposes one of these as its ``sampler``."""

    def __init__(self, batch_sampler):
        self.batch_sampler = batch_sampler

    def set_epoch(self, epoch: int) -> None:
        self.batch_sampler.set_epoch(epoch)


class LengthGroupedBatchSampler(Sampler[list[int]]):
    """Random batches of similar length (Hugging Face's ``LengthGroupedSampler``), reproducible
    from (``seed``, epoch).

    Each epoch shuffles all examples, cuts them into windows of ``window`` batches, sorts each
    window by length, cuts it into batches and shuffles the batch order; the batch holding the
    longest example goes first (an out-of-memory error shows at the first step). ``window=None``
    is HF's rule, ``min(n // (4 * batch_size), 50)`` batches (at least 1): at least four windows
    per epoch, so small training sets keep their randomness — with one window covering the
    whole epoch the batches would be the same every epoch, only their order shuffled.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int, window: int | None = None):
        self.lengths = np.asarray(lengths)
        self.batch_size = batch_size
        self.window = window if window is not None else max(1, min(len(self.lengths) // (4 * batch_size), 50))
        self.seed, self.epoch = seed, 0
        self.sampler = EpochForwarding(self)  # so Lightning's set_epoch reaches us

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)

    def __iter__(self):
        rng = partition_rng("length-grouped", self.seed, self.epoch)
        perm = rng.permutation(len(self.lengths))
        span = self.batch_size * self.window
        batches = []
        for i in range(0, len(perm), span):
            chunk = perm[i : i + span]
            chunk = chunk[np.argsort(-self.lengths[chunk], kind="stable")]
            batches += [chunk[j : j + self.batch_size].tolist() for j in range(0, len(chunk), self.batch_size)]
        batches = [batches[k] for k in rng.permutation(len(batches))]
        longest = max(range(len(batches)), key=lambda k: self.lengths[batches[k]].max())
        batches[0], batches[longest] = batches[longest], batches[0]
        yield from batches


def sorted_batches(
    items: list, batch_size: int, collate, length=lambda f: len(f.input_ids), max_tokens: int | None = None
) -> list[dict]:
    """Evaluation batches: ``items`` sorted by length, cut at ``batch_size`` items — or, with
    ``max_tokens``, where one more item would make rows x longest exceed ``max_tokens`` — and
    collated once (far less padding than file order; the same batches for a split every time)."""
    items = sorted(items, key=length)
    if max_tokens is None:
        return [collate(items[i : i + batch_size]) for i in range(0, len(items), batch_size)]
    batches, start = [], 0
    for end in range(1, len(items) + 1):
        if end == len(items) or (end + 1 - start) * length(items[end]) > max_tokens:
            batches.append(collate(items[start:end]))
            start = end
    return batches


def _as_built(batch: dict) -> dict:
    """A pre-built batch as it is (a loader's default would walk it, layout tuples included)."""
    return batch


def prebuilt_loader(batches: list[dict]) -> DataLoader:
    """A loader of batches built (collated, sorted, pinned) beforehand, in their order."""
    # batch_size=None: collate_fn takes one item, where torch's annotation expects a list of them.
    return DataLoader(list_dataset(batches), batch_size=None, shuffle=False, collate_fn=_as_built)  # type: ignore[arg-type]


def list_dataset(items: list) -> Dataset:
    """A list as a ``DataLoader``'s map-style dataset: it is one at run time (``__getitem__``,
    ``__len__``); torch's annotations name only ``Dataset``."""
    return cast(Dataset, items)


_SORTED: OrderedDict[tuple, tuple[list, list[dict]]] = OrderedDict()  # see shared_sorted_batches


def shared_sorted_batches(
    features: list[Feature], batch_size: int, pad_token_id: int, max_tokens: int | None = None
) -> list[dict]:
    """:func:`sorted_batches` of an encoded split, made once per process for each features list
    (``SubwordAligner.encode`` shares the list of a split it has encoded before): every cell of a
    sweep that runs in one process evaluates the same dev and test batches without collating them
    again. The batches are shared, treat them as read-only."""
    key = (id(features), batch_size, pad_token_id, max_tokens)
    if key in _SORTED and _SORTED[key][0] is features:
        _SORTED.move_to_end(key)
        return _SORTED[key][1]
    batches = sorted_batches(
        features, batch_size, functools.partial(collate_features, pad_token_id=pad_token_id), max_tokens=max_tokens
    )
    _SORTED[key] = (features, batches)
    while len(_SORTED) > ENCODED_KEPT:
        _SORTED.popitem(last=False)
    return batches

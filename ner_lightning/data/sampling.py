"""Low-resource partitions: which training sentences a run sees.

A partition depends only on (dataset, split, size, partition index, seed) — never on the
loss, the encoder or the batch order — so every method of a grid is trained on the same
sentences.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np

from ner_lightning.data.corpus import Sentence


def partition_rng(*key: object) -> np.random.Generator:
    """A generator seeded from a readable key, stable across processes and platforms."""
    text = "|".join(str(k) for k in key)
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    return np.random.default_rng(seed)


def check_partition(partition) -> None:
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise ValueError(f"partition={partition!r}: must be a non-negative integer (0, 1, 2, ...)")


def sample_partition(
    sentences: list[Sentence],
    size: int | str | None,
    partition: int,
    seed: int,
    dataset: str,
    split: str = "train",
    key: str = "size",
    at_most: bool = False,
) -> list[Sentence]:
    """Draw ``size`` sentences uniformly without replacement (file order kept).

    ``size`` of ``None`` or ``"full"`` keeps all sentences. A size larger than the split is
    an error, not a silent cap, unless ``at_most`` (:func:`eval_sample_size`); ``key`` names the
    config key in messages.
    """
    check_partition(partition)
    size = drawn_size(size, len(sentences), dataset, split, key, at_most)
    if size is None:
        return list(sentences)
    rng = partition_rng(dataset, split, size, partition, seed)
    chosen = np.sort(rng.choice(len(sentences), size=size, replace=False))
    return [sentences[i] for i in chosen]


def drawn_size(
    size: int | str | None, available: int, dataset: str, split: str, key: str, at_most: bool = False
) -> int | None:
    """How many of the split's ``available`` sentences :func:`sample_partition` draws (None: all),
    or the ``ValueError`` that names ``key`` and the fix (the preflight checks a cell with it)."""
    size = eval_sample_size(size, available, at_most)
    if size is None or size == "full":
        return None
    if isinstance(size, str) and size.isdigit():
        size = int(size)
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise ValueError(f"{key} must be a positive integer or 'full', got {size!r}")
    if size > available:
        raise ValueError(
            f"{key}={size} is larger than {dataset}/{split}, which has {available} "
            f"sentences; choose {key}<={available} or {key}={'full' if key == 'size' else 'null'}"
        )
    return size


def eval_sample_size(size: int | str | None, available: int, at_most: bool) -> int | str | None:
    """The dev / test sample to draw: ``size`` (``data.dev_size``, ``data.test_size``), or with
    ``at_most`` (``data.eval_size_at_most``) the whole split when it has no more sentences."""
    if at_most and isinstance(size, int) and not isinstance(size, bool) and size >= available:
        return None
    return size


def digest(ids: Iterable[str]) -> str:
    """SHA-256 over sentence ids (order-sensitive): two runs share a partition iff equal."""
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()

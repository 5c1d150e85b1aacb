"""Packing plans: where each sentence of a right-padded batch goes when the batch is packed into
rows as wide as its longest sentence (first fit, longest first).

The plan is made on the host when the batch is built (``data.alignment.collate_features``), from
lengths the collator already knows, and travels with the batch as index tensors: the encoder
(``models.encoder.pack_batch``) then packs and unpacks with gathers and scatters only, and never
asks the device for the lengths (on a GPU such a question waits for all queued work).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

WORTH_PACKING = (
    0.8  # pack an evaluation batch only when its packed rows compute at most this share of its padded positions
)


def worth_packing(padded_positions: int, packed_positions: int) -> bool:
    """Whether packing an evaluation batch saves enough to pay for its block-diagonal attention
    mask: length-sorted evaluation batches (a few per cent of padding) run padded, faster than
    packed (MiniLM on 2 CPU cores: docs/benchmarks.md). Training batches under ``model.pack``
    are always packed (random batches are about half padding)."""
    return packed_positions <= WORTH_PACKING * padded_positions


class PackPlan(NamedTuple):
    """Index tensors of one packing: the ``N`` real sub-words of a padded ``(B, T)`` batch into
    ``(R, L)`` packed rows."""

    source: torch.Tensor  # (N,) flat position (row * T + column) of each real sub-word in the padded batch
    target: torch.Tensor  # (N,) its flat position (row * L + column) in the packed rows
    positions: torch.Tensor  # (N,) its position in its own sentence
    block: torch.Tensor  # (R, L) sentence of each packed slot; an empty slot is a block of its own (< 0)


def first_fit_rows(lengths: list[int]) -> tuple[list[int], list[int], int]:
    """Row and start column of each sentence in rows as wide as the longest (first fit, longest
    first), and the number of rows."""
    capacity = max(lengths)
    used: list[int] = []  # sub-words per row so far
    row_of, start_of = [0] * len(lengths), [0] * len(lengths)
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        row = next((r for r, u in enumerate(used) if u + lengths[i] <= capacity), len(used))
        if row == len(used):
            used.append(0)
        row_of[i], start_of[i] = row, used[row]
        used[row] += lengths[i]
    return row_of, start_of, len(used)


def pack_plan(lengths: list[int], padded_width: int) -> PackPlan:
    """The plan for a right-padded batch whose row ``i`` holds ``lengths[i]`` real sub-words."""
    row_of, start_of, n_rows = first_fit_rows(lengths)
    width = max(start + n for start, n in zip(start_of, lengths, strict=True))
    source: list[int] = []
    target: list[int] = []
    positions: list[int] = []
    sentence: list[int] = []
    for i, n in enumerate(lengths):
        source += range(i * padded_width, i * padded_width + n)
        first = row_of[i] * width + start_of[i]
        target += range(first, first + n)
        positions += range(n)
        sentence += [i] * n
    target_t = torch.tensor(target, dtype=torch.long)
    block = torch.arange(n_rows * width).neg() - 1
    block[target_t] = torch.tensor(sentence, dtype=torch.long)
    return PackPlan(
        torch.tensor(source, dtype=torch.long),
        target_t,
        torch.tensor(positions, dtype=torch.long),
        block.view(n_rows, width),
    )

"""Decoding rules: Viterbi with optional BIO constraints."""
from __future__ import annotations

import torch

NEG = -1e4


def bio_transition_mask(labels: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Allowed moves under IOB2: ``(start (K,), transitions (K, K))`` booleans.

    ``I-X`` may only follow ``B-X`` or ``I-X``; a sentence may not start with ``I-X``.
    """
    k = len(labels)
    start = torch.tensor([not lab.startswith("I-") for lab in labels])
    trans = torch.ones(k, k, dtype=torch.bool)
    for j, lab in enumerate(labels):
        if lab.startswith("I-"):
            for i, prev in enumerate(labels):
                trans[i, j] = prev[2:] == lab[2:] and prev != "O"
    return start, trans


def viterbi_decode(
    emissions: torch.Tensor,
    mask: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
    transitions: torch.Tensor,
) -> list[list[int]]:
    """Best tag path per sequence: argmax Σ start + emissions + transitions + end.

    ``emissions (B, T, K)``, ``mask (B, T)`` with every sequence's first position on.
    """
    b, t, k = emissions.shape
    score = start + emissions[:, 0]
    history = []
    for i in range(1, t):
        cand = score[:, :, None] + transitions[None] + emissions[:, i, None, :]
        best, idx = cand.max(1)
        on = mask[:, i, None]
        score = torch.where(on, best, score)
        history.append(torch.where(on, idx, torch.arange(k, device=idx.device).expand(b, k)))
    score = score + end
    paths = []
    lengths = mask.sum(1).tolist()
    for n in range(b):
        tag = int(score[n].argmax())
        path = [tag]
        for hist in reversed(history[: lengths[n] - 1]):
            tag = int(hist[n, tag])
            path.append(tag)
        paths.append(path[::-1])
    return paths

"""Decoding rules: Viterbi with optional BIO constraints; the MRC framing's span rules."""

from __future__ import annotations

from collections.abc import Sequence

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
    emissions: torch.Tensor, mask: torch.Tensor, start: torch.Tensor, end: torch.Tensor, transitions: torch.Tensor
) -> torch.Tensor:
    """Best tag path per sequence, ``(B, T)`` on the emissions' device: argmax Σ start +
    emissions + transitions + end (MUNCHABLES eq. 6).

    ``emissions (B, T, K)``, ``mask (B, T)`` with every sequence's first position on and its
    real positions first. A masked position keeps the score and back-points each tag to itself,
    so one back-trace from the last position serves every sequence at once: no length is ever
    read on the host. Tags at masked positions are meaningless.
    """
    b, t, k = emissions.shape
    score = start + emissions[:, 0]
    stay = torch.arange(k, device=emissions.device).expand(b, k)
    history = []
    for i in range(1, t):
        cand = score[:, :, None] + transitions[None] + emissions[:, i, None, :]
        best, idx = cand.max(1)
        on = mask[:, i, None]
        score = torch.where(on, best, score)
        history.append(torch.where(on, idx, stay))
    tag = (score + end).argmax(1, keepdim=True)  # (B, 1)
    path = [tag]
    for hist in reversed(history):
        tag = hist.gather(1, tag)
        path.append(tag)
    return torch.cat(path[::-1], 1)


def inside_spans(p_inside: Sequence[float]) -> list[tuple[int, int, float]]:
    """MRC tagger head (Y = 2): every maximal run of words with P(inside) > 0.5 (the argmax)
    is one span ``(first, last, score)``, score = mean P(inside) over the run. Two adjacent
    entities of the queried type come out as one span (the binary decision cannot separate them)."""
    out, start = [], None
    for i, p in enumerate([*p_inside, 0.0]):
        if p > 0.5 and start is None:
            start = i
        elif p <= 0.5 and start is not None:
            out.append((start, i - 1, sum(p_inside[start:i]) / (i - start)))
            start = None
    return out


def pointer_spans(p_start: Sequence[float], p_end: Sequence[float]) -> list[tuple[int, int, float]]:
    """MRC pointer heads (Li et al. 2020, start/end): each word with P(start) > 0.5 is matched
    with the nearest word at or after it with P(end) > 0.5 (Li et al.'s heuristic matching for
    flat NER, no match matrix); score = mean of the two probabilities. A start with no end after
    it gives no span."""
    ends = [j for j, p in enumerate(p_end) if p > 0.5]
    out = []
    for i, p in enumerate(p_start):
        if p > 0.5:
            j = next((e for e in ends if e >= i), None)
            if j is not None:
                out.append((i, j, (p + p_end[j]) / 2))
    return out


def merge_typed_spans(
    candidates: Sequence[tuple[str, int, int, float]], n_words: int, type_order: Sequence[str]
) -> list[str]:
    """One IOB2 sequence from the spans of every queried type, ``(type, first, last, score)``.

    Overlaps are resolved greedily: spans are taken by descending score (ties: the longer span,
    then the type listed first in ``type_order``, then the earlier start), and a span that
    overlaps one already taken is dropped. Non-overlapping spans of different types all stay.
    """
    rank = {t: k for k, t in enumerate(type_order)}
    tags = ["O"] * n_words
    taken = [False] * n_words
    for etype, first, last, _ in sorted(candidates, key=lambda c: (-c[3], c[1] - c[2], rank[c[0]], c[1])):
        if any(taken[first : last + 1]):
            continue
        taken[first : last + 1] = [True] * (last - first + 1)
        tags[first] = f"B-{etype}"
        tags[first + 1 : last + 1] = [f"I-{etype}"] * (last - first)
    return tags

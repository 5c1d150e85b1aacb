"""Data augmentation of a training set (Dai & Adel 2020): label-wise token replacement (LwTR),
mention replacement (MR) and shuffling within segments (SiS); the last regime applied
(``data/regimes.py`` has the order)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from ner_lightning.data.corpus import Sentence, split_tag
from ner_lightning.data.regimes import mention_spans

AUGMENTATIONS = ("lwtr", "mr", "sis")


def augment(
    sentences: Sequence[Sentence], methods: Sequence[str], rate: float, rng: np.random.Generator
) -> list[Sentence]:
    """Originals plus one augmented copy per sentence (id ``<id>#a``).

    Each copy applies the listed transformations in order, each at ``rate``:
    ``lwtr`` label-wise token replacement (each token, with probability ``rate``, becomes a
    token drawn from the training tokens with the same label); ``mr`` mention replacement
    (each mention, with probability ``rate``, becomes a training mention of the same type, its
    tags rebuilt as B-/I-); ``sis`` shuffle within segments (each maximal run of one label —
    a mention or a stretch of ``O`` — is shuffled with probability ``rate``). Replacements are
    drawn only from ``sentences`` (the training partition).
    """
    unknown = set(methods) - set(AUGMENTATIONS)
    if unknown:
        raise ValueError(f"data.augment.methods: unknown {sorted(unknown)}; choose from {AUGMENTATIONS}")
    by_label: dict[str, list[str]] = defaultdict(list)
    mentions: dict[str | None, list[tuple[str, ...]]] = defaultdict(list)  # by entity type
    for s in sentences:
        for tok, tag in zip(s.tokens, s.tags, strict=True):
            by_label[tag].append(tok)
        for a, b in mention_spans(s.tags):
            mentions[split_tag(s.tags[a])[1]].append(s.tokens[a:b])
    out = list(sentences)
    for s in sentences:
        toks, tags = list(s.tokens), list(s.tags)
        for m in methods:
            if m == "lwtr":
                toks = [
                    by_label[g][rng.integers(len(by_label[g]))] if rng.random() < rate else t
                    for t, g in zip(toks, tags, strict=True)
                ]
            elif m == "mr":
                new_t, new_g, i = [], [], 0
                for a, b in mention_spans(tags) + [(len(tags), len(tags))]:
                    new_t += toks[i:a]
                    new_g += tags[i:a]
                    if a < len(tags):
                        etype = split_tag(tags[a])[1]
                        seg = list(toks[a:b])
                        if rng.random() < rate:
                            pool = mentions[etype]
                            seg = list(pool[rng.integers(len(pool))])
                        new_t += seg
                        new_g += [f"B-{etype}"] + [f"I-{etype}"] * (len(seg) - 1)
                    i = b
                toks, tags = new_t, new_g
            else:
                segs = _segments(tags)
                for a, b in segs:
                    if b - a > 1 and rng.random() < rate:
                        toks[a:b] = [toks[a + k] for k in rng.permutation(b - a)]
        out.append(Sentence(f"{s.id}#a", tuple(toks), tuple(tags)))
    return out


def _segments(tags: Sequence[str]) -> list[tuple[int, int]]:
    """Mentions and maximal runs of O, as [start, end) pairs covering the sentence."""
    segs, i = [], 0
    spans = mention_spans(tags)
    for a, b in spans + [(len(tags), len(tags))]:
        if i < a:
            segs.append((i, a))
        if a < b:
            segs.append((a, b))
        i = b
    return segs

"""Multi-corpus training schemes (``multitask=``): which corpus each optimiser step's batch comes from.

Watanabe et al., "Auxiliary Learning for NER with Multiple Auxiliary Training Data"
(MUNCHABLES). Corpus 0 is the main corpus, 1..M the auxiliaries in their order. One
Lightning epoch is one pass over the main training data: ITERATION = ceil(|D_main| / B) main
batches, each preceded by one auxiliary batch (``train(Model, Batch_aux)`` then
``train(Model, Batch_main)``: two optimiser steps), except MultiTask.

* ``multitask`` (§2.1, eq. 9): every corpus equal — each corpus shuffled and cut into batches,
  all batches of all corpora in one random order (larger corpora take more batches).
* ``singleaux`` (Alg. 1): the auxiliary batch from the one auxiliary corpus.
* ``munch_conc`` (Alg. 2): from the concatenation of all auxiliaries (a batch mixes corpora).
* ``munch_iter`` (Alg. 3): from auxiliary ``epoch mod M`` — the auxiliary changes every epoch.
  (The paper checks convergence after M such passes; we check after every pass.)
* ``munch_stack`` (Alg. 4): from auxiliary ``phase``; the phase moves on when the main loss has
  converged (``ner_lightning.callbacks.AuxiliaryPhases``).

``extract(D, B)`` draws without replacement from a fresh permutation of D each epoch (cycling
when an epoch needs more than |D| examples), so a schedule depends only on (sizes, batch size,
seed, epoch, phase): a resumed run sees the batches an uninterrupted run sees.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from ner_lightning.data.sampling import partition_rng

SCHEMES = ("singletask", "multitask", "singleaux", "munch_conc", "munch_iter", "munch_stack")
Batch = list[tuple[int, int]]  # (corpus index, example index) per row; corpus 0 = main


def check_scheme(scheme: str, n_aux: int) -> None:
    if scheme not in SCHEMES:
        raise ValueError(f"multitask scheme must be one of {SCHEMES}, got {scheme!r}")
    if scheme == "singleaux" and n_aux != 1:
        raise ValueError(
            f"SingleAux trains with exactly one auxiliary corpus, got {n_aux} (a multitask=singleaux "
            "cell with several in aux trains one run per auxiliary and keeps the best on main dev)"
        )
    if scheme not in ("singletask", "singleaux") and n_aux < 1:
        raise ValueError(f"multitask={scheme} needs auxiliary corpora: aux=[name,...] (conf/dataset names)")


def extract(n: int, count: int, rng: np.random.Generator) -> list[int]:
    """``count`` example indices of a corpus of ``n``: successive fresh permutations, cut."""
    out: list[int] = []
    while len(out) < count:
        out += rng.permutation(n).tolist()
    return out[:count]


def _cut(items: list, batch_size: int) -> list[list]:
    return [items[i : i + batch_size] for i in range(0, len(items), batch_size)]


def epoch_schedule(
    scheme: str, sizes: list[int], batch_size: int, seed: int, epoch: int, phase: int = 0
) -> list[Batch]:
    """The batches of one epoch, in order. ``sizes``: training examples of the main corpus, then
    of each auxiliary in its order; ``phase``: MUNCH-Stack's current auxiliary (0-based)."""
    check_scheme(scheme, len(sizes) - 1)
    n_main, aux = sizes[0], sizes[1:]
    main = [
        [(0, i) for i in b]
        for b in _cut(partition_rng("schedule", "main", seed, epoch).permutation(n_main).tolist(), batch_size)
    ]
    if scheme == "singletask":
        return main
    if scheme == "multitask":
        batches = list(main)
        for c, n in enumerate(aux, start=1):
            perm = partition_rng("schedule", "corpus", c, seed, epoch).permutation(n).tolist()
            batches += [[(c, i) for i in b] for b in _cut(perm, batch_size)]
        order = partition_rng("schedule", "mix", seed, epoch).permutation(len(batches))
        return [batches[k] for k in order]
    rng = partition_rng("schedule", "aux", scheme, seed, epoch)
    need = len(main) * batch_size
    if scheme == "munch_conc":
        pool = [(c, i) for c, n in enumerate(aux, start=1) for i in range(n)]
        drawn = [pool[k] for k in extract(len(pool), need, rng)]
    else:
        c = {"singleaux": 1, "munch_iter": 1 + epoch % len(aux), "munch_stack": 1 + phase}[scheme]
        if c > len(aux):
            raise ValueError(f"munch_stack phase {phase} but only {len(aux)} auxiliary corpora")
        drawn = [(c, i) for i in extract(aux[c - 1], need, rng)]
    out: list[Batch] = []
    for aux_batch, main_batch in zip(_cut(drawn, batch_size), main, strict=True):
        out += [aux_batch, main_batch]
    return out


def alternate_types(names: list[str], types: dict[str, set[str]], seed: int, tries: int = 10_000) -> list[str]:
    """A random order of the auxiliaries in which no two consecutive corpora share an entity type
    (the paper's order for MUNCH-Iter / Stack, §4.1); reproducible from ``seed``. An error when no
    such order exists (e.g. most auxiliaries of one type)."""
    rng = partition_rng("aux-order", seed, *names)
    for _ in range(tries):
        order = [names[k] for k in rng.permutation(len(names))]
        if all(not (types[a] & types[b]) for a, b in pairwise(order)):
            return order
    raise ValueError(
        f"no order of {names} keeps corpora of the same entity type apart "
        f"({ {n: sorted(types[n]) for n in names} }); use multitask.aux_order=listed"
    )

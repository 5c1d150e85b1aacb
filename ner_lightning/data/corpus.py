"""Corpus model and readers for the column formats in ``../shared/datasets``.

Three on-disk layouts are read by one reader (:func:`read_conll`):

* CoNLL-2003: single-space separated ``token POS chunk NER`` with ``-DOCSTART-`` lines;
* 2-column TSV ``token<TAB>tag`` (NCBI-disease, LINNAEUS, BC5CDR, BC2GM, AnatEM, WNUT-17);
* 4-column TSV ``token<TAB>start<TAB>end<TAB>tag`` (AnEM).

The token is always the first column and the tag the last; sentences are separated by blank
lines. Tags are validated against the dataset's entity types and normalised to IOB2.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ner_lightning.data.column_files import CorpusFormatError, columns, text_lines

OUTSIDE = "O"
UNTYPED = "ENT"  # the one entity type of data.label_scheme=untyped (regimes.untyped)


@dataclass(frozen=True)
class Sentence:
    """One sentence: ``id`` is ``"<split>:<index in file order>"``, stable across runs."""

    id: str
    tokens: tuple[str, ...]
    tags: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.tokens)


class LabelSet:
    """BIO label inventory; ``O`` is always id 0, then ``B-T``/``I-T`` per entity type.

    (A plain class, not a dataclass, so Hydra passes it to ``instantiate`` untouched.)
    """

    def __init__(self, entity_types: Sequence[str]):
        self.entity_types = tuple(entity_types)

    def __eq__(self, other) -> bool:
        return isinstance(other, LabelSet) and other.entity_types == self.entity_types

    def __repr__(self) -> str:
        return f"LabelSet({list(self.entity_types)})"

    @property
    def labels(self) -> list[str]:
        return [OUTSIDE] + [f"{bio}-{t}" for t in self.entity_types for bio in ("B", "I")]

    @property
    def label2id(self) -> dict[str, int]:
        return {label: i for i, label in enumerate(self.labels)}

    @property
    def id2label(self) -> dict[int, str]:
        return dict(enumerate(self.labels))

    def __len__(self) -> int:
        return 1 + 2 * len(self.entity_types)


class Corpus:
    """Train/dev/test sentences of one dataset and its label set. (A plain class, not a
    dataclass, so Hydra passes it untouched — e.g. the auxiliary corpora of a multi-corpus data
    module — instead of turning every sentence into a config node.)"""

    def __init__(
        self,
        name: str,
        train: list[Sentence],
        dev: list[Sentence],
        test: list[Sentence],
        label_set: LabelSet,
        notes: list[str] | None = None,
        queries: dict[str, str] | None = None,
    ):
        self.name, self.train, self.dev, self.test, self.label_set = name, train, dev, test, label_set
        self.notes = list(notes or [])
        self.queries = dict(queries or {})  # MRC query per entity type (dataset.queries)

    def __repr__(self) -> str:
        return (
            f"Corpus({self.name!r}, train={len(self.train)}, dev={len(self.dev)}, test={len(self.test)}, "
            f"types={list(self.label_set.entity_types)})"
        )

    def query(self, entity_type: str) -> str:
        """The natural-language question of ``loss=mrc`` for a type; the type name when the
        dataset config gives none."""
        return self.queries.get(entity_type) or entity_type

    def split(self, name: str) -> list[Sentence]:
        return {"train": self.train, "dev": self.dev, "test": self.test}[name]


def split_tag(tag: str) -> tuple[str, str | None]:
    """``"B-PER"`` -> ``("B", "PER")``; ``"O"`` -> ``("O", None)``. Types may contain ``-``."""
    if tag == OUTSIDE:
        return OUTSIDE, None
    prefix, sep, etype = tag.partition("-")
    if not sep or prefix not in ("B", "I") or not etype:
        raise ValueError(f"not a BIO tag: {tag!r}")
    return prefix, etype


def iob1_to_iob2(tags: Sequence[str]) -> list[str]:
    """IOB1 -> IOB2: an ``I-T`` that does not continue a ``T`` entity starts one (``B-T``).

    In IOB1, ``B-T`` only separates two adjacent entities of the same type; in IOB2 every
    entity starts with ``B-``. Already-IOB2 input is returned unchanged.
    """
    out: list[str] = []
    prev_type: str | None = None
    for tag in tags:
        prefix, etype = split_tag(tag)
        if prefix == "I" and etype != prev_type:
            tag = f"B-{etype}"
        out.append(tag)
        prev_type = etype
    return out


def read_conll(
    path: str | os.PathLike,
    delimiter: str = "\t",
    tag_scheme: str = "iob2",
    entity_types: Iterable[str] | None = None,
    split: str = "train",
    tag_column: int = -1,
) -> list[Sentence]:
    """Read a column file (token first, tag in ``tag_column``, by default the last; a blank line
    between sentences).

    ``delimiter`` is ``"\\t"`` or ``" "``; ``-DOCSTART-`` lines are skipped. Every token line
    must have the column count of the file's first token line. ``tag_scheme="iob1"``
    converts to IOB2; with ``"iob2"`` an ``I-T`` that does not continue a ``T`` entity (IOB1
    input) is an error naming the line, never silently broken spans. Non-UTF-8 bytes name their
    line. With ``entity_types`` given, a tag of any other type is an error.

    A file is parsed once per process while it stays the same (path, size, modification time):
    the cells of a sweep that run in one process share its (immutable) sentences.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"corpus file not found: {path}. Set paths.data_dir=... (or the NER_DATA_DIR "
            "environment variable) to the folder holding one sub-folder per dataset, or "
            "build that layout with `python -m ner_lightning.data.hf_export`."
        )
    stat = path.stat()
    types = tuple(entity_types) if entity_types is not None else None
    return list(
        _parsed(path.resolve(), stat.st_size, stat.st_mtime_ns, delimiter, tag_scheme, types, split, tag_column)
    )


@functools.lru_cache(maxsize=32)
def _parsed(
    path: Path,
    size: int,
    mtime_ns: int,
    delimiter: str,
    tag_scheme: str,
    entity_types: tuple | None,
    split: str,
    tag_column: int,
) -> tuple[Sentence, ...]:
    """:func:`read_conll`'s parse of one state of a file (``size``, ``mtime_ns``: part of the key only)."""
    if tag_scheme not in ("iob1", "iob2"):
        raise ValueError(f"tag_scheme must be 'iob1' or 'iob2', got {tag_scheme!r}")
    allowed = set(entity_types) if entity_types is not None else None
    sentences: list[Sentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    n_cols: int | None = None

    def flush() -> None:
        if tokens:
            fixed = iob1_to_iob2(tags) if tag_scheme == "iob1" else list(tags)
            sentences.append(Sentence(f"{split}:{len(sentences)}", tuple(tokens), tuple(fixed)))
            tokens.clear()
            tags.clear()

    prev_type: str | None = None  # entity type of the previous token (None: O or sentence start)
    checked: dict[tuple[str, str | None], str | None] = {}  # (tag, previous type) -> its type, once checked
    for lineno, line in text_lines(path):
        if not line.strip() or line.startswith("-DOCSTART-"):
            flush()
            prev_type = None
            continue
        cols = line.split(delimiter)
        if len(cols) != n_cols:  # the first token line, or a wrong one: checked, naming the line
            cols, n_cols = columns(line, delimiter, n_cols, f"{path}:{lineno}: {line!r}")
        token, tag = cols[0], cols[tag_column]
        if not token:
            raise CorpusFormatError(f"{path}:{lineno}: {line!r}: empty token")
        key = (tag, prev_type)
        if key not in checked:
            checked[key] = _entity_type(tag, tag_scheme, prev_type, allowed, f"{path}:{lineno}: {line!r}")
        prev_type = checked[key]
        tokens.append(token)
        tags.append(tag)
    flush()
    if not sentences:
        raise CorpusFormatError(f"{path}: no sentences found")
    return tuple(sentences)


def _entity_type(tag: str, tag_scheme: str, prev_type: str | None, allowed: set[str] | None, where: str) -> str | None:
    """The tag's entity type, checked: a valid tag, IOB2 continuity, a type the dataset lists."""
    try:
        _, etype = split_tag(tag)
    except ValueError:
        raise CorpusFormatError(f"{where}: tag {tag!r} is not O, B-<type> or I-<type>") from None
    if tag_scheme == "iob2" and tag.startswith("I-") and etype != prev_type:
        raise CorpusFormatError(
            f"{where}: {tag!r} "
            + (f"follows a {prev_type} token" if prev_type else "follows O or starts a sentence")
            + ", which IOB2 never does: the file looks like IOB1. Set "
            "the dataset's `tag_scheme: iob1` (converted to IOB2 on reading), or fix the file"
        )
    if allowed is not None and etype is not None and etype not in allowed:
        raise CorpusFormatError(
            f"{where}: unknown entity type {etype!r}; the dataset config lists "
            f"{sorted(allowed)} (add it to `entity_types` if it is genuine)"
        )
    return etype


def carve_dev(train: list[Sentence], fraction: float, seed: int) -> tuple[list[Sentence], list[Sentence]]:
    """Split ``fraction`` of ``train`` off as dev, deterministically from ``seed`` (corpora without
    a dev split: AnEM); sentence ids keep their ``train:`` origin."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"dev fraction must be in (0, 1), got {fraction}")
    rng = np.random.default_rng(seed)
    n_dev = max(1, round(fraction * len(train)))
    dev_idx = set(rng.permutation(len(train))[:n_dev].tolist())
    dev = [s for i, s in enumerate(train) if i in dev_idx]
    rest = [s for i, s in enumerate(train) if i not in dev_idx]
    return rest, dev


def load_corpus(
    name: str,
    dir: str,
    splits: dict[str, str],
    entity_types: Sequence[str],
    delimiter: str = "\t",
    tag_scheme: str = "iob2",
    dev_from_train: dict | None = None,
    queries: dict[str, str] | None = None,
) -> Corpus:
    """Read a dataset folder as described by ``conf/dataset/<name>.yaml``.

    ``splits`` maps ``train``/``dev``/``test`` to file names; when ``dev`` is absent,
    ``dev_from_train`` (``{fraction, seed}``) carves a dev split out of train. ``queries``: the
    MRC framing's description of each entity type (``loss=mrc``); a type without one is asked
    for by its name.
    """
    unknown = set(queries or {}) - set(entity_types) - {UNTYPED}
    if unknown:
        raise ValueError(
            f"dataset {name!r}: queries for {sorted(unknown)}, which are not in entity_types "
            f"{list(entity_types)} (conf/dataset/{name}.yaml)"
        )
    root = Path(dir)
    if not root.is_dir():
        raise FileNotFoundError(
            f"dataset folder for {name!r} not found: {root}. Set paths.data_dir=... (or "
            "NER_DATA_DIR) to the folder that holds one sub-folder per dataset (default: "
            "../shared/datasets next to the repository)."
        )
    read = functools.partial(read_conll, delimiter=delimiter, tag_scheme=tag_scheme, entity_types=entity_types)
    train = read(root / splits["train"], split="train")
    test = read(root / splits["test"], split="test")
    notes = []
    if splits.get("dev"):
        dev = read(root / splits["dev"], split="dev")
    elif dev_from_train:
        train, dev = carve_dev(train, float(dev_from_train["fraction"]), int(dev_from_train["seed"]))
        notes.append(
            f"{name} has no dev split: {len(dev)} train sentences "
            f"({dev_from_train['fraction']:.0%}, seed {dev_from_train['seed']}) serve as dev"
        )
    else:
        raise ValueError(f"dataset {name!r}: no `dev` file and no `dev_from_train` setting")
    return Corpus(name, train, dev, test, LabelSet(tuple(entity_types)), notes, dict(queries or {}))

"""The column files corpora come in, at the level of lines: read as UTF-8 (a bad byte names its
line), split into a checked number of columns, and written (one word per line, a blank line
after each sentence). ``data/corpus.py`` reads sentences and tags from them."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path


class CorpusFormatError(ValueError):
    """A corpus file does not have the expected layout; the message names file and line."""


def write_conll(path: str | os.PathLike, tokens: Sequence[Sequence[str]], *columns: Sequence[Sequence[str]]) -> Path:
    """One word per line, its token and its tag in each of ``columns``, tab-separated; a blank line
    after each sentence (what :func:`read_conll` reads). Written atomically."""
    from ner_lightning.results import write_atomic

    lines = []
    for i, words in enumerate(tokens):
        rows = zip(words, *(column[i] for column in columns), strict=True)
        lines.append("".join("\t".join(row) + "\n" for row in rows) + "\n")
    return write_atomic(path, lambda fh: fh.write("".join(lines).encode()), fsync=False)


def text_lines(path: Path) -> Iterable[tuple[int, str]]:
    """(line number, line without its end) of a UTF-8 file, decoded at once; a file that is not
    UTF-8 is read again line by line to name the line (:func:`decoded_lines`)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        yield from decoded_lines(path)  # raises, naming the line
        return
    for lineno, line in enumerate(text.split("\n"), start=1):
        yield lineno, line.rstrip("\r")


def decoded_lines(path: Path) -> Iterable[tuple[int, str]]:
    """(line number, line without its end) of a UTF-8 file; other bytes name their line."""
    with path.open("rb") as fh:
        for lineno, raw_bytes in enumerate(fh, start=1):
            try:
                raw = raw_bytes.decode("utf-8")
            except UnicodeDecodeError as err:
                raise CorpusFormatError(
                    f"{path}:{lineno}: not UTF-8 (byte {raw_bytes[err.start]:#04x} at column {err.start + 1}); "
                    "re-encode the file, e.g. `iconv -f latin1 -t utf-8 in > out`"
                ) from None
            yield lineno, raw.rstrip("\n").rstrip("\r")


def columns(line: str, delimiter: str, n_cols: int | None, where: str) -> tuple[list[str], int]:
    """The line's columns and the file's column count (set by its first token line)."""
    cols = line.split(delimiter)
    if n_cols is None:
        n_cols = len(cols)
        if n_cols < 2:
            raise CorpusFormatError(
                f"{where}: expected at least 2 columns separated by {delimiter!r} "
                "(token ... tag); check the dataset's `delimiter` setting"
            )
    if len(cols) != n_cols:
        raise CorpusFormatError(f"{where}: {len(cols)} columns, but this file's first token line has {n_cols}")
    return cols, n_cols

"""Tag text with an exported model (``ner_lightning.export``), writing CoNLL.

    python -m ner_lightning.predict EXPORT_DIR sentences.txt            # one sentence per line
    python -m ner_lightning.predict EXPORT_DIR test.conll --out pred.conll   # token ... tag columns

Raw text is split into words on whitespace (``--tokenizer whitespace``) or into words and
punctuation (``--tokenizer simple``, the default); a CoNLL file keeps its words, and its gold tags
are written next to the predictions (token, gold, predicted) and scored with seqeval.
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ner_lightning.data.column_files import CorpusFormatError, write_conll
from ner_lightning.data.corpus import read_conll
from ner_lightning.export.trust import add_trust_options, trust_of

WORD = re.compile(r"\d+(?:[.,]\d+)*|\w+(?:[-'’]\w+)*|[^\w\s]")
TAG = re.compile(r"^(O|[BI]-.+)$")
TOKENIZERS: dict[str, Callable[[str], list[str]]] = {"whitespace": str.split, "simple": WORD.findall}


def detect_format(path: Path) -> tuple[str, str]:
    """(``conll`` or ``text``, the column delimiter) from the first token lines: CoNLL when each
    has a word and a tag column."""
    with path.open(encoding="utf-8", errors="replace") as fh:
        lines = [line.strip() for line in itertools.islice(fh, 200)]
    lines = [line for line in lines if line and not line.startswith("-DOCSTART-")][:20]
    delimiter = "\t" if lines and "\t" in lines[0] else " "
    rows = [line.split(delimiter) for line in lines]
    return ("conll" if rows and all(len(r) >= 2 and TAG.match(r[-1]) for r in rows) else "text"), delimiter


def read_input(path: Path, fmt: str, tokenizer: str) -> tuple[list[list[str]], list[list[str]] | None]:
    """Words of each sentence and, for a CoNLL file, its gold tags."""
    detected, delimiter = detect_format(path)
    if (detected if fmt == "auto" else fmt) == "conll":
        sentences = read_conll(path, delimiter=delimiter, split="predict")
        return [list(s.tokens) for s in sentences], [list(s.tags) for s in sentences]
    split = TOKENIZERS[tokenizer]
    return [words for words in map(split, path.read_text(encoding="utf-8").splitlines()) if words], None


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m ner_lightning.predict",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "model", type=Path, help="an exported model folder (<cell>/export, or python -m ner_lightning.export)"
    )
    ap.add_argument("input", type=Path, help="raw text, one sentence per line, or a CoNLL file")
    ap.add_argument(
        "--format",
        choices=("auto", "text", "conll"),
        default="auto",
        help="input format (auto: CoNLL when the lines end in a tag column)",
    )
    ap.add_argument("--tokenizer", choices=tuple(TOKENIZERS), default="simple", help="how raw text is split into words")
    ap.add_argument("--out", type=Path, help="the CoNLL file to write (default: standard output)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 ...")
    ap.add_argument(
        "--precision",
        choices=("32-true", "bf16-mixed", "16-mixed"),
        help="encoder precision (default: the one the cell evaluated in)",
    )
    add_trust_options(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.input.is_file():
        print(f"error: {args.input}: no such file", file=sys.stderr)
        return 2
    try:
        words, gold = read_input(args.input, args.format, args.tokenizer)
        from ner_lightning.console import quiet
        from ner_lightning.export.folder import load

        quiet()
        model = load(args.model, args.device, args.precision, trust_of(args))
        if model.meta.get("token_loss_not_built"):
            print(
                f"note: its token loss ({model.meta['token_loss_not_built']}) is not built: it only trains, "
                "and tagging reads the heads' scores",
                file=sys.stderr,
            )
    except (CorpusFormatError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    predicted = model.tag(words)
    seconds = time.perf_counter() - start
    columns = [gold, predicted] if gold is not None else [predicted]
    if args.out:
        write_conll(args.out, words, *columns)
    else:
        for i, sentence in enumerate(words):
            sys.stdout.write(
                "".join("\t".join(row) + "\n" for row in zip(sentence, *(c[i] for c in columns), strict=True)) + "\n"
            )
    n_words = sum(map(len, words))
    summary = (
        f"tagged {len(words)} sentences, {n_words} words in {seconds:.2f} s on {args.device} "
        f"({n_words / max(seconds, 1e-9):,.0f} words/s)"
    )
    if gold is not None:
        from ner_lightning.metrics import span_scores

        micro = span_scores(gold, predicted)["micro"]
        summary += (
            f"; against the file's tags: span F1 {micro['f1']:.4f}"
            f" (P {micro['precision']:.4f}, R {micro['recall']:.4f})"
        )
    print(summary + (f" -> {args.out}" if args.out else ""), file=sys.stderr)
    return 0

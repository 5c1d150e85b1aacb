"""Build the on-disk layout of a dataset config from a Hugging Face ``datasets`` corpus.

For online users without ``../shared/datasets``::

    pip install datasets
    python -m ner_lightning.data.hf_export conll2003 --hf-name eriktks/conll2003 --out data
    export NER_DATA_DIR=$PWD/data   # then: python -m ner_lightning.run dataset=conll2003

Files are written with the names and delimiter that ``conf/dataset/<name>.yaml`` expects,
two columns (token, tag) per line; the readers only use the first and last column.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ner_lightning.config import compose_config

HF_SPLIT = {"train": "train", "dev": "validation", "test": "test"}


def write_split(
    rows: Iterable[Mapping],
    label_names: Sequence[str],
    path: Path,
    delimiter: str,
    tokens_key: str = "tokens",
    tags_key: str = "ner_tags",
) -> int:
    """Write rows ``{tokens: [...], ner_tags: [int, ...]}`` as a column file; returns #sentences."""
    n = 0
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            tokens, tags = row[tokens_key], row[tags_key]
            if not tokens:
                continue
            for tok, tag in zip(tokens, tags, strict=True):
                fh.write(f"{tok}{delimiter}{label_names[tag] if isinstance(tag, int) else tag}\n")
            fh.write("\n")
            n += 1
    return n


def export(name: str, hf_name: str, out: Path, hf_config: str | None = None) -> Path:
    from datasets import load_dataset  # optional dependency, online use only

    spec = compose_config([f"dataset={name}"], out / ".compose").dataset
    ds = load_dataset(hf_name, hf_config)
    label_names = ds["train"].features["ner_tags"].feature.names
    target = out / name
    target.mkdir(parents=True, exist_ok=True)
    for split, filename in spec.splits.items():
        if filename:
            n = write_split(ds[HF_SPLIT[split]], label_names, target / filename, spec.delimiter)
            print(f"{target / filename}: {n} sentences")
    return target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", help="dataset config name (conf/dataset/<name>.yaml)")
    ap.add_argument("--hf-name", required=True, help="Hugging Face dataset id")
    ap.add_argument("--hf-config", default=None)
    ap.add_argument("--out", type=Path, required=True, help="data root to create (use as NER_DATA_DIR)")
    args = ap.parse_args()
    export(args.name, args.hf_name, args.out, args.hf_config)


if __name__ == "__main__":
    main()

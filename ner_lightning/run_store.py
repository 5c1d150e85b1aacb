"""Run stores: a folder of runs (a sweep, or a study of several sweeps) as one compressed file.

``<folder>.jsonl.xz`` holds one JSON line per file of the folder — ``{"path": relative path,
"text": its content}`` — for the files a report reads (``results.json``, ``failure.json``,
``tune.json``) and the sweep's records (``manifest.json``, ``multirun.yaml``); nothing else.
Every path inside the folder reads as if the folder were there: ``python -m ner_lightning.report
docs/results/runs/replication/auc2t`` reads the cells under ``auc2t/`` of
``docs/results/runs/replication.jsonl.xz``, in the order the folder would give them, and a
glob pattern that matches no folder on disk (``…/auc2t/*size=[25]0``) is matched inside the store.

    python -m ner_lightning.run_store pack FOLDER      # FOLDER.jsonl.xz (the folder is left as it is)
    python -m ner_lightning.run_store unpack STORE     # the folder again, byte for byte
    python -m ner_lightning.sweep export SWEEP_DIR OUT.jsonl.xz   # a sweep's finished cells only
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import lzma
import os
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Iterable

SUFFIX = ".jsonl.xz"
STORED = ("results.json", "failure.json", "tune.json", "manifest.json", "multirun.yaml")
WILDCARDS = "*?["


def write_store(files: Iterable[tuple[str, str]], out: Path) -> Path:
    """``(relative path, text)`` pairs as a store at ``out`` (written whole, then renamed)."""
    out = Path(out)
    if not out.name.endswith(SUFFIX):
        raise ValueError(f"{out}: a run store's name ends in {SUFFIX}")
    lines = "".join(json.dumps({"path": p, "text": t}, ensure_ascii=False) + "\n" for p, t in sorted(files))
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(lzma.compress(lines.encode("utf-8"), preset=9))
    os.chmod(tmp, 0o644)
    os.replace(tmp, out)
    return out


def pack(folder: Path, out: Path | None = None) -> tuple[Path, int]:
    """Every stored file under ``folder`` (:data:`STORED`) into ``out`` (default ``folder`` +
    ``.jsonl.xz``); returns the store and how many files it holds."""
    folder = Path(folder)
    if not folder.is_dir():
        raise SystemExit(f"{folder}: no such folder")
    files = [(p.relative_to(folder).as_posix(), p.read_text(encoding="utf-8"))
             for p in folder.rglob("*") if p.name in STORED and p.is_file()]
    if not files:
        raise SystemExit(f"{folder}: no {', '.join(STORED)} under it — nothing to store")
    return write_store(files, Path(out) if out else folder.with_name(folder.name + SUFFIX)), len(files)


def unpack(store: Path, dest: Path | None = None) -> tuple[Path, int]:
    """The folder a store holds, written at ``dest`` (default: beside it, its name less the suffix)."""
    dest = Path(dest) if dest else base_of(Path(store))
    files = read_store(Path(store))
    for rel, text in files.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text, encoding="utf-8")
    return dest, len(files)


def read_store(path: Path) -> dict[str, str]:
    """``{relative path: text}`` of a store (read once per process while the file is unchanged)."""
    path = Path(path).resolve()
    try:
        changed = path.stat().st_mtime_ns
    except OSError as err:
        raise SystemExit(f"{path}: not a readable run store ({err})") from None
    return _read(path, changed)


@lru_cache(maxsize=32)
def _read(path: Path, changed: int) -> dict[str, str]:
    try:
        raw = lzma.decompress(path.read_bytes()).decode("utf-8")
    except (OSError, lzma.LZMAError) as err:
        raise SystemExit(f"{path}: not a readable run store ({err}); pack the folder again") from None
    out = {}
    for n, line in enumerate(raw.splitlines(), 1):
        try:
            record = json.loads(line)
            out[record["path"]] = record["text"]
        except (ValueError, KeyError, TypeError):
            raise SystemExit(f"{path}, line {n}: not a run-store record ({{\"path\", \"text\"}})") from None
    return out


def base_of(store: Path) -> Path:
    """The folder a store stands for: its path less ``.jsonl.xz``."""
    return store.with_name(store.name[: -len(SUFFIX)])


def store_of(path: Path) -> tuple[Path, str] | None:
    """The store that holds ``path`` (the path itself less its suffix, or an ancestor) and the path
    inside it (``""``: all of it); None when no store does."""
    path = Path(path)
    if path.name.endswith(SUFFIX) and path.is_file():
        return path, ""
    for i, folder in enumerate([path, *path.parents]):
        candidate = folder.with_name(folder.name + SUFFIX) if folder.name else None
        if candidate is not None and candidate.is_file():
            return candidate, Path(*path.parts[len(path.parts) - i:]).as_posix() if i else ""
    return None


def _entries(path: Path) -> tuple[Path, list[str]] | None:
    """The folder ``path`` reads as and the stored paths under it (relative to the store)."""
    found = store_of(path)
    if found is None:
        return None
    store, inside = found
    prefix = f"{inside}/" if inside else ""
    return base_of(store), [rel for rel in read_store(store) if rel.startswith(prefix)]


def exists(path: Path) -> bool:
    """A folder or file on disk, or a path a store holds."""
    if Path(path).exists():
        return True
    found = _entries(Path(path))
    return found is not None and bool(found[1]) or _stored_file(Path(path)) is not None


def files_named(folder: Path, name: str) -> list[Path]:
    """Every ``name`` under ``folder`` (as ``Path.rglob``), sorted; from a store when the folder
    is one (or is inside one) and not on disk."""
    folder = Path(folder)
    if folder.is_dir():
        return sorted(folder.rglob(name))
    found = _entries(folder)
    if found is None:
        return []
    base, rels = found
    return sorted(base / rel for rel in rels if rel.rpartition("/")[2] == name)


def _stored_file(path: Path) -> str | None:
    found = store_of(Path(path).parent)
    if found is None:
        return None
    store, inside = found
    return read_store(store).get(f"{inside}/{path.name}" if inside else path.name)


def read_text(path: Path) -> str:
    """A file's text, from disk or from the store that holds it."""
    path = Path(path)
    if path.exists():
        return path.read_text(encoding="utf-8")
    text = _stored_file(path)
    if text is None:
        raise FileNotFoundError(path)
    return text


def glob(root: Path, pattern: str) -> list[Path]:
    """``root.glob(pattern)`` over the folders on disk and those the stores on the pattern's way
    hold (a store ``X.jsonl.xz`` where a pattern part matches ``X``), sorted."""
    root = Path(root)
    found = set(root.glob(pattern)) if root.is_dir() else set()
    want = Path(pattern).parts
    for k in range(1, len(want) + 1):
        for store in root.glob("/".join([*want[:k - 1], want[k - 1] + SUFFIX])):
            base, rest = base_of(store), want[k:]
            if not rest:
                found.add(base)
                continue
            folders = {tuple(rel.split("/")[:len(rest)]) for rel in read_store(store) if rel.count("/") >= len(rest)}
            found.update(base.joinpath(*f) for f in folders
                         if all(fnmatch.fnmatchcase(part, w) for part, w in zip(f, rest)))
    return sorted(found)


def expand(arg: str) -> list[Path]:
    """A command-line folder: itself when it exists (on disk or in a store), else the matches of
    a glob pattern the shell left as it was (no folder on disk matched it); empty if none."""
    path = Path(arg)
    if exists(path) or not any(c in arg for c in WILDCARDS):
        return [path] if exists(path) else []
    root = Path(path.anchor) if path.is_absolute() else Path(".")
    return glob(root, str(path.relative_to(root)) if path.is_absolute() else arg)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ner_lightning.run_store", description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=("pack", "unpack"))
    ap.add_argument("path", type=Path, help="pack: a folder of runs; unpack: a .jsonl.xz store")
    ap.add_argument("out", type=Path, nargs="?", help="where to write (default: beside it)")
    args = ap.parse_args(argv)
    if args.command == "pack":
        out, n = pack(args.path, args.out)
        print(f"{out}: {n} files of {args.path} ({out.stat().st_size / 1e6:.2f} MB)")
    else:
        out, n = unpack(args.path, args.out)
        print(f"{out}: {n} files unpacked")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Run stores: a folder of runs (a sweep, or a study of several sweeps) as one compressed file.

``<folder>.jsonl.xz`` holds one JSON line per file of the folder — ``{"path": relative path,
"text": its content}`` — for the files a report reads (``results.json``, ``failure.json``,
``tune.json``) and the sweep's records (``manifest.json``, ``multirun.yaml``); nothing else.
Every path inside the folder reads as if the folder were there: ``python -m ner_lightning.report
docs/results/runs/replication/auc2t`` reads the cells of ``docs/results/runs/replication/auc2t.jsonl.xz``,
in the order the folder would give them; a glob pattern that matches no folder on disk
(``…/auc2t/*size=[25]0``) is matched inside the store, and a folder on disk reads the stores under it too.

    python -m ner_lightning.run_store pack FOLDER      # FOLDER.jsonl.xz (the folder is left as it is)
    python -m ner_lightning.run_store unpack STORE     # the folder again, byte for byte
    python -m ner_lightning.sweep export SWEEP_DIR OUT.jsonl.xz   # a sweep's finished cells only
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import lzma
import sys
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from ner_lightning.results import write_atomic

SUFFIX = ".jsonl.xz"
STORED = ("results.json", "failure.json", "tune.json", "manifest.json", "multirun.yaml")
WILDCARDS = "*?["


def write_store(files: Iterable[tuple[str, str]], out: Path) -> Path:
    """``(relative path, text)`` pairs as a store at ``out`` (written whole, then renamed)."""
    out = Path(out)
    if not out.name.endswith(SUFFIX):
        raise ValueError(f"{out}: a run store's name ends in {SUFFIX}")
    lines = "".join(json.dumps({"path": p, "text": t}, ensure_ascii=False) + "\n" for p, t in sorted(files))
    return write_atomic(out, lambda fh: fh.write(lzma.compress(lines.encode("utf-8"), preset=9)))


def pack(folder: Path, out: Path | None = None) -> tuple[Path, int]:
    """Every stored file under ``folder`` (:data:`STORED`) into ``out`` (default ``folder`` +
    ``.jsonl.xz``); returns the store and how many files it holds."""
    folder = Path(folder)
    if not folder.is_dir():
        raise SystemExit(f"{folder}: no such folder")
    files = [
        (p.relative_to(folder).as_posix(), p.read_text(encoding="utf-8"))
        for p in folder.rglob("*")
        if p.name in STORED and p.is_file()
    ]
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
            raise SystemExit(f'{path}, line {n}: not a run-store record ({{"path", "text"}})') from None
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
            return candidate, Path(*path.parts[len(path.parts) - i :]).as_posix() if i else ""
    return None


def _stored_paths(path: Path) -> list[Path]:
    """The stored files at or under ``path``, as paths of the folders the stores stand for: of the
    store that holds ``path``, or — a folder on disk — of the stores under it."""
    if path.is_dir():
        return [base_of(store) / rel for store in path.rglob(f"*{SUFFIX}") for rel in read_store(store)]
    found = store_of(path)
    if found is None:
        return []
    store, inside = found
    return [
        base_of(store) / rel for rel in read_store(store) if not inside or rel == inside or rel.startswith(f"{inside}/")
    ]


def exists(path: Path) -> bool:
    """A folder or file on disk, or a path a store holds."""
    return Path(path).exists() or bool(_stored_paths(Path(path)))


def files_named(folder: Path, name: str) -> list[Path]:
    """Every ``name`` under ``folder`` (as ``Path.rglob``), on disk and in the stores, sorted."""
    folder = Path(folder)
    on_disk = list(folder.rglob(name)) if folder.is_dir() else []
    return sorted([*on_disk, *(p for p in _stored_paths(folder) if p.name == name)])


def read_text(path: Path) -> str:
    """A file's text, from disk or from the store that holds it."""
    path = Path(path)
    if path.exists():
        return path.read_text(encoding="utf-8")
    found = store_of(path)
    text = read_store(found[0]).get(found[1]) if found is not None else None
    if text is None:
        raise FileNotFoundError(path)
    return text


def glob(root: Path, pattern: str) -> list[Path]:
    """``root.glob(pattern)`` over the folders on disk and those the stores on the pattern's way
    hold (a store ``X.jsonl.xz`` where a pattern part matches ``X``), sorted."""
    root = Path(root)
    found = {p for p in root.glob(pattern) if not p.name.endswith(SUFFIX)} if root.is_dir() else set()
    want = Path(pattern).parts
    for k in range(1, len(want) + 1):
        for store in root.glob("/".join([*want[: k - 1], want[k - 1] + SUFFIX])):
            base, rest = base_of(store), want[k:]
            if not rest:
                found.add(base)
                continue
            folders = {tuple(rel.split("/")[: len(rest)]) for rel in read_store(store) if rel.count("/") >= len(rest)}
            found.update(
                base.joinpath(*f)
                for f in folders
                if all(fnmatch.fnmatchcase(part, w) for part, w in zip(f, rest, strict=True))
            )
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

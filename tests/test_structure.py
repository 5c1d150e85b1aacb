"""The package's import structure: no module imports itself back through others, and no part
(a top-level module or sub-package) imports one that imports it back — imports inside
functions included. Read from the source with ``ast``, so the test needs nothing installed."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ner_lightning"


def module_imports(root: Path) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}`` (``a.b`` for ``from a import b`` when
    ``a/b.py`` exists; a package's own ``__init__`` is not counted as imported by its modules)."""
    files = {}
    for f in root.rglob("*.py"):
        parts = list(f.relative_to(root.parent).with_suffix("").parts)
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, f in files.items():
        pkg = mod if f.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in files:
                    t = t.rpartition(".")[0]
                if t and t != mod and not mod.startswith(t + "."):
                    graph[mod].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of nodes that reach each other (strongly connected components of two or more)."""
    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reachable = {v: reach(v) for v in graph}
    groups = {frozenset({v} | {w for w in reachable[v] if v in reachable[w]}) for v in graph}
    return sorted(sorted(g) for g in groups if len(g) > 1)


def part_graph(graph: dict[str, set[str]], root: str = "ner_lightning") -> dict[str, set[str]]:
    def part(mod: str) -> str:
        rest = mod[len(root) + 1:].split(".") if mod != root else []
        return f"{root}.{rest[0]}" if rest else root

    out: dict[str, set[str]] = {}
    for mod, targets in graph.items():
        out.setdefault(part(mod), set()).update(part(t) for t in targets if part(t) != part(mod))
    return out


def test_the_finder_sees_a_circle_through_an_import_inside_a_function(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from pkg import c\n")
    (pkg / "c.py").write_text("from . import a\n")
    graph = module_imports(pkg)
    assert cycles(graph) == [["pkg.a", "pkg.c", "pkg.sub.b"]]
    assert cycles(part_graph(graph, "pkg")) == [["pkg.a", "pkg.c", "pkg.sub"]]


@pytest.mark.parametrize("level", ["modules", "parts"])
def test_the_package_has_no_import_circle(level):
    graph = module_imports(PACKAGE)
    found = cycles(graph if level == "modules" else part_graph(graph))
    assert found == [], f"import circles between {level}: {found}"


def test_every_module_is_under_300_lines():
    """One job per module: a module that grows past 300 lines is split by what it does."""
    long = {str(f.relative_to(PACKAGE)): n for f in PACKAGE.rglob("*.py") if (n := len(f.read_text().splitlines())) >= 300}
    assert not long, f"modules of 300 lines or more: {long}"


def test_the_readme_layout_names_every_module():
    """The README's layout lists every module of the package where it lives: a top-level module in
    the head of an entry (before its description), a module of a folder inside that folder's entry
    (its file name or its name as a word) — path by path, so ``report/cells.py`` is not taken as
    listed because ``sweep/cells.py`` is."""
    import re

    readme = (PACKAGE.parent / "README.md").read_text()
    layout = readme[readme.index("ner_lightning/\n") : readme.index("hydra_plugins/")]
    entries: list[list[str]] = []
    for line in layout.splitlines()[1:]:
        if re.match(r"^  \S", line):
            entries.append([line])
        elif entries and line.strip():
            entries[-1].append(line)
    heads = [re.split(r"\s{2,}", e[0].strip())[0] for e in entries]
    folders = {re.match(r"^  (\w+)/", e[0]).group(1): " ".join(e) for e in entries if re.match(r"^  \w+/", e[0])}

    def named(f, text: str) -> bool:
        return f.name in text or re.search(rf"(?<!\w){re.escape(f.stem)}(?!\w)", text) is not None

    missing = []
    for f in PACKAGE.rglob("*.py"):
        if f.name == "__init__.py" or "conf" in f.relative_to(PACKAGE).parts:
            continue
        parts = f.relative_to(PACKAGE).parts
        where = " ".join(heads) if len(parts) == 1 else folders.get(parts[0], "")
        if not named(f, where):
            missing.append(str(f.relative_to(PACKAGE)))
    assert not missing, f"README's layout leaves out {missing}"

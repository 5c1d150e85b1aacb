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


LIGHTNING_INTERNALS = {"fit_loop", "epoch_loop", "batch_progress", "epoch_progress", "val_loop"}


def private_lightning_uses(source: str, own: set[str]) -> list[str]:
    """Attribute uses in ``source`` that reach into another library's privates (``x._name``, not
    on ``self``/``cls``, not a name the package defines itself, not torch's) or Lightning's loops."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        root = node.value
        while isinstance(root, ast.Attribute):
            root = root.value
        name = node.attr
        private = name.startswith("_") and not name.startswith("__") and name not in own
        on_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
        if (private and not on_self and not (isinstance(root, ast.Name) and root.id == "torch")) or (
            name in LIGHTNING_INTERNALS
        ):
            found.append(f"line {node.lineno}: .{name}")
    return found


def _own_private_names() -> set[str]:
    names = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name.startswith("_"):
                names.add(node.name)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
    return names


def test_the_finder_sees_a_private_lightning_call():
    own = {"_trainer"}
    src = "def f(stopping, trainer, cell):\n    stopping._evaluate_stopping_criteria(1)\n" \
          "    trainer.fit_loop.epoch_loop.batch_progress.is_last_batch\n    cell._trainer()\n    torch._foreach_mul\n"
    assert private_lightning_uses(src, own) == [
        "line 2: ._evaluate_stopping_criteria", "line 3: .batch_progress", "line 3: .epoch_loop", "line 3: .fit_loop"
    ]


def test_the_lockstep_wing_makes_no_private_lightning_call():
    """A lockstep group drives Lightning's objects through their public hooks and attributes only."""
    own = _own_private_names() | {"_return_value"}  # Hydra's JobReturn: a failed job's exception (not Lightning)
    found = {
        path.name: uses
        for path in sorted((PACKAGE / "lockstep").glob("*.py"))
        if (uses := private_lightning_uses(path.read_text(), own))
    }
    assert found == {}

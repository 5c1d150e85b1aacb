"""Every command the README and docs/ show resolves at HEAD: each ``python -m ner_lightning…``,
``ner-lightning …`` and ``benchmarks/…`` command names a module or script that exists, its
arguments parse, and a training command's overrides compose — unless its line names the commit
it ran at (a page may quote a command of an earlier tree beside the result it gave)."""
from __future__ import annotations

import argparse
import importlib.util
import re
import runpy
import shlex
import signal
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser

from ner_lightning.config import CONFIG_DIR

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
START = re.compile(r"(?:^|[\s`(])((?:python3? )?-m ner_lightning[\w.]*|ner-lightning|(?:python3? )?benchmarks/[\w./-]+\.(?:py|sh))"
                   r"(?=[\s`)]|$)")
COMMIT = re.compile(r"\b(?:commit|at|from|tree of|checkout of)\s+`?[0-9a-f]{7,40}\b|\b[0-9a-f]{7,40}\b(?=\s*\))")
TRAINING = ("ner_lightning.run", "ner-lightning")


def _logical_lines(text: str):
    """(line number, line) with shell continuations joined in code blocks and an inline code
    span that wraps onto the next line of a paragraph joined with it."""
    lines = text.splitlines()
    fenced, i = False, 0
    while i < len(lines):
        start, line = i + 1, lines[i]
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced:
            while line.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i].strip()
        else:
            while line.count("`") % 2 and i + 1 < len(lines) and lines[i + 1].strip():
                i += 1
                line = line + " " + lines[i].strip()
        yield start, line
        i += 1


def _command(line: str, match: re.Match) -> list[str] | None:
    """The command's words from where it starts to the end of its code span or shell line."""
    rest = line[match.start(1):]
    if "`" in line[:match.start(1)] and "`" in rest:  # inline code: up to the closing backtick
        rest = rest.split("`", 1)[0]
    rest = re.sub(r"<[^<>]+>", "PLACEHOLDER", rest)  # `<cell folder>`: a value the reader fills in
    rest = re.split(r"\s+#\s|\s*[|;]\s|\s*&&\s|\s*>\s*\S+|\s<<", rest)[0]
    try:
        words = shlex.split(rest)
    except ValueError:  # an unbalanced quote in prose
        return None
    if words[:1] in (["python"], ["python3"]):
        words = words[1:]
    for k, word in enumerate(words):  # "(python -m ner_lightning.run): …" in prose ends at the parenthesis
        if word.rstrip(":,.").endswith(")") and word.count(")") > word.count("("):
            words = words[:k] + [word.rstrip("):,.")]
            break
    return [w for w in words if w != "…"]


def commands() -> list[tuple[str, list[str]]]:
    found = []
    for page in PAGES:
        for number, line in _logical_lines(page.read_text()):
            if COMMIT.search(line):
                continue
            for match in START.finditer(line):
                if re.search(r"(^|\s)#\s", line[:match.start(1)]):  # inside a shell comment
                    continue
                words = _command(line, match)
                if words:
                    found.append((f"{page.relative_to(ROOT)}:{number}", words))
    return found


class _Parsed(Exception):
    """Raised once a command's arguments have parsed: nothing of it runs."""


def _parse_only(monkeypatch):
    real = argparse.ArgumentParser.parse_known_args

    def parse(self, args=None, namespace=None):
        result = real(self, args, namespace)
        raise _Parsed(result)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", parse)


def _first_of_sweeps(overrides: list[str]) -> list[str]:
    """Each sweep override as its first value (a grid's first cell composes like every other)."""
    out = []
    for o in OverridesParser.create().parse_overrides(overrides):
        if o.is_sweep_override():
            value = next(iter(o.sweep_string_iterator()))
            out.append(f"{o.get_key_element()}={value}")
        else:
            out.append(o.input_line)
    return out


def _compose(words: list[str]) -> None:
    config_dir = CONFIG_DIR
    overrides = []
    skip = False
    for i, w in enumerate(words):
        if skip:
            skip = False
            continue
        if w in ("-m", "--multirun", "--info", "--resolve", "--help", "-h", "--hydra-help"):
            continue
        if w in ("--config-dir", "-cd"):
            config_dir, skip = Path(words[i + 1]), True
            continue
        if w.startswith("--cfg") or w in ("job", "hydra", "all") and i and words[i - 1] == "--cfg":
            continue
        if w.startswith("$") or re.match(r"^[\w.+~/]+=\$", w):  # a shell variable the page sets elsewhere
            continue
        overrides.append(w)
    if not config_dir.is_dir():  # a user's own config folder in an example: the package's stands in
        config_dir = CONFIG_DIR
        overrides = [o for o in overrides if not re.match(r"^(dataset|loss)=my_", o)]
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(config_dir.resolve()), version_base=None):
        compose("config", overrides=_first_of_sweeps(overrides), return_hydra_config=True)
    GlobalHydra.instance().clear()


def _too_long(signum, frame):
    raise TimeoutError("the command ran past its argument parsing (it should stop there)")


def _run_parsing(target: list[str], monkeypatch) -> None:
    """Run a module or script under argv ``target`` until its arguments have parsed (a command
    that does work before parsing them fails after 60 s instead of running on)."""
    _parse_only(monkeypatch)
    signal.signal(signal.SIGALRM, _too_long)
    signal.alarm(60)
    try:
        _run(target, monkeypatch)
    finally:
        signal.alarm(0)


def _run(target: list[str], monkeypatch) -> None:
    head, args = target[0], target[1:]
    monkeypatch.setattr(sys, "argv", [head, *args])
    with pytest.raises(_Parsed):
        if head == "-m":
            monkeypatch.setattr(sys, "argv", [args[0], *args[1:]])
            runpy.run_module(args[0], run_name="__main__", alter_sys=True)
        else:
            monkeypatch.syspath_prepend(str(ROOT / Path(head).parent))
            runpy.run_path(str(ROOT / head), run_name="__main__")


CASES = commands()


def test_the_pages_show_commands():
    assert len(CASES) > 100  # the collector finds the pages' commands (a broken pattern finds none)
    assert any(words[:2] == ["-m", "ner_lightning.report"] for _, words in CASES)


@pytest.mark.parametrize("where, words", CASES, ids=[f"{w}:{' '.join(c)[:60]}" for w, c in CASES])
def test_a_documented_command_resolves_at_head(where, words, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    if words[0] == "ner-lightning":
        words = ["-m", "ner_lightning.run", *words[1:]]
    if words[0] == "-m" and words[1] in TRAINING and words[2:3] != ["study"]:
        _compose(words[2:])
        return
    if words[0] == "-m" and words[1] == "ner_lightning.run":  # `ner-lightning study …`: the study's parser
        words = ["-m", "ner_lightning.study", *words[3:]]
    if words[0] != "-m":
        script = ROOT / words[0]
        assert script.is_file(), f"{where}: {words[0]} does not exist"
        if script.suffix == ".sh" or len(words) == 1:  # a script named, not run
            return
    elif len(words) == 2:  # a module named, not run
        assert importlib.util.find_spec(words[1]) is not None, f"{where}: no module {words[1]}"
        return
    _run_parsing(words, monkeypatch)


IMPORT = re.compile(r"^\s*from (ner_lightning[\w.]*) import \(?([\w, ]+)\)?\s*$")
IMPORTS = [(f"{page.relative_to(ROOT)}:{number}", m[1], [n.strip() for n in m[2].split(",") if n.strip()])
           for page in PAGES for number, line in _logical_lines(page.read_text())
           if (m := IMPORT.match(line)) and not COMMIT.search(line)]


@pytest.mark.parametrize("where, module, names", IMPORTS, ids=[w for w, _, _ in IMPORTS])
def test_a_documented_snippet_imports_what_exists_at_head(where, module, names):
    loaded = importlib.import_module(module)
    missing = [n for n in names if not hasattr(loaded, n)]
    assert not missing, f"{where}: {module} has no {', '.join(missing)}"


def test_the_performance_page_and_the_replication_page_hold_the_present():
    """docs/benchmarks.md: current figures only (no dated section titles, no account of how a
    figure changed: that lives beside its raw files under docs/bench_runs/); replication.md:
    the current verdicts, under 600 lines, its analyses' history in replication_archive.md."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    dated = [line for line in text.splitlines() if line.startswith("#") and re.search(r"\d{4}-\d{2}-\d{2}", line)]
    assert not dated, f"dated section titles: {dated}"
    narrative = re.findall(
        r"\b(?:was|were|earlier|formerly|previously|no longer|used to|(?:first|second) (?:invocation|version|run))\b",
        text,
        re.IGNORECASE,
    )
    assert not narrative, f"benchmarks.md tells a history: {narrative}"
    replication = ROOT / "docs" / "results" / "replication.md"
    assert len(replication.read_text().splitlines()) < 600
    assert "replication_archive.md" in replication.read_text()

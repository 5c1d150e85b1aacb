"""Every ``_target_`` a config names resolves to what it named: the configs in ``conf/`` and the
run records committed under ``docs/results/runs/`` (each cell's resolved config, as an export's
``config.yaml`` holds it). When the package's modules were grouped into wings (cell/, export/,
precision/, study/), no ``_target_`` moved: the classes and functions configs build stayed in
data/, models/, callbacks/, losses, optim, checkpoint_io and wandb_logging, so files written
before the move (exports, results.json, run stores) load as they are."""
from __future__ import annotations

import json
import lzma
import re
from pathlib import Path

import pytest
from hydra._internal.utils import _locate

ROOT = Path(__file__).resolve().parents[1]
TARGET_IN_YAML = re.compile(r"^\s*_target_:\s*([\w.]+)\s*$", re.M)
TARGET_IN_JSON = re.compile(r'"_target_":\s*"([\w.]+)"')


def conf_targets() -> set[str]:
    return {t for f in (ROOT / "conf").rglob("*.yaml") for t in TARGET_IN_YAML.findall(f.read_text())}


def record_targets() -> set[str]:
    """The targets in every committed run record (JSON lines, compressed, each line a file of a run
    folder as text) and study record."""
    found: set[str] = set()
    for f in (ROOT / "docs" / "results" / "runs").rglob("*"):
        if f.name.endswith(".jsonl.xz"):
            for line in lzma.open(f, "rt", encoding="utf-8"):
                text = json.loads(line).get("text", "")
                found.update(TARGET_IN_JSON.findall(text))
                found.update(TARGET_IN_YAML.findall(text))
        elif f.suffix == ".json":
            found.update(TARGET_IN_JSON.findall(f.read_text()))
    return found


def test_the_files_searched_name_targets():
    """The readers find the targets (a regex that matched nothing would pass every check below)."""
    assert "ner_lightning.models.encoder.TransformerEncoder" in conf_targets()
    assert {"ner_lightning.data.corpus.load_corpus", "ner_lightning.losses.CrossEntropy"} <= record_targets()


@pytest.mark.parametrize("source", ["conf", "docs/results/runs"])
def test_every_target_resolves(source):
    targets = conf_targets() if source == "conf" else record_targets()
    unresolved = {}
    for target in sorted(targets):
        try:
            _locate(target)
        except ImportError as err:
            unresolved[target] = str(err).splitlines()[0]
    assert not unresolved, f"_target_s in {source} that no longer resolve: {unresolved}"

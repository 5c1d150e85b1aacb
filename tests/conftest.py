"""Shared fixtures: hand-written corpora in the three on-disk layouts, and config composition."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from ner_lightning.config import REPO_ROOT, compose_config  # noqa: F401  (re-exported for tests)

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Measured precisions go to a cache of the test session, never the user's (ner_lightning/precision/choice.py),
# even where the user set NER_LIGHTNING_CACHE; no choice is inherited from the calling shell.
USER_CACHE = os.environ.get("NER_LIGHTNING_CACHE")
SESSION_CACHE = tempfile.mkdtemp(prefix="ner_lightning_cache_")
os.environ["NER_LIGHTNING_CACHE"] = SESSION_CACHE
os.environ.pop("NER_LIGHTNING_PRECISION", None)


def _pin_tiny_encoder_precision() -> None:
    """The test cache holds fp32 for the tiny encoder on this CPU, as if measured: the cells the
    tests run in subprocesses (where the flags fixture below does not reach) then read it instead
    of measuring the precision again in each process — a measurement a busy machine (the suite
    itself) would not trust, so never cache. Tests of the measurement use caches of their own."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import ner_lightning  # noqa: F401  (the resolvers)
    from ner_lightning.precision import choice as precision
    from ner_lightning.config import CONFIG_DIR
    from ner_lightning.results import write_json_atomic

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        tiny = OmegaConf.to_container(compose("config", overrides=["model=tiny"]).model, resolve=True)
    names, _ = precision.candidates("cpu")
    key = precision._key(precision.device_label("cpu"), tiny, names)
    entry = {"train": "32-true", "eval": "32-true", "measured": None,
             "why": "the test suite's choice for the tiny encoder (tests/conftest.py), not measured"}
    write_json_atomic(precision.cache_path(), {key: entry})


_pin_tiny_encoder_precision()

if os.environ.get("PYTEST_XDIST_WORKER"):  # `pytest -n 2` on 2 cores: one thread per worker, not two each
    import torch

    torch.set_num_threads(1)

# Sentences written for these tests (not taken from any corpus).
TOY_SENTENCES = [
    [("Maria", "B-PER"), ("Lopez", "I-PER"), ("flew", "O"), ("to", "O"), ("Oslo", "B-LOC"), (".", "O")],
    [("The", "O"), ("Quartz", "B-ORG"), ("Bakery", "I-ORG"), ("opened", "O"), ("in", "O"), ("Leeds", "B-LOC")],
    [("Nothing", "O"), ("happened", "O"), ("today", "O"), (".", "O")],
    [("Tomas", "B-PER"), ("met", "O"), ("Anna", "B-PER"), ("Berg", "I-PER"), ("at", "O"), ("Riverside", "B-ORG"),
     ("Library", "I-ORG"), ("near", "O"), ("Lake", "B-LOC"), ("Geneva", "I-LOC"), (".", "O")],
    [("Green", "B-MISC"), ("Week", "I-MISC"), ("starts", "O"), ("on", "O"), ("Monday", "O")],
    [("He", "O"), ("sold", "O"), ("bikes", "O"), ("to", "O"), ("Nordwind", "B-ORG"), ("traders", "O")],
    [("Paris", "B-LOC"), ("and", "O"), ("Rome", "B-LOC"), ("hosted", "O"), ("the", "O"), ("Autumn", "B-MISC"),
     ("Games", "I-MISC")],
    [("Li", "B-PER"), ("Wei", "I-PER"), ("wrote", "O"), ("a", "O"), ("letter", "O"), (".", "O")],
]

REAL_DATA = REPO_ROOT.parent / "shared" / "datasets"
DATA_DIR = Path(os.environ.get("NER_DATA_DIR", REAL_DATA))


def write_conll2003(path: Path, sentences, docstart: bool = True) -> Path:
    lines = ["-DOCSTART- -X- -X- O", ""] if docstart else []
    for sent in sentences:
        lines += [f"{tok} NN I-NP {tag}" for tok, tag in sent] + [""]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_tsv(path: Path, sentences, extra_cols: int = 0) -> Path:
    lines = []
    for sent in sentences:
        for i, (tok, tag) in enumerate(sent):
            mid = [str(10 * i + k) for k in range(extra_cols)]
            lines.append("\t".join([tok, *mid, tag]))
        lines.append("")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def toy_data_dir(tmp_path: Path) -> Path:
    """A data root with a `toy` dataset in CoNLL-2003 layout (train/dev/test)."""
    d = tmp_path / "data" / "toy"
    d.mkdir(parents=True)
    write_conll2003(d / "train.txt", TOY_SENTENCES * 3)
    write_conll2003(d / "dev.txt", TOY_SENTENCES[:4])
    write_conll2003(d / "test.txt", TOY_SENTENCES[4:])
    return tmp_path / "data"


@pytest.fixture
def requires_real_data():
    if not (DATA_DIR / "conll2003" / "train.txt").is_file():
        pytest.skip(f"real corpora not found at {DATA_DIR} (set NER_DATA_DIR)")
    return DATA_DIR


@pytest.fixture
def toy_cfg(tmp_path, toy_data_dir):
    """Config for a fast run: toy corpus, tiny encoder, CPU in fp32 whatever the hardware, CSV logger only."""
    def make(*extra: str):
        overrides = [
            f"paths.data_dir={toy_data_dir}", "dataset.name=toy", "dataset.dir=${paths.data_dir}/toy",
            "model=tiny", "trainer=cpu", "trainer.precision=32-true", "trainer.max_epochs=2", "trainer.min_epochs=1", "logger=csv", "size=8",
            "trainer.enable_progress_bar=false", *extra,
        ]
        return compose_config(overrides, tmp_path / "run")
    return make


@pytest.fixture(autouse=True)
def cpu_without_native_bf16(monkeypatch):
    """In-process tests see a CPU without native bf16, so `auto` precisions resolve to fp32 on
    every machine (tests/test_hardware.py sets other flags itself)."""
    from ner_lightning import hardware
    from ner_lightning.precision import choice as precision

    monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset({"avx2"}))
    monkeypatch.setattr(precision, "_memo", {})
    os.environ.pop(precision.ENV, None)
    yield
    os.environ.pop(precision.ENV, None)  # an untrusted choice a test made never reaches the next


GENE = [[("BRCA1", "B-GENE"), ("binds", "O"), ("p53", "B-GENE"), ("protein", "I-GENE")],
        [("No", "O"), ("genes", "O"), ("here", "O")],
        [("The", "O"), ("kinase", "O"), ("ABL2", "B-GENE"), ("moved", "O")]]
SPECIES = [[("Mice", "B-Species"), ("and", "O"), ("zebrafish", "B-Species"), ("were", "O"), ("used", "O")],
           [("Human", "B-Species"), ("cells", "O"), ("grew", "O")],
           [("Nothing", "O"), ("at", "O"), ("all", "O")]]


@pytest.fixture
def multi_cfg(toy_cfg, toy_data_dir):
    """toy (CoNLL layout, PER/LOC/ORG/MISC) as the main corpus; hand-written `bc2gm` (GENE) and
    `linnaeus` (Species) folders read through the repository's dataset configs."""
    for name, sents in (("bc2gm", GENE), ("linnaeus", SPECIES)):
        d = toy_data_dir / name
        d.mkdir()
        write_tsv(d / "train.tsv", sents * 4)
        write_tsv(d / "dev.tsv", sents)
        write_tsv(d / "test.tsv", sents[::-1])

    def make(*extra):
        return toy_cfg("aux=[bc2gm,linnaeus]", "aux_size=6", *extra)
    return make


def pytest_unconfigure(config) -> None:
    """The session's precision cache goes with the session (each xdist worker made its own)."""
    shutil.rmtree(SESSION_CACHE, ignore_errors=True)

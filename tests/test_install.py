"""The framework as a library: a built wheel carries its configs and runs a cell from a folder with
no checkout around it, and a user's own configs (a dataset, a loss) live in a folder of their own
(``--config-dir``)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ner_lightning.config import REPO_ROOT

pytestmark = pytest.mark.slow

TINY = ["debug=tiny", "logger=csv", "size=8", "data.dev_size=null", "trainer=cpu", "trainer.max_epochs=1", "trainer.min_epochs=1",
        "trainer.enable_progress_bar=false"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel built from this checkout, installed without dependencies into a folder of its own
    (the dependencies come from the test environment)."""
    wheels, target = tmp_path_factory.mktemp("wheels"), tmp_path_factory.mktemp("target")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels),
                    str(REPO_ROOT)], check=True, capture_output=True, timeout=300)
    wheel = next(wheels.glob("ner_lightning-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    return target


def _env(target: Path, data_dir: Path) -> dict:
    return dict(os.environ, PYTHONPATH=str(target), NER_DATA_DIR=str(data_dir), WANDB_MODE="offline",
                HYDRA_FULL_ERROR="1")


def test_the_wheel_carries_the_configs_and_runs_a_cell_outside_the_repository(installed, tmp_path, toy_data_dir):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _env(installed, toy_data_dir)
    where = subprocess.run([sys.executable, "-c", "import ner_lightning.config as c; print(c.CONFIG_DIR)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where) == installed / "ner_lightning" / "conf" and (Path(where) / "config.yaml").is_file()
    assert not Path(where).is_symlink()
    out = subprocess.run([str(installed / "bin" / "ner-lightning"), "hydra.run.dir=cell", "dataset.name=toy",
                          "dataset.dir=${paths.data_dir}/toy", *TINY], cwd=elsewhere, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads((elsewhere / "cell" / "results.json").read_text())
    assert result["status"] == "ok" and result["config"]["paths"]["root_dir"] == str(elsewhere)


def test_a_users_own_dataset_and_loss_configs_in_a_folder_of_their_own(installed, tmp_path, toy_data_dir):
    mine = tmp_path / "my_conf"
    (mine / "dataset").mkdir(parents=True)
    (mine / "loss").mkdir()
    (mine / "dataset" / "my_corpus.yaml").write_text(
        "_target_: ner_lightning.data.corpus.load_corpus\nname: my_corpus\ndir: ${paths.data_dir}/toy\n"
        "splits: {train: train.txt, dev: dev.txt, test: test.txt}\ndelimiter: ' '\ntag_scheme: iob2\n"
        "entity_types: [LOC, MISC, ORG, PER]\ndev_from_train: null\nqueries: null\n")
    (mine / "loss" / "my_loss.yaml").write_text(
        "defaults:\n  - ce\n  - override /token_loss@token_loss: focal\n  - _self_\ntoken_loss:\n  gamma: 3.0\n")
    out = subprocess.run([str(installed / "bin" / "ner-lightning"), "--config-dir", str(mine), "dataset=my_corpus",
                          "loss=my_loss", "hydra.run.dir=cell", *TINY], cwd=tmp_path, env=_env(installed, toy_data_dir),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads((tmp_path / "cell" / "results.json").read_text())
    assert result["partition"]["dataset"] == "my_corpus"
    assert result["config"]["loss"]["token_loss"]["gamma"] == 3.0
    assert result["config"]["loss"]["token_loss"]["_target_"].endswith("FocalLoss")

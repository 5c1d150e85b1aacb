"""The ``ner-lightning`` command: the project's --help, Hydra's bash completion."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
COMMAND = Path(sys.executable).with_name("ner-lightning")


@pytest.fixture(autouse=True)
def installed():
    if not COMMAND.exists():
        pytest.skip(f"{COMMAND} not installed (pip install -e . makes it)")


def _run(*args, env=None):
    return subprocess.run([str(COMMAND), *args], capture_output=True, text=True, timeout=300, cwd="/",
                          env={**os.environ, **(env or {})})


def test_help_is_the_projects_with_examples_and_every_axis():
    out = _run("--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ner-lightning: named entity recognition under low resources")
    assert "ner-lightning -m loss=auc2t,ce size=20,50" in out.stdout and "python -m ner_lightning.predict" in out.stdout
    for axis in ("dataset:", "model:", "loss:", "data:", "optimizer:", "trainer:", "logger:", "experiment:"):
        assert f"\n{axis} " in out.stdout
    assert "Powered by Hydra" not in out.stdout


def test_bash_completion_completes_groups_and_options():
    loss = _run("-sc", "query=bash", env={"COMP_LINE": "ner-lightning los", "COMP_POINT": "17"})
    assert "loss=" in loss.stdout.split()
    options = _run("-sc", "query=bash", env={"COMP_LINE": "ner-lightning loss=a"}).stdout.split()
    assert options == ["loss=auc2t"]
    if shutil.which("bash"):
        installed = subprocess.run(["bash", "-c", f'PATH={COMMAND.parent}:$PATH; eval "$(ner-lightning -sc install=bash)"; '
                                    "complete -p ner-lightning"], capture_output=True, text=True, timeout=300)
        assert "hydra_bash_completion" in installed.stdout, installed.stderr

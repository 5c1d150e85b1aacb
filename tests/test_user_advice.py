"""What the project tells a user to do works when done: the resume command each stop prints
resumes, a refusal is one line before anything slow, a wide sweep runs, a user's own module is
found from its config folder, ``debug=tiny`` keeps the logger and runs on a small corpus."""
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import TOY_SENTENCES, compose_config, write_conll2003
from tests.test_sweep import ONE_THREAD_PER_WORKER, TOY, run_cli

TINY_CSV = TOY  # CSV logger: the W&B runs of debug=tiny are tested where they are read


def _env(data_dir, **extra):
    return dict(os.environ, NER_DATA_DIR=str(data_dir), WANDB_MODE="offline", WANDB_SILENT="true",
                **ONE_THREAD_PER_WORKER, **extra)


def _resumed(command: str) -> list[str]:
    """A printed ``python -m ...`` command as this interpreter runs it."""
    words = shlex.split(command)
    assert words[:2] == ["python", "-m"], command
    return [sys.executable, *words[1:]]


# --- resume -------------------------------------------------------------------------------------------
def test_the_resume_command_of_a_run_names_its_folder_in_place_of_any_other():
    from ner_lightning.resuming import run_resume_command, sweep_resume_command, with_folder

    assert with_folder(["size=20", "hydra.run.dir=old", "+hydra.run.dir=x"], "hydra.run.dir", "/r") == [
        "size=20", "hydra.run.dir=/r"]
    command = run_resume_command("/tmp/r x", ["loss=ce", "+a.b='c d'", "hydra.run.dir=elsewhere"])
    assert shlex.split(command) == ["python", "-m", "ner_lightning.run", "loss=ce", "+a.b='c d'",
                                    f"hydra.run.dir={Path('/tmp/r x').resolve()}"]
    assert sweep_resume_command("/s") == "python -m ner_lightning.sweep resume /s"


@pytest.mark.slow  # a run stopped with Ctrl-C, then the command it printed
def test_a_single_run_stopped_with_ctrl_c_resumes_with_the_command_it_printed(toy_data_dir, tmp_path):
    """The default folder is new at each launch: the printed command names it, and running it
    continues the run from its last checkpoint in that folder (no new folder, no 'deleted' warning)."""
    args = [*TINY_CSV, "trainer.max_epochs=40", "trainer.min_epochs=40", "callbacks.last_checkpoint.min_interval_s=0"]
    run = subprocess.Popen([sys.executable, "-m", "ner_lightning.run", *args], cwd=tmp_path, env=_env(toy_data_dir),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for _ in range(1500):
        if list(tmp_path.glob("multirun/*/*/run/checkpoints/last.ckpt")):
            break
        time.sleep(0.2)
    run.send_signal(signal.SIGINT)
    assert run.wait(600) == 130
    (folder,) = [p.parent for p in tmp_path.glob("multirun/*/*/run/failure.json")]
    error = json.loads((folder / "failure.json").read_text())["error"]
    command = error.split("resume with: ", 1)[1]
    assert f"hydra.run.dir={folder.resolve()}" in command
    again = subprocess.run(_resumed(command), cwd=tmp_path, env=_env(toy_data_dir), capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Previous log files" not in again.stdout + again.stderr  # its metrics were set aside, not deleted
    record = json.loads((folder / "cell.json").read_text())
    assert record["attempts"] == 2 and record["resumed_from"] is not None
    assert json.loads((folder / "results.json").read_text())["epochs"] == 40
    assert len(list(tmp_path.glob("multirun/*/*/run"))) == 1  # it ran in the printed folder, not a new one


@pytest.mark.slow  # a 2-cell sweep in the default time-stamped folder, then `sweep resume` from elsewhere
def test_sweep_resume_continues_a_sweep_in_its_default_folder(toy_data_dir, tmp_path):
    proc = run_cli(["-m", "loss=ce,crf", *TINY_CSV], tmp_path, toy_data_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sweep,) = [p.parent for p in tmp_path.glob("multirun/*/*/manifest.json")]
    (tmp_path / "elsewhere").mkdir()
    dry = subprocess.run([sys.executable, "-m", "ner_lightning.sweep", "resume", str(sweep), "--dry-run"],
                         cwd=tmp_path / "elsewhere", capture_output=True, text=True, timeout=600)
    assert dry.returncode == 0 and f"hydra.sweep.dir={sweep.resolve()}" in dry.stdout and f"(in {tmp_path})" in dry.stdout
    resumed = subprocess.run([sys.executable, "-m", "ner_lightning.sweep", "resume", str(sweep)],
                             cwd=tmp_path / "elsewhere", env=_env(toy_data_dir), capture_output=True, text=True,
                             timeout=600)
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0 and "2 cells — 2 done, 0 to run" in out, out[-3000:]
    assert len(list(tmp_path.glob("multirun/*/*/manifest.json"))) == 1
    status = subprocess.run([sys.executable, "-m", "ner_lightning.sweep", "status", str(sweep)], capture_output=True,
                            text=True, timeout=600)
    assert status.returncode == 0 and "2 done" in status.stdout


def test_sweep_status_is_healthy_while_a_sweep_runs_and_not_when_a_cell_failed_in_it():
    from ner_lightning.sweep.__main__ import sweep_exit_code

    running = [{"state": "done"}, {"state": "running"}, {"state": "missing"}]
    assert sweep_exit_code(running, "2026-12-05T10:00:00+00:00", running=True) == 0
    assert sweep_exit_code(running, "2026-12-05T10:00:00+00:00", running=False) == 1  # stopped: resume it
    old = {"state": "failed", "failure": {"finished": "2026-12-05T09:00:00+00:00"}}
    new = {"state": "failed", "failure": {"finished": "2026-12-05T10:05:00+00:00"}}
    assert sweep_exit_code([*running, old], "2026-12-05T10:00:00+00:00", running=True) == 0  # retried by this launch
    assert sweep_exit_code([*running, new], "2026-12-05T10:00:00+00:00", running=True) == 1
    assert sweep_exit_code([{"state": "done"}], None, running=False) == 0


def test_a_cell_on_auto_records_the_device_lightning_picks(toy_cfg):
    from ner_lightning.sweep import devices

    cfg = toy_cfg("trainer.accelerator=auto")
    import torch

    assert devices.describe(cfg)["accelerator"] == ("gpu" if torch.cuda.is_available() else "cpu")


@pytest.mark.slow  # a 2-cell sweep, one cell failing
def test_a_failed_cell_is_named_once_with_the_command_that_resumes_and_no_traceback(toy_data_dir, tmp_path):
    from ner_lightning.config import REPO_ROOT

    proc = subprocess.run(
        [sys.executable, "-m", "ner_lightning.run", "-m", "partition=0,1", *TINY_CSV,
         "+callbacks.x._target_=tests.worker_crash.FailForPartition1", f"hydra.sweep.dir={tmp_path / 's'}"],
        cwd=tmp_path, env=_env(toy_data_dir, PYTHONPATH=str(REPO_ROOT)), capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out
    assert out.count("this cell fails on purpose") == 2, out  # the cell's own line, the sweep's summary
    assert "sweep: cell 1_" in out and "ValueError('this cell fails on purpose" in out
    assert f"resume with: python -m ner_lightning.sweep resume {(tmp_path / 's').resolve()}" in out
    failure = json.loads(next((tmp_path / "s").glob("1_*/failure.json")).read_text())
    assert "Traceback" in failure["traceback"]  # kept where it belongs
    assert json.loads(next((tmp_path / "s").glob("0_*/results.json")).read_text())["status"] == "ok"  # the other ran


# --- refusals -------------------------------------------------------------------------------------------
def test_preflight_names_the_key_or_path_and_the_fix(toy_cfg, toy_data_dir, tmp_path):
    from ner_lightning.sweep.preflight import Refused, check_cell

    check_cell(toy_cfg())
    with pytest.raises(Refused, match=r"^size=500 is larger than toy/train, which has 24 sentences; choose size<=24"):
        check_cell(toy_cfg("size=500"))
    with pytest.raises(Refused, match=r"^data.dev_size=50 is larger than toy/dev, which has 4 sentences"):
        check_cell(toy_cfg("data.dev_size=50"))
    check_cell(toy_cfg("data.dev_size=50", "data.eval_size_at_most=true"))  # the debug presets' bound
    with pytest.raises(Refused, match=rf"folder {tmp_path / 'nowhere'}/toy not found .*set NER_DATA_DIR"):
        check_cell(toy_cfg(f"paths.data_dir={tmp_path / 'nowhere'}"))
    with pytest.raises(Refused, match=rf"folder {tmp_path / 'abs'} not found \(dataset.dir\) — set dataset.dir"):
        check_cell(toy_cfg(f"dataset.dir={tmp_path / 'abs'}"))
    with pytest.raises(Refused, match=r"loss.token_loss._target_: no module 'nomodule' .*--config-dir"):
        check_cell(toy_cfg("loss.token_loss._target_=nomodule.Loss"))
    (toy_data_dir / "toy" / "test.txt").unlink()
    with pytest.raises(Refused, match=rf"{toy_data_dir / 'toy' / 'test.txt'} not found \(dataset.splits.test\)"):
        check_cell(toy_cfg())


def test_preflight_imports_a_users_module_and_names_what_it_raised(toy_cfg, tmp_path, monkeypatch):
    from ner_lightning.sweep.preflight import Refused, check_cell

    (tmp_path / "mod_broken.py").write_text("raise RuntimeError('half written')\n")
    (tmp_path / "mod_fine.py").write_text("class Loss:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(Refused, match=r"loss.token_loss._target_: importing mod_broken .*RuntimeError: half written"):
        check_cell(toy_cfg("loss.token_loss._target_=mod_broken.Loss"))
    with pytest.raises(Refused, match=r"has no 'Other' \(for 'mod_fine.Other'\): check the name"):
        check_cell(toy_cfg("loss.token_loss._target_=mod_fine.Other"))


@pytest.mark.slow  # subprocesses
@pytest.mark.parametrize("args, said", [
    (["size=500"], "ner-lightning: refused: size=500 is larger than toy/train"),
    (["-m", "size=8,500"], "ner-lightning: sweep refused: cell 1 (size=500"),
    (["-m", "trainer.max_epochs=abc"], "ner-lightning: sweep refused: cell 0: trainer.max_epochs='abc': expected an int"),
    (["-m", "loss.token_loss._target_=nomodule.Loss"], "no module 'nomodule'"),
])
def test_a_mistake_is_one_line_before_lightning_loads_and_leaves_no_folder(toy_data_dir, tmp_path, args, said):
    """Nothing that needs a measurement or a model (Lightning is never imported: neither is the
    precision measurement that needs it); the message is the whole of stderr; the folder the
    launch made is gone."""
    multirun = "-m" in args
    full = [*args[:1], *TINY_CSV, *args[1:]] if multirun else [*TINY_CSV, *args]
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "ner_lightning.run", *full], cwd=tmp_path,
                          env=_env(toy_data_dir), capture_output=True, text=True, timeout=300)
    said_lines = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert proc.returncode != 0 and len(said_lines) == 1 and said in said_lines[0], said_lines
    assert not any(line.split("|")[-1].strip() == "pytorch_lightning" for line in proc.stderr.splitlines())
    assert not list(tmp_path.glob("multirun/*/*")), list(tmp_path.rglob("*"))


# --- wide sweeps ------------------------------------------------------------------------------------
def test_a_folder_name_of_many_overrides_is_bounded_unique_and_readable():
    from ner_lightning.resolvers import FOLDER_NAME_BYTES, _folder_name

    assert _folder_name("loss=ce,size=20") == "loss=ce,size=20"
    assert _folder_name("dataset.dir=/a/b") == "dataset.dir=%2Fa%2Fb"
    many = [",".join(f"+model.random_init.key_{i}={v}_{'x' * 20}" for i in range(20)) for v in ("a", "b")]
    names = [_folder_name(m) for m in many]
    assert all(len(n.encode()) <= FOLDER_NAME_BYTES for n in names) and names[0] != names[1]
    assert names[0].startswith("+model.random_init.key_0=a_") and "more-" in names[0]


WIDE = ["+model.random_init.hidden_dropout_prob=0,0.1", "+model.random_init.attention_probs_dropout_prob=0",
        "loss.dropout=0", "trainer.max_epochs=1", "trainer.min_epochs=1", "optimizer.weight_decay=0.001",
        "data.dev_size=4", "callbacks.early_stopping.patience=1", "callbacks.last_checkpoint.min_interval_s=0",
        "monitor=val/f1_macro", "loss.warmup_ratio=0.25", "+model.random_init.layer_norm_eps=1e-12",
        "+model.random_init.initializer_range=0.02", "+model.random_init.hidden_act=gelu",
        "model.random_init.max_position_embeddings=512", "+optimizer.eps=1e-8", "data.max_length=128",
        "seed=42", "init_seed=42", "keep_checkpoint=false"]


@pytest.mark.slow  # a 2-cell sweep of 20 overridden keys
def test_a_sweep_of_twenty_long_overrides_runs_with_bounded_folder_names(toy_data_dir, tmp_path):
    assert len(WIDE) == 20
    proc = run_cli(["-m", *TINY_CSV, *WIDE, f"hydra.sweep.dir={tmp_path / 'wide'}"], tmp_path, toy_data_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    folders = [p.parent for p in (tmp_path / "wide").glob("*/results.json")]
    assert len(folders) == 2 and all(len(f.name.encode()) < 255 for f in folders)
    records = [json.loads((f / "cell.json").read_text()) for f in folders]
    keys = {o.split("=")[0] for o in WIDE}
    assert all(keys <= {o.split("=")[0] for o in r["overrides"]} for r in records)  # in full (values as Hydra writes them)
    assert sorted(o for r in records for o in r["overrides"] if "hidden_dropout" in o) == [
        "+model.random_init.hidden_dropout_prob=0", "+model.random_init.hidden_dropout_prob=0.1"]


# --- debug=tiny, a user's corpus and loss -----------------------------------------------------------
def test_debug_tiny_keeps_the_runs_logger():
    cfg = compose_config(["debug=tiny"], "/tmp/unused")
    assert set(cfg.logger) == {"wandb", "csv"}
    assert OmegaConf.select(cfg, "data.eval_size_at_most") is True


USER_LOSS = '''import torch.nn.functional as F

from ner_lightning.losses import TokenLoss


class LabelSmoothingCE(TokenLoss):
    def __init__(self, smoothing: float):
        super().__init__()
        self.smoothing = smoothing

    def per_token(self, logits, targets):
        return F.cross_entropy(logits, targets, reduction="none", label_smoothing=self.smoothing)
'''


@pytest.mark.slow  # a run of the user's own corpus and loss, then predict with its export
def test_a_users_corpus_and_loss_from_the_config_folder_run_with_debug_tiny_and_predict_tags(tmp_path):
    """As the README shows: my_conf/ holds a dataset (absolute dir, 10 dev sentences) and a token
    loss whose module lies beside it; `--config-dir my_conf dataset=my_corpus debug=tiny` runs from
    another folder without PYTHONPATH, and `predict` tags with the export without that module."""
    corpus = tmp_path / "corpora" / "mine"
    corpus.mkdir(parents=True)
    write_conll2003(corpus / "train.txt", TOY_SENTENCES * 4)
    write_conll2003(corpus / "dev.txt", (TOY_SENTENCES * 2)[:10])
    write_conll2003(corpus / "test.txt", TOY_SENTENCES)
    conf = tmp_path / "my_conf"
    (conf / "dataset").mkdir(parents=True)
    (conf / "token_loss").mkdir()
    (conf / "dataset" / "my_corpus.yaml").write_text(
        f"_target_: ner_lightning.data.corpus.load_corpus\nname: my_corpus\ndir: {corpus}\n"
        "splits: {train: train.txt, dev: dev.txt, test: test.txt}\ndelimiter: ' '\ntag_scheme: iob2\n"
        "entity_types: [PER, LOC, ORG, MISC]\ndev_from_train: null\nqueries: {}\n")
    (conf / "token_loss" / "smooth.yaml").write_text("_target_: mylosses.LabelSmoothingCE\nsmoothing: 0.1\n")
    (conf / "mylosses.py").write_text(USER_LOSS)
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "ner_lightning.run", "--config-dir", str(conf), "dataset=my_corpus", "debug=tiny",
         "token_loss@loss.token_loss=smooth", "size=8", "trainer=cpu", "trainer.max_epochs=1", "logger=csv",
         "export=true", f"hydra.run.dir={work / 'cell'}"],
        cwd=work, env=_env(tmp_path / "no-data-root"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((work / "cell" / "results.json").read_text())
    assert result["token_loss"] == "mylosses.LabelSmoothingCE" and result["dev"]["micro"]["support"] > 0
    (work / "sentences.txt").write_text("Maria flew to Oslo .\n")
    tagged = subprocess.run([sys.executable, "-m", "ner_lightning.predict", str(work / "cell" / "export"),
                             str(work / "sentences.txt")], cwd=work, capture_output=True, text=True, timeout=300)
    assert tagged.returncode == 0, tagged.stderr[-3000:]
    assert [line.split()[0] for line in tagged.stdout.splitlines() if line.strip()] == ["Maria", "flew", "to", "Oslo", "."]


def test_an_allowed_module_that_cannot_be_imported_is_not_told_to_allow_it():
    from ner_lightning.export.trust import Trust, UntrustedConfigError, check_buildable
    from ner_lightning.models.base import NERModule

    node = {"_target_": "ner_lightning.models.token_classification.TokenClassificationModule",
            "token_loss": {"_target_": "notthere.Loss"}}
    with pytest.raises(UntrustedConfigError) as refused:
        check_buildable(node, NERModule, "loss", "x.yaml", Trust(("notthere",)))
    assert "notthere is allowed: put its folder on PYTHONPATH" in str(refused.value)
    assert "--allow-module" not in str(refused.value)


def test_tagging_replaces_only_a_token_loss_it_may_not_build():
    from ner_lightning.export.trust import Trust, for_tagging

    mine = {"_target_": "ner_lightning.models.x.F", "token_loss": {"_target_": "mylosses.L", "smoothing": 0.1}}
    ours = {"_target_": "ner_lightning.models.x.F", "token_loss": {"_target_": "ner_lightning.losses.MoM",
                                                                   "base": {"_target_": "mylosses.L"}}}
    assert for_tagging(mine, Trust()) == (
        {"_target_": "ner_lightning.models.x.F", "token_loss": {"_target_": "ner_lightning.losses.CrossEntropy"}}, True)
    assert for_tagging(ours, Trust())[0]["token_loss"] == {"_target_": "ner_lightning.losses.CrossEntropy"}
    assert for_tagging(mine, Trust(("mylosses",))) == (mine, False)
    assert for_tagging(mine, Trust(everything=True)) == (mine, False)

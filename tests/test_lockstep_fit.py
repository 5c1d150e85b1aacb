"""A lockstep group's cells as a user meets them: resumed after a SIGKILL, logged to W&B (each in
its own run, browsable from the sweep's wandb/ folder), exported and used to predict, trained in
bf16 on a CPU."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.test_lockstep import NO_DROPOUT, SEVERAL, _sweep
from tests.test_sweep import TOY, run_cli

WANDB = [sys.executable, "-m", "wandb"]


def _killed_sweep(sweep, partitions: str, extra: list[str], until: str, tmp_path, toy_data_dir) -> list[str]:
    """A lockstep sweep of ``partitions`` into ``sweep``, SIGKILLed as soon as a file matching
    ``until`` is there (or after 600 s); its command line, to run again."""
    args = ["-m", f"partition={partitions}", *TOY, "trainer.max_epochs=3", "trainer.min_epochs=3", *NO_DROPOUT,
            "hydra/launcher=lockstep", f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=${hydra.job.num}", *extra]
    env = dict(os.environ, NER_DATA_DIR=str(toy_data_dir), WANDB_MODE="offline", WANDB_SILENT="true")
    proc = subprocess.Popen([sys.executable, "-m", "ner_lightning.run", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 600
    while not list(sweep.glob(until)) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return args


def _same_results(a: dict, b: dict) -> None:
    """What a cell's results.json says of its experiment (not of its attempts or time)."""
    for key in ("best_epoch", "epochs", "global_steps", "dev_monitor", "compute"):
        assert b[key] == a[key], key
    assert b["dev"]["micro"] == a["dev"]["micro"] and b["test"] == a["test"]


@pytest.mark.slow
def test_a_group_killed_mid_fit_resumes_and_each_cell_ends_as_uninterrupted(toy_data_dir, tmp_path):
    """The group's last.ckpt is written every epoch (min_interval_s=0); the sweep is SIGKILLed
    once one is on disk, before any cell ended; the rerun of the same command resumes the group
    there and every cell's results.json says what the uninterrupted sweep's says."""
    extra = [*SEVERAL, "trainer.max_epochs=12", "callbacks.early_stopping.patience=3",
             "callbacks.last_checkpoint.min_interval_s=0"]
    whole = _sweep("lockstep", tmp_path, toy_data_dir, *extra)

    sweep = tmp_path / "killed"
    args = _killed_sweep(sweep, "0,1,2", extra, "lockstep/*/last.ckpt", tmp_path, toy_data_dir)
    assert list(sweep.glob("lockstep/*/last.ckpt")), "the group never wrote its last.ckpt"
    assert not list(sweep.glob("*/results.json")), "the sweep ended before it was killed"

    rerun = run_cli(args, tmp_path, toy_data_dir)
    out = rerun.stdout + rerun.stderr
    assert rerun.returncode == 0, out[-3000:]
    assert "lockstep group resumes from" in out
    resumed = {}
    for p in sweep.glob("*/results.json"):
        result = json.loads(p.read_text())
        resumed[result["partition"]["partition"]] = {**result, "_dir": p.parent}
    assert sorted(resumed) == [0, 1, 2]
    for partition, result in resumed.items():
        _same_results(whole[partition], result)
        assert len(result["attempts"]) == 2
        assert result["lockstep"]["step_dtype"] == "float32"
        # the rerun trained only the epochs after the group's last.ckpt: its CSV log has no epoch 0,
        # and fewer epochs than the cell trained in all (a restart from scratch logs them all)
        rerun_epochs = _epochs_logged(result["_dir"] / "csv" / "metrics.csv")
        assert rerun_epochs and 0 not in rerun_epochs, rerun_epochs
        assert len(rerun_epochs) < result["epochs"] == max(rerun_epochs) + 1
        print(f"partition {partition}: the rerun trained {len(rerun_epochs)} of its {result['epochs']} epochs")
    assert not (sweep / "lockstep").exists()  # every cell ended: the group's checkpoint is gone


def _epochs_logged(metrics_csv) -> set[int]:
    """The epochs with a training-loss row in a cell's CSV log."""
    import csv

    with open(metrics_csv, newline="") as f:
        return {int(float(row["epoch"])) for row in csv.DictReader(f) if row.get("train/loss_epoch")}


@pytest.mark.slow
def test_a_group_killed_while_its_cells_close_resumes_the_rest_from_its_checkpoint(toy_data_dir, tmp_path):
    """The sweep is SIGKILLed once the group's first cell has its results.json, before the others:
    the rerun forms a group of the cells left, resumes it from the killed group's last.ckpt (their
    rows of it), trains none of their epochs again, and each ends as in the uninterrupted sweep."""
    extra = [*SEVERAL, "trainer.max_epochs=6", "callbacks.last_checkpoint.min_interval_s=0"]
    partitions = "0,1,2,3,4,5,6,7"
    whole = _sweep("lockstep", tmp_path, toy_data_dir, *extra, partitions=partitions)

    sweep = tmp_path / "killed"
    args = _killed_sweep(sweep, partitions, extra, "*/results.json", tmp_path, toy_data_dir)
    closed = {json.loads(p.read_text())["partition"]["partition"] for p in sweep.glob("*/results.json")}
    assert 1 <= len(closed) < 8, f"killed with {len(closed)} of 8 cells closed"

    rerun = run_cli(args, tmp_path, toy_data_dir)
    out = rerun.stdout + rerun.stderr
    assert rerun.returncode == 0, out[-3000:]
    assert "(its rows [" in out  # the cells left, as rows of the killed group's checkpoint
    for p in sweep.glob("*/results.json"):
        result = json.loads(p.read_text())
        partition = result["partition"]["partition"]
        _same_results(whole[partition], result)
        if partition not in closed:
            rerun_epochs = _epochs_logged(p.parent / "csv" / "metrics.csv")
            assert 0 not in rerun_epochs and len(rerun_epochs) < result["epochs"], rerun_epochs
    assert len(list(sweep.glob("*/results.json"))) == 8
    assert not (sweep / "lockstep").exists()


@pytest.mark.slow
def test_the_last_cell_of_a_group_killed_while_closing_resumes_from_its_row(toy_data_dir, tmp_path):
    """A group of two, SIGKILLed once its first cell has its results.json: the rerun's one cell
    left resumes from its row of the killed group's last.ckpt (a group of one), trains none of its
    epochs again, and ends as in the uninterrupted sweep."""
    extra = [*SEVERAL, "trainer.max_epochs=6", "callbacks.last_checkpoint.min_interval_s=0"]
    whole = _sweep("lockstep", tmp_path, toy_data_dir, *extra, partitions="0,1")
    sweep = tmp_path / "killed"
    args = _killed_sweep(sweep, "0,1", extra, "*/results.json", tmp_path, toy_data_dir)
    closed = {json.loads(p.read_text())["partition"]["partition"] for p in sweep.glob("*/results.json")}
    if len(closed) == 2:  # the kill reaches the sweep a few ms after the first close, the second takes ~0.2 s
        pytest.skip("the sweep ended before it was killed: no cell was left to resume")
    rerun = run_cli(args, tmp_path, toy_data_dir)
    out = rerun.stdout + rerun.stderr
    assert rerun.returncode == 0, out[-3000:]
    assert "(its rows [" in out
    (left,) = {0, 1} - closed
    for p in sweep.glob("*/results.json"):
        result = json.loads(p.read_text())
        if result["partition"]["partition"] == left:
            _same_results(whole[left], result)
            assert result["lockstep"]["cells"] == 1  # a group of one: its row of the killed group's state
            rerun_epochs = _epochs_logged(p.parent / "csv" / "metrics.csv")
            assert 0 not in rerun_epochs and len(rerun_epochs) < result["epochs"], rerun_epochs
    assert len(list(sweep.glob("*/results.json"))) == 2 and not (sweep / "lockstep").exists()


def _inspect(path) -> list[dict]:
    proc = subprocess.run([*WANDB, "leet", "inspect", "--json", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


@pytest.mark.slow
def test_a_group_of_eight_under_wandb_gives_every_cell_its_own_finished_run(toy_data_dir, tmp_path):
    """Eight partitions, one group, logger=wandb (offline): every cell finishes, in a run of its
    own whose history holds one dev row per dev evaluation (read by W&B's own reader), and the
    sweep's wandb/ folder lists every cell's run."""
    grouped = _sweep("lockstep", tmp_path, toy_data_dir, "logger=wandb", "trainer.max_epochs=3",
                     partitions="0,1,2,3,4,5,6,7")
    assert sorted(grouped) == list(range(8))
    sweep_runs = tmp_path / "lockstep" / "wandb"
    listed = sorted(p.name for p in sweep_runs.glob("offline-run-*"))
    assert len(listed) == 8
    ids = set()
    for result in grouped.values():
        assert result["lockstep"]["cells"] == 8
        (run,) = (result["_dir"] / "wandb").glob("offline-run-*")
        assert run.name in listed
        records = _inspect(run)
        dev_rows = [r for r in records if r.get("type") == "history" and "val/f1" in r["history"]["item"]]
        assert len(dev_rows) == result["epochs"] == 3  # dev every epoch, three epochs
        summary = subprocess.run([*WANDB, "leet", "inspect", "--summary", "--json", str(sweep_runs / run.name)],
                                 capture_output=True, text=True, timeout=120)
        state = json.loads(summary.stdout)
        assert state["state"] == "finished" and state["summary"]["test/f1"] == pytest.approx(result["test"]["micro"]["f1"])
        ids.add(state["run_id"])
    assert len(ids) == 8
    latest = subprocess.run([*WANDB, "leet", "inspect", "--summary", "--json", str(sweep_runs)],
                            capture_output=True, text=True, timeout=120)
    assert latest.returncode == 0 and json.loads(latest.stdout)["run_id"] in ids


@pytest.mark.slow
def test_a_lockstep_cell_exports_and_predicts_as_any_cell(toy_data_dir, tmp_path):
    """keep_checkpoint=true: a lockstep cell keeps its own best.ckpt (a single-cell checkpoint),
    which `python -m ner_lightning.export CELL` exports and `python -m ner_lightning.predict` runs."""
    grouped = _sweep("lockstep", tmp_path, toy_data_dir, "keep_checkpoint=true", partitions="0,1")
    cell = grouped[0]["_dir"]
    assert grouped[0]["checkpoint"] and (cell / "checkpoints" / "best.ckpt").is_file()
    env = dict(os.environ, WANDB_MODE="offline")
    exported = subprocess.run([sys.executable, "-m", "ner_lightning.export", str(cell)], capture_output=True,
                              text=True, timeout=300, env=env, cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr[-3000:]
    text = tmp_path / "s.txt"
    text.write_text("Maria Lopez flew to Oslo .\n")
    predicted = subprocess.run([sys.executable, "-m", "ner_lightning.predict", str(cell / "export"), str(text)],
                               capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    assert "Maria" in predicted.stdout


@pytest.mark.slow
def test_a_bf16_mixed_group_trains_on_a_cpu(toy_data_dir, tmp_path):
    """trainer.precision=bf16-mixed: the cells form a group (no fp32-only refusal), train and
    evaluate in bf16 and say so; their dev and test scores are the cells' own in bf16 up to the
    rounding of the two attention implementations (here within 0.2 F1 on a toy corpus, and the
    selected epochs are evaluated)."""
    extra = (*SEVERAL, "trainer.precision=bf16-mixed", "callbacks.eval_precision.precision=bf16-mixed")
    grouped = _sweep("lockstep", tmp_path, toy_data_dir, *extra)
    assert sorted(grouped) == [0, 1, 2]
    for result in grouped.values():
        assert result["lockstep"]["cells"] == 3 and result["lockstep"]["dev_precision"] == "bf16-mixed"
        assert result["precision"]["train"] == "bf16-mixed"
        assert result["lockstep"]["step_dtype"] == "bfloat16"  # the stacked step itself ran in bf16
        assert result["best_epoch"] is not None and result["test"]["micro"]["f1"] >= 0


@pytest.mark.slow
def test_a_worker_that_dies_fails_its_groups_cells_only_and_the_rerun_resumes_them(toy_data_dir, tmp_path):
    """Two groups (CE, focal) on two workers; the focal group's worker dies mid-fit (os._exit(9)
    after the group's first last.ckpt): its two cells fail, the CE group's finish; the rerun of the
    same command runs only the focal cells, resuming their group from its last.ckpt."""
    from ner_lightning.config import REPO_ROOT

    sweep = tmp_path / "s"
    args = ["-m", "loss=ce,focal", "partition=0,1", *TOY, *NO_DROPOUT, *SEVERAL, "trainer.max_epochs=4",
            "callbacks.model_checkpoint.monitor=null", "callbacks.early_stopping=null",  # dev selected every epoch
            "callbacks.last_checkpoint.min_interval_s=0",
            "callbacks.predictions._target_=tests.worker_crash.ExitOnceInDev", "hydra/launcher=lockstep",
            "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=${hydra.job.num}"]
    env = dict(os.environ, NER_DATA_DIR=str(toy_data_dir), WANDB_MODE="offline", WANDB_SILENT="true",
               PYTHONPATH=str(REPO_ROOT), CRASH_FLAG=str(tmp_path / "crashed"), OMP_NUM_THREADS="1")
    first = subprocess.run([sys.executable, "-m", "ner_lightning.run", *args], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
    out = first.stdout + first.stderr
    assert first.returncode != 0 and (tmp_path / "crashed").exists(), out[-3000:]
    assert "4 cells — 4 ran, 2 failed" in out and "died (exit code 9)" in out
    done = {json.loads(p.read_text())["grid"]["loss"] for p in sweep.glob("*/results.json")}
    assert done == {"ce"} and len(list(sweep.glob("*/results.json"))) == 2
    assert list(sweep.glob("lockstep/*/last.ckpt"))  # the dead group's checkpoint, for the rerun

    rerun = subprocess.run([sys.executable, "-m", "ner_lightning.run", *args], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
    out = rerun.stdout + rerun.stderr
    assert rerun.returncode == 0, out[-3000:]
    assert "4 cells — 2 done, 2 to run" in out and "lockstep group resumes from" in out
    results = [json.loads(p.read_text()) for p in sweep.glob("*/results.json")]
    assert sorted(r["grid"]["loss"] for r in results) == ["ce", "ce", "focal", "focal"]
    assert all(r["lockstep"]["cells"] == 2 for r in results)

"""The Hydra entry point as a user runs it: a real `-m` multirun in a subprocess."""
import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest


pytestmark = pytest.mark.slow


# Under `pytest -n`, every worker runs its subprocess cells on one thread (as the worker itself).
ONE_THREAD_PER_WORKER = {"OMP_NUM_THREADS": "1"} if os.environ.get("PYTEST_XDIST_WORKER") else {}


def run_cli(args, cwd, data_dir):
    env = dict(os.environ, NER_DATA_DIR=str(data_dir), WANDB_MODE="offline", WANDB_SILENT="true",
               HYDRA_FULL_ERROR="0", **ONE_THREAD_PER_WORKER)
    return subprocess.run([sys.executable, "-m", "ner_lightning.run", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=1800)


def job_dirs(cwd: Path):
    return sorted(p.parent for p in (cwd / "multirun").glob("*/*/*/.hydra"))


def test_issue_grid_runs_as_written_on_real_conll(requires_real_data, tmp_path):
    """`-m loss=auc2t,ce size=20,50` (tiny encoder, 2 epochs): four cells, no failure, every cell on the
    untyped labels both objectives can use."""
    proc = run_cli(["-m", "loss=auc2t,ce", "size=20,50", "model=tiny", "trainer=cpu", "trainer.max_epochs=2",
                    "trainer.min_epochs=1", "data.dev_size=300"], tmp_path, requires_real_data)
    assert proc.returncode == 0, proc.stderr[-3000:]
    dirs = job_dirs(tmp_path)
    assert len(dirs) == 4
    assert [d.name.split("_")[0] for d in dirs] == ["0", "1", "2", "3"]
    results = [json.loads((d / "results.json").read_text()) for d in dirs]
    cells = [(r["overrides"][0], r["partition"]["size"], r["config"]["data"]["label_scheme"]) for r in results]
    assert cells == [("loss=auc2t", 20, "untyped"), ("loss=auc2t", 50, "untyped"),
                     ("loss=ce", 20, "untyped"), ("loss=ce", 50, "untyped")]
    assert all(r["overrides"][-1] == "data.label_scheme=untyped" for r in results)
    assert results[0]["partition"]["sha256"] == results[2]["partition"]["sha256"]  # paired across losses
    assert results[1]["partition"]["sha256"] == results[3]["partition"]["sha256"]
    for r in results:
        assert r["status"] == "ok" and r["config"]["dataset"]["name"] == "conll2003"
        assert r["test"]["micro"]["support"] == 5648  # every gold mention of CoNLL-2003 test
        assert r["dev"]["micro"]["support"] > 0 and r["epochs"] == 2
    assert all(set(r["test"]["per_type"]) == {"ENT"} for r in results)
    # one W&B group for the sweep, one offline run per cell, each finished
    groups = {r["config"]["group"] for r in results}
    assert len(groups) == 1
    from ner_lightning.report.wandb_summary import read_offline_run

    for d, r in zip(dirs, results):
        (folder,) = list((d / "wandb").glob("offline-run-*"))
        wb = read_offline_run(folder)  # group-by keys at the top of the config, test scores in the summary
        assert wb["config"]["loss"] == r["overrides"][0].split("=")[1] and wb["config"]["size"] == r["partition"]["size"]
        assert wb["config"]["config"]["data"]["label_scheme"] == r["config"]["data"]["label_scheme"]
        assert wb["summary"]["test/f1"] == pytest.approx(r["test"]["micro"]["f1"])
        assert wb["summary"]["test/f1_lenient"] == pytest.approx(r["test"]["lenient"]["micro"]["f1"])
        assert wb["summary"]["compute/optimizer_steps"] == r["compute"]["optimizer_steps"]
    assert "untyped labels" in proc.stderr + proc.stdout and "test F1" in proc.stderr + proc.stdout


def test_a_size_larger_than_the_corpus_refuses_the_grid_before_any_cell(requires_real_data, tmp_path):
    """A mistake in one cell's settings is found before anything trains (the failing cell that does
    not take the others down: tests/test_user_advice.py)."""
    proc = run_cli(["-m", "size=99999,10", "model=tiny", "trainer=cpu", "trainer.max_epochs=1", "trainer.min_epochs=1",
                    "logger=csv", "data.dev_size=100"], tmp_path, requires_real_data)
    assert proc.returncode != 0
    assert "sweep refused: cell 0 (size=99999): size=99999 is larger than conll2003/train" in proc.stderr
    assert not job_dirs(tmp_path) and not list(tmp_path.glob("multirun/*/*"))


def test_regimes_compose_in_one_grid(requires_real_data, tmp_path):
    proc = run_cli(["-m", "loss=ce", "data.resample=none,sCR", "data.imbalance.entity_share=0.05,0.2", "size=30",
                    "model=tiny", "trainer=cpu", "trainer.max_epochs=1", "trainer.min_epochs=1", "logger=csv",
                    "data.dev_size=100"], tmp_path, requires_real_data)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads((d / "results.json").read_text()) for d in job_dirs(tmp_path)]
    assert len(results) == 4
    by_cell = {(r["training_set"]["regime"]["resample"], r["training_set"]["regime"]["imbalance"]["entity_share"]): r
               for r in results}
    for (resample, share), r in by_cell.items():
        before, after = r["training_set"]["before"], r["training_set"]["after"]
        assert abs(before["entity_token_share"] - share) <= 0.05 * share
        assert (after["sentences"] > before["sentences"]) == (resample == "sCR")
    # the same imbalance sample under both resampling settings: paired comparison
    assert by_cell[("none", 0.05)]["partition"]["sha256"] == by_cell[("sCR", 0.05)]["partition"]["sha256"]


def test_smoke_multirun_over_every_loss(toy_data_dir, tmp_path):
    """One `-m` over every loss config, MRC presets included (tiny encoder, toy corpus): every cell
    writes results."""
    from ner_lightning.config import CONFIG_DIR

    losses = sorted(p.stem for p in (CONFIG_DIR / "loss").glob("[!_]*.yaml"))
    assert len(losses) == 20
    proc = run_cli(["-m", f"loss={','.join(losses)}", "dataset.name=toy", "dataset.dir=${paths.data_dir}/toy",
                    "size=8", "debug=tiny", "data.dev_size=null", "trainer=cpu", "trainer.max_epochs=1", "logger=csv"],
                   tmp_path, toy_data_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "hydra/launcher=auto: " in proc.stdout + proc.stderr  # the default launcher says what it chose
    results = sorted((tmp_path / "multirun").rglob("results.json"))
    assert all(r.parent.parent.parent.parent == tmp_path / "multirun" for r in results)  # dataset.dir's "/" nests nothing
    assert len(results) == len(losses)
    done = {json.loads(p.read_text())["overrides"][0] for p in results}
    assert done == {f"loss={name}" for name in losses}


def test_optuna_search_over_partitions_through_the_cli(toy_data_dir, tmp_path):
    """`-m experiment=tune_mom_lambda` (tiny encoder, toy corpus, 3 trials x 2 partitions): every
    trial writes tune.json with the mean dev score, the sweeper records the best λ, no test."""
    import yaml

    command = ["-m", "experiment=tune_mom_lambda", "dataset.name=toy", "dataset.dir=${paths.data_dir}/toy",
               "size=8", "debug=tiny", "data.dev_size=null", "trainer=cpu", "trainer.max_epochs=1", "logger=csv",
               "tune_partitions=[0,1]", "hydra.sweeper.n_trials=3", "hydra.sweep.dir=tuning"]
    proc = run_cli(command, tmp_path, toy_data_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the trials are cells of a manifest: sweep status follows them, a rerun trains none again
    manifest = json.loads((tmp_path / "tuning" / "manifest.json").read_text())
    assert [c["cell"] for c in manifest["cells"]] == [0, 1, 2] and all(c["config_sha256"] for c in manifest["cells"])
    status = subprocess.run([sys.executable, "-m", "ner_lightning.sweep", "status", "tuning"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert status.returncode == 0 and "3 done" in status.stdout, status.stdout + status.stderr
    attempts = {p: json.loads(p.read_text())["attempts"] for p in (tmp_path / "tuning").glob("*/cell.json")}
    again = run_cli(command, tmp_path, toy_data_dir)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {p: json.loads(p.read_text())["attempts"] for p in attempts} == attempts  # nothing retrained
    assert len(json.loads((tmp_path / "tuning" / "manifest.json").read_text())["cells"]) == 3
    trials = sorted((tmp_path / "tuning").rglob("tune.json"))
    assert len(trials) == 3
    means = []
    for t in trials:
        record = json.loads(t.read_text())
        parts = [json.loads((t.parent / f"partition{p}" / "results.json").read_text()) for p in (0, 1)]
        assert all(r["test"] is None and r["monitor"] == "val/f1_macro" for r in parts)
        assert record["mean"] == pytest.approx(sum(r["dev_monitor"] for r in parts) / 2)
        means.append(record["mean"])
    (best,) = list((tmp_path / "tuning").rglob("optimization_results.yaml"))
    assert yaml.safe_load(best.read_text())["best_value"] == pytest.approx(max(means))
    from ner_lightning.report.__main__ import main

    main([str(best.parent), "--by", "loss.token_loss.lam", "--metrics", "dev.macro.f1", "--plots",
          str(tmp_path / "figs"), "--resamples", "100"])
    assert (tmp_path / "figs" / "tuning_value_vs_trial.png").is_file()
    assert (tmp_path / "figs" / "f1_vs_loss_token_loss_lam.png").is_file()


TOY = ["dataset.name=toy", "dataset.dir=${paths.data_dir}/toy", "size=8", "debug=tiny", "data.dev_size=null",
       "trainer=cpu", "trainer.max_epochs=2", "trainer.min_epochs=2", "logger=csv"]  # W&B where a test reads it


def _scores(sweep: Path) -> dict:
    manifest = json.loads((sweep / "manifest.json").read_text())
    return {c["dir"]: json.loads((sweep / c["dir"] / "results.json").read_text())["test"] for c in manifest["cells"]}


def test_sweep_resumes_where_it_stopped_and_skips_what_is_done(toy_data_dir, tmp_path):
    """A 3-cell sweep; a cell SIGKILLed mid-run leaves no results.json; the rerun of the same
    command runs only that cell (and one that never ran) and ends where an uninterrupted sweep ends."""
    import signal

    longer = [*TOY, "trainer.max_epochs=6", "trainer.min_epochs=6"]  # a cell lasts long enough to be killed in
    grid = ["-m", "loss=ce,crf,ce2t", f"hydra.sweep.dir={tmp_path / 'a'}", *longer]
    proc = run_cli(grid[:2] + [f"hydra.sweep.dir={tmp_path / 'whole'}"] + longer, tmp_path, toy_data_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "3 cells — 0 done, 3 to run" in proc.stdout + proc.stderr
    whole = _scores(tmp_path / "whole")

    env = dict(os.environ, NER_DATA_DIR=str(toy_data_dir), WANDB_MODE="offline", WANDB_SILENT="true")
    killed = subprocess.Popen([sys.executable, "-m", "ner_lightning.run", *grid], cwd=tmp_path, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    second = _wait_for(tmp_path / "a", "1_*/cell.json", seconds=600)
    second = second.parent if second is not None else None
    assert second is not None, "the second cell never started"
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    assert not (second / "results.json").exists()  # (a SIGKILL mid-write may leave a .*.tmp: the rerun drops it)
    from ner_lightning.sweep.__main__ import sweep_status

    counts = sweep_status(tmp_path / "a")["counts"]
    assert counts["done"] == 1 and counts["interrupted"] == 1 and counts["missing"] == 1
    first = next((tmp_path / "a").glob("0_*/results.json"))
    mtime = first.stat().st_mtime

    proc = run_cli(grid, tmp_path, toy_data_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert "3 cells — 1 done, 2 to run" in out
    assert "cell 2/3 |" in out and "cell 3/3 |" in out and "cell 1/3 |" not in out
    assert first.stat().st_mtime == mtime  # the done cell was not touched
    assert not list((tmp_path / "a").rglob(".*.tmp"))
    assert {k: v for k, v in _scores(tmp_path / "a").items()} == whole
    proc = run_cli(grid, tmp_path, toy_data_dir)
    assert "3 cells — 3 done, 0 to run" in proc.stdout + proc.stderr


def test_exported_sweep_holds_results_only_and_resumes(toy_data_dir, tmp_path):
    """`sweep export`: manifest + finished cells' results.json, no checkpoints or partial cells;
    a sweep folder restored from the export skips the exported cells."""
    import shutil

    from ner_lightning.sweep.__main__ import export

    grid = ["-m", "loss=ce,crf", f"hydra.sweep.dir={tmp_path / 'a'}", *TOY]
    assert run_cli(grid, tmp_path, toy_data_dir).returncode == 0
    unfinished = tmp_path / "a" / "9_unfinished"
    unfinished.mkdir()
    (unfinished / "cell.json").write_text("{}")
    assert export(tmp_path / "a", tmp_path / "exported") == (2, 2)
    files = sorted(p.relative_to(tmp_path / "exported").as_posix() for p in (tmp_path / "exported").rglob("*") if p.is_file())
    assert files[-2:] == ["manifest.json", "multirun.yaml"] and len(files) == 4
    assert all(f.endswith("results.json") for f in files[:2]) and not any("unfinished" in f for f in files)
    shutil.copytree(tmp_path / "exported", tmp_path / "restored")
    proc = run_cli(["-m", "loss=ce,crf,focal", f"hydra.sweep.dir={tmp_path / 'restored'}", *TOY], tmp_path, toy_data_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "3 cells — 2 done, 1 to run" in proc.stdout + proc.stderr
    # an objective that needs other labels would put every cell on untyped labels: another grid, said so
    proc = run_cli(["-m", "loss=ce,crf,ce2t", f"hydra.sweep.dir={tmp_path / 'restored'}", *TOY], tmp_path, toy_data_dir)
    assert proc.returncode != 0 and "another grid" in proc.stderr and "common_labels=false" in proc.stderr


def test_interrupt_is_recorded_as_interrupted(toy_data_dir, tmp_path):
    import signal
    import time

    env = dict(os.environ, NER_DATA_DIR=str(toy_data_dir), WANDB_MODE="offline", WANDB_SILENT="true")
    run = subprocess.Popen([sys.executable, "-m", "ner_lightning.run", f"hydra.run.dir={tmp_path / 'r'}", *TOY,
                            "trainer.max_epochs=500", "trainer.min_epochs=500"],
                           cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           # a shell's background job (`make test &`) ignores SIGINT, and Python then keeps
                           # ignoring it: give the run the default handler whoever started pytest
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for _ in range(600):
        if list((tmp_path / "r").glob("csv/metrics.csv")):
            break
        time.sleep(0.2)
    time.sleep(2)
    run.send_signal(signal.SIGINT)
    assert run.wait(600) == 130
    failure = json.loads((tmp_path / "r" / "failure.json").read_text())
    assert failure["status"] == "interrupted"
    assert "resume with: python -m ner_lightning.run " in failure["error"]
    assert failure["error"].endswith(f" hydra.run.dir={(tmp_path / 'r').resolve()}")  # the folder made explicit
    assert not (tmp_path / "r" / "results.json").exists()


def test_parallel_launcher_runs_cells_at_once_with_one_slot_each(toy_data_dir, tmp_path):
    """hydra/launcher=parallel, 2 jobs: distinct device slots, cores split, same scores as local;
    each cell's identity is the manifest's, so a rerun (by either launcher) finds every cell done.
    With the default trainer (accelerator auto, here the CPU) — the launcher pins, not rewrites."""
    args = ["-m", "loss=ce,crf", *[a for a in TOY if a != "trainer=cpu"]]
    local = run_cli(args + [f"hydra.sweep.dir={tmp_path / 'local'}"], tmp_path, toy_data_dir)
    parallel = ["hydra/launcher=parallel", "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={tmp_path / 'par'}"]
    par = run_cli(args + parallel, tmp_path, toy_data_dir)
    assert local.returncode == 0 and par.returncode == 0, par.stderr[-3000:]
    assert _scores(tmp_path / "local") == _scores(tmp_path / "par")
    manifest = json.loads((tmp_path / "par" / "manifest.json").read_text())
    for c in manifest["cells"]:
        assert json.loads((tmp_path / "par" / c["dir"] / "results.json").read_text())["config_sha256"] == c["config_sha256"]
    for again in (args + parallel, args + [f"hydra.sweep.dir={tmp_path / 'par'}"]):
        rerun = run_cli(again, tmp_path, toy_data_dir)
        assert rerun.returncode == 0 and "2 cells — 2 done, 0 to run" in rerun.stderr + rerun.stdout, rerun.stderr[-2000:]
    devs = [json.loads(p.read_text())["device"] for p in sorted((tmp_path / "par").rglob("results.json"))]
    assert sorted(d["slot"] for d in devs) == [0, 1] and len({d["pid"] for d in devs}) == 2
    assert all(d["accelerator"] == "cpu" and d["threads"] == max(1, (os.cpu_count() or 1) // 2) for d in devs)


def test_a_parallel_worker_that_dies_fails_only_its_cell_and_is_replaced(toy_data_dir, tmp_path):
    """Six cells on 2 workers, the cells of partition 1 (CE and CRF) each ending their worker
    process (os._exit(9), a segfault's kind of end): those cells fail with the exit code named, the
    other four finish, and a new worker takes a dead one's place while cells wait (the launcher
    says so, naming both): every cell ran on one of the 2 first workers or on such a replacement,
    a dead one never runs another cell, every slot 0 or 1. (How many replacements get a cell is
    the scheduler's business: a replacement started as the last cell begins may get none.)"""
    from ner_lightning.config import REPO_ROOT

    args = ["-m", "partition=0,1,2", "loss=ce,crf", *TOY, "+callbacks.x._target_=tests.worker_crash.ExitProcess",
            "hydra/launcher=parallel", "hydra.launcher.n_jobs=2",
            f"hydra.sweep.dir={tmp_path / 's'}"]
    env = dict(os.environ, NER_DATA_DIR=str(toy_data_dir), WANDB_MODE="offline", WANDB_SILENT="true",
               PYTHONPATH=str(REPO_ROOT), **ONE_THREAD_PER_WORKER)
    proc = subprocess.run([sys.executable, "-m", "ner_lightning.run", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "6 cells — 6 ran, 2 failed" in out, out[-3000:]
    assert out.count("died (exit code 9): its cells failed, the others go on") == 2  # partition 1 of ce and crf
    done = [json.loads(p.read_text()) for p in (tmp_path / "s").glob("*/results.json")]
    assert sorted(r["partition"]["partition"] for r in done) == [0, 0, 2, 2]
    assert not list((tmp_path / "s").glob("*partition=1*/results.json"))
    started = {}  # every cell's worker (cell.json, written when the cell starts), failed ones included
    for f in (tmp_path / "s").glob("*/cell.json"):
        c = json.loads(f.read_text())
        started[f.parent.name] = (c["started"], c["pid"], c["device"]["slot"], "partition=1" in f.parent.name)
    assert len(started) == 6 and {slot for _, _, slot, _ in started.values()} == {0, 1}
    replacements = re.findall(r"worker pid (\d+) takes the place of worker pid (\d+)", out)
    dead = {int(old) for _, old in replacements}
    assert 1 <= len(replacements) <= 2 and len(dead) == len(replacements)  # one new worker per death at most
    assert dead <= {pid for _, pid, _, died in started.values() if died}  # it replaced a worker that died
    first_two = {pid for _, pid, _, _ in started.values()} - {int(new) for new, _ in replacements}
    assert len(first_two) == 2  # the others ran on a replacement the launcher named
    for when, pid, _, died in started.values():
        if died:  # the worker that ran a partition-1 cell runs nothing after it
            assert not [w for w, p, _, _ in started.values() if p == pid and w > when]
    assert {r["device"]["pid"] for r in done} <= {pid for _, pid, _, _ in started.values()}


@pytest.mark.slow  # 24 tiny cells on 2 workers
def test_parallel_workers_start_once_and_run_every_cell_of_a_24_cell_sweep(toy_data_dir, tmp_path):
    """24 cells on 2 workers: 2 worker processes in all (no worker replaced), each on its own slot
    for its whole life; every later cell of a worker skips the process start-up."""
    args = ["-m", "partition=0,1,2,3,4,5", "loss=ce,crf", "size=6,8", *[a for a in TOY if not a.startswith("size")],
            "trainer.max_epochs=1", "trainer.min_epochs=1", "hydra/launcher=parallel", "hydra.launcher.n_jobs=2",
            f"hydra.sweep.dir={tmp_path / 's'}"]
    proc = run_cli(args, tmp_path, toy_data_dir)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    results = [json.loads(p.read_text()) for p in (tmp_path / "s").glob("*/results.json")]
    assert len(results) == 24
    by_pid: dict = {}
    for r in results:
        by_pid.setdefault(r["device"]["pid"], set()).add(r["device"]["slot"])
    assert len(by_pid) == 2 and sorted(s for slots in by_pid.values() for s in slots) == [0, 1]
    # the two workers start side by side: their first cells' start-ups (imports included) are
    # alike, not one after the other (then the second pays the first's imports too, ~2x)
    firsts = sorted(r["phase_s"]["startup"] for r in results)[-2:]
    assert firsts[1] < 1.5 * firsts[0], firsts
    # every later cell: no process start-up of its own (less than a first cell's, imports included;
    # not an absolute figure: on a loaded machine the time between a worker's cells grows too)
    assert sorted(r["phase_s"]["startup"] for r in results)[-3] < firsts[0], sorted(r["phase_s"]["startup"] for r in results)


def test_a_cell_whose_folder_cannot_be_made_fails_alone(toy_data_dir, tmp_path):
    """Hydra sets a cell up (folder, .hydra/, log file) before our code runs: an error there
    (here a file where the folder should be) fails that cell only, not the sweep."""
    sweep = tmp_path / "s"
    sweep.mkdir()
    # cell 0's folder is "0_" + its sorted overrides ("/" written %2F)
    (sweep / (r"0_data.dev_size=null,dataset.dir=$\{paths.data_dir\}%2Ftoy,dataset.name=toy,logger=csv,loss=ce,"
              "size=8,trainer.max_epochs=2,trainer.min_epochs=2,trainer=cpu")).write_text("not a folder")
    proc = run_cli(["-m", "loss=ce,crf", f"hydra.sweep.dir={sweep}", *TOY], tmp_path, toy_data_dir)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "could not start" in out
    assert "2 cells — 2 ran, 1 failed" in out
    assert len(list(sweep.glob("1_*/results.json"))) == 1
    from ner_lightning.sweep.__main__ import sweep_status

    status = sweep_status(sweep)
    assert status["counts"]["failed"] == 1 and status["counts"]["done"] == 1  # failed, not "missing"


def test_multi_corpus_schemes_run_in_one_grid(requires_real_data, tmp_path):
    """`-m multitask=singletask,singleaux,munch_iter,munch_stack` with auxiliaries on the real
    biomedical corpora (tiny encoder): every cell ends, the main partition is the same sentences
    in each, SingleAux chose its auxiliary on dev, auxiliaries' tests are scored."""
    proc = run_cli(["-m", "multitask=singletask,singleaux,munch_iter,munch_stack", "dataset=ncbi_disease", "size=20",
                    "aux=[bc2gm,linnaeus]", "aux_size=16", "aux_test_size=40", "loss=crf", "model=tiny", "trainer=cpu",
                    "trainer.max_epochs=2", "trainer.min_epochs=1", "++multitask.phases.max_epochs=1",
                    "logger=csv", "data.dev_size=60"], tmp_path, requires_real_data)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {r["grid"]["multitask"]: r for r in (json.loads((d / "results.json").read_text()) for d in job_dirs(tmp_path))}
    assert set(results) == {"singletask", "singleaux", "munch_iter", "munch_stack"}
    assert len({r["partition"]["sha256"] for r in results.values()}) == 1
    assert results["singletask"]["test_aux"] is None
    assert set(results["munch_iter"]["test_aux"]) == {"bc2gm", "linnaeus"}
    chosen = results["singleaux"]["singleaux"]
    assert chosen["dev_monitor"][chosen["chosen"]] == max(chosen["dev_monitor"].values())
    assert [p["epochs"] for p in results["munch_stack"]["phases"]] == [1, 1]


def _popen(args, cwd, data_dir, **kw):
    env = dict(os.environ, NER_DATA_DIR=str(data_dir), WANDB_MODE="offline", WANDB_SILENT="true", **ONE_THREAD_PER_WORKER)
    return subprocess.Popen([sys.executable, "-m", "ner_lightning.run", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def _wait_for(pattern_dir: Path, pattern: str, seconds: float = 900) -> Path | None:
    """The first file matching ``pattern`` once one exists (a process's start-up takes seconds on
    an idle machine and minutes on a loaded one: the deadline is generous, the wait ends at once)."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = sorted(pattern_dir.glob(pattern))
        if found:
            return found[0]
        time.sleep(0.2)
    return None


def test_sigterm_exits_143_with_failure_json_from_a_run_and_from_a_sweep(toy_data_dir, tmp_path):
    """What `timeout -s TERM` or a scheduler sends: the cell is interrupted, not finished."""
    import signal

    long = [*TOY, "trainer.max_epochs=500", "trainer.min_epochs=500"]
    run = _popen([f"hydra.run.dir={tmp_path / 'r'}", *long], tmp_path, toy_data_dir)
    assert _wait_for(tmp_path / "r", "csv/metrics.csv") is not None
    run.send_signal(signal.SIGTERM)
    assert run.wait(600) == 143, run.stdout.read()[-4000:]
    failure = json.loads((tmp_path / "r" / "failure.json").read_text())
    assert failure["status"] == "interrupted" and not (tmp_path / "r" / "results.json").exists()
    sweep = _popen(["-m", "loss=ce,crf", f"hydra.sweep.dir={tmp_path / 's'}", *long], tmp_path, toy_data_dir)
    assert _wait_for(tmp_path / "s", "0_*/csv/metrics.csv") is not None
    sweep.send_signal(signal.SIGTERM)
    assert sweep.wait(600) == 143, sweep.stdout.read()[-4000:]
    assert json.loads(next((tmp_path / "s").glob("0_*/failure.json")).read_text())["status"] == "interrupted"
    assert not list((tmp_path / "s").glob("1_*/cell.json"))  # the sweep stopped: the next cell never started


def test_a_second_launch_into_a_running_sweep_folder_is_refused_and_the_first_finishes(toy_data_dir, tmp_path):
    grid = ["-m", "loss=ce", f"hydra.sweep.dir={tmp_path / 's'}", *TOY, "trainer.max_epochs=300",
            "trainer.min_epochs=300"]  # one long cell: running while the second launch starts and is refused
    first = _popen(grid, tmp_path, toy_data_dir)
    assert _wait_for(tmp_path / "s", "0_*/cell.json") is not None
    second = run_cli(grid, tmp_path, toy_data_dir)
    assert second.returncode != 0 and first.poll() is None  # refused while the first runs, not after it
    assert "is in use by pid" in second.stdout + second.stderr and "a sweep runs there now" in second.stdout + second.stderr
    out, _ = first.communicate(timeout=600)
    assert first.returncode == 0, out[-3000:]
    assert len(list((tmp_path / "s").glob("*/results.json"))) == 1 and not list((tmp_path / "s").glob("*/failure.json"))


def test_another_copy_of_the_corpus_reruns_the_finished_cells_and_says_why(toy_data_dir, tmp_path):
    """NER_DATA_DIR pointing at another copy of a corpus: the finished cells are not this grid's."""
    import shutil

    other = tmp_path / "other_data"
    shutil.copytree(toy_data_dir, other)
    with (other / "toy" / "train.txt").open("a") as fh:
        fh.write("Maria NN I-NP B-PER\nsang NN I-NP O\n\n")
    grid = ["-m", "loss=ce,crf", f"hydra.sweep.dir={tmp_path / 's'}", *TOY]
    assert run_cli(grid, tmp_path, toy_data_dir).returncode == 0
    again = run_cli(grid, tmp_path, toy_data_dir)
    assert "2 cells — 2 done, 0 to run" in again.stdout + again.stderr
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert [len(v) for v in manifest["precision"].values()] == [1, 1]  # one precision for the whole sweep
    before = [json.loads(p.read_text()) for p in sorted((tmp_path / "s").glob("*/results.json"))]
    moved = run_cli(grid, tmp_path, other)
    out = moved.stdout + moved.stderr
    assert moved.returncode == 0, out[-3000:]
    assert "2 finished cell(s) will rerun" in out and "other input files: dataset:toy" in out
    after = [json.loads(p.read_text()) for p in sorted((tmp_path / "s").glob("*/results.json"))]
    for b, a in zip(before, after):
        assert a["identity"]["inputs"]["dataset:toy"] != b["identity"]["inputs"]["dataset:toy"]
        assert a["identity"]["settings_sha256"] == b["identity"]["settings_sha256"]
        assert a["code"]["version"] and a["code"]["commit"] and a["precision"]["train"] in ("32-true", "bf16-mixed")


def test_headline_grid_runs_every_objective_on_the_labels_all_can_use(toy_data_dir, tmp_path):
    """``loss=auc2t,ce``: AUC-2T needs untyped spans, CE would train on typed labels; the sweep
    runs both on untyped labels (said before training, recorded as an override) and the report
    pairs them. ``common_labels=false`` keeps each objective's labels: the report refuses to pair."""
    common = ["dataset.name=toy", "dataset.dir=${paths.data_dir}/toy", "size=8", "partition=0,1", "debug=tiny",
              "data.dev_size=null", "trainer=cpu", "trainer.max_epochs=1", "logger=csv"]
    proc = run_cli(["-m", "loss=auc2t,ce", *common, "hydra.sweep.dir=same"], tmp_path, toy_data_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "every cell runs on data.label_scheme=untyped" in proc.stderr + proc.stdout
    results = [json.loads(p.read_text()) for p in (tmp_path / "same").rglob("results.json")]
    assert len(results) == 4 and {r["config"]["data"]["label_scheme"] for r in results} == {"untyped"}
    assert all("data.label_scheme=untyped" in r["overrides"] for r in results)
    report = [sys.executable, "-m", "ner_lightning.report", "--by", "loss", "--baseline", "loss=ce", "--resamples", "50"]
    paired = subprocess.run([*report, "same"], cwd=tmp_path, capture_output=True, text=True)
    assert paired.returncode == 0 and "| auc2t | test.micro.f1 |" in paired.stdout, paired.stderr
    proc = run_cli(["-m", "loss=auc2t,ce", *common, "hydra.sweep.dir=own", "hydra.sweeper.common_labels=false"],
                   tmp_path, toy_data_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    refused = subprocess.run([*report, "own"], cwd=tmp_path, capture_output=True, text=True)
    assert refused.returncode == 1 and "data.label_scheme is untyped vs typed" in refused.stderr


def test_a_cell_sigkilled_after_its_last_checkpoint_resumes_from_it_and_ends_as_an_uninterrupted_one(
        toy_data_dir, tmp_path):
    """A real process killed (SIGKILL: no handler runs) once ``last.ckpt`` is on disk; rerunning the
    same command resumes from it — a second attempt, ``resumed_from`` set — and ends with the dev
    history, test scores and step counts of the run that was never interrupted."""
    import signal

    run = [*TOY, "trainer.max_epochs=20", "trainer.min_epochs=20", "callbacks.last_checkpoint.min_interval_s=0"]
    whole = run_cli([*run, f"hydra.run.dir={tmp_path / 'whole'}"], tmp_path, toy_data_dir)
    assert whole.returncode == 0, whole.stderr[-3000:]
    cut = tmp_path / "cut"
    proc = _popen([*run, f"hydra.run.dir={cut}"], tmp_path, toy_data_dir, start_new_session=True)
    assert _wait_for(cut, "checkpoints/last.ckpt", seconds=600) is not None, "no last.ckpt was written"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (cut / "results.json").exists(), "the run ended before it was killed: give it more epochs"
    again = run_cli([*run, f"hydra.run.dir={cut}"], tmp_path, toy_data_dir)
    assert again.returncode == 0, again.stderr[-3000:]
    a, b = (json.loads((d / "results.json").read_text()) for d in (tmp_path / "whole", cut))
    assert b["resumed_from"] == str(cut / "checkpoints" / "last.ckpt") and len(b["attempts"]) == 2
    import csv

    with open(cut / "csv" / "metrics.csv") as f:  # the second attempt's log: it trained on, not again
        assert min(int(row["epoch"]) for row in csv.DictReader(f) if row.get("epoch")) > 0
    for key in ("dev", "test", "best_epoch", "epochs", "global_steps"):
        assert b[key] == a[key], key
    assert b["compute"]["train_batches"] == a["compute"]["train_batches"]


def test_a_grid_through_the_slurm_launcher_code_path_runs_every_cell_once(toy_data_dir, tmp_path):
    """``hydra/launcher=slurm_local``: submitit pickles each cell into a process of its own, as on a
    cluster; every cell ends with its results, the manifest says so, and a rerun runs nothing."""
    from ner_lightning.sweep.__main__ import sweep_status

    grid = ["-m", "loss=ce,crf", f"hydra.sweep.dir={tmp_path / 's'}", "hydra/launcher=slurm_local", *TOY]
    first = run_cli(grid, tmp_path, toy_data_dir)
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    assert sweep_status(tmp_path / "s")["counts"] == {"done": 2}
    assert len(list((tmp_path / "s" / ".submitit").glob("*/*_submitted.pkl"))) == 2  # one submitit job per cell
    pids = {json.loads(p.read_text())["device"]["pid"] for p in (tmp_path / "s").glob("*/results.json")}
    assert len(pids) == 2  # each cell in a process of its own (the local launcher runs both in one)
    again = run_cli(grid, tmp_path, toy_data_dir)
    assert again.returncode == 0 and "2 cells — 2 done, 0 to run" in again.stdout + again.stderr

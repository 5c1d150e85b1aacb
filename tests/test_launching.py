"""Sweep machinery without a GPU: device slots with faked device counts, cell identity and
bookkeeping, status, file modes, and resuming a cell from its last checkpoint."""
import json
import multiprocessing as mp
import os
import re
import stat
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from ner_lightning.results import write_json_atomic
from ner_lightning.sweep import cells, folder_lock, devices
from tests.slot_holder import hold_slot

# A bound on waiting for a spawned worker: generous, since a loaded machine (a grid beside the
# tests) slows process start-up many times; a correct run answers within seconds.
WORKER_WAIT_S = 300


@pytest.mark.slow  # four spawned processes
def test_concurrent_workers_claim_distinct_slots_and_a_dead_workers_slot_is_reused(tmp_path):
    ctx = mp.get_context("spawn")
    release, slots = str(tmp_path / "release"), tmp_path / "slots"

    def start():
        # one queue per worker: a worker killed right after its put may die holding its queue's
        # write lock, which would block every later writer of a shared queue
        queue = ctx.Queue()
        proc = ctx.Process(target=hold_slot, args=(slots, 3, queue, release), daemon=True)  # daemonic: a failing test does not wait on them at exit
        proc.start()
        return proc, queue

    workers = [start() for _ in range(3)]
    got = [queue.get(timeout=WORKER_WAIT_S) for _, queue in workers]
    assert sorted(slot for _, slot, _ in got) == [0, 1, 2]
    assert all(slot == again for _, slot, again in got)
    # all 3 held: a 4th live worker is an error, not a silent double booking
    with pytest.raises(RuntimeError, match="all 3 device slots") as held:
        devices.claim_slot(slots, 3)
    assert all(str(pid) in str(held.value) for pid, _, _ in got)  # the holders, to find a leftover worker
    # the worker holding slot 1 dies (loky replaces it): its replacement gets slot 1
    pid_of_slot1 = next(pid for pid, slot, _ in got if slot == 1)
    victim = next(proc for proc, _ in workers if proc.pid == pid_of_slot1)
    victim.kill()
    victim.join()
    late, late_queue = start()
    assert late_queue.get(timeout=WORKER_WAIT_S)[1] == 1
    Path(release).touch()
    for proc in [proc for proc, _ in workers] + [late]:
        proc.join(30)


@pytest.mark.parametrize("n_gpus,n_jobs,expected", [
    (4, 4, [0, 1, 2, 3]),   # one job per GPU
    (2, 2, [0, 1]),
    (2, 4, [0, 1, 0, 1]),   # more jobs than GPUs: spread evenly (with a warning)
])
def test_slots_map_to_distinct_gpus(n_gpus, n_jobs, expected):
    got = [devices.device_for_slot(s, n_gpus, n_jobs, cores=16) for s in range(n_jobs)]
    assert [d["index"] for d in got] == expected and {d["accelerator"] for d in got} == {"gpu"}


def test_cells_per_gpu_puts_that_many_slots_on_each_gpu(caplog):
    got = [devices.device_for_slot(s, 2, 8, cores=16, cells_per_gpu=4) for s in range(8)]
    assert [d["index"] for d in got] == [0, 1] * 4 and not caplog.records  # as asked: no warning
    devices.device_for_slot(0, 2, 9, cores=16, cells_per_gpu=4)
    assert "9 > 2 GPUs x cells_per_gpu=4" in caplog.text


def test_the_parallel_launcher_defaults_to_cells_per_gpu_jobs_per_gpu(monkeypatch, tmp_path):
    """hydra/launcher=parallel composes n_jobs = GPUs x cells_per_gpu (default by GPU memory, at
    most one cell per two cores), and the launcher takes both."""
    import torch
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.utils import instantiate
    from types import SimpleNamespace

    from ner_lightning.config import CONFIG_DIR
    from ner_lightning.resolvers import register_resolvers

    register_resolvers()
    monkeypatch.setattr(devices, "gpu_count", lambda: 2)
    eighty_gb = SimpleNamespace(total_memory=81559 * 2**20)  # what an H100 80GB reports: 79.6 GiB
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: eighty_gb)
    monkeypatch.setattr(devices.os, "cpu_count", lambda: 32)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        large = compose("config", overrides=["hydra/launcher=parallel"], return_hydra_config=True).hydra.launcher
        assert (large.cells_per_gpu, large.n_jobs) == (8, 16)
        monkeypatch.setattr(devices.os, "cpu_count", lambda: 16)  # two 80 GiB GPUs, 16 cores: 4 cells each
        launcher_cfg = compose("config", overrides=["hydra/launcher=parallel"], return_hydra_config=True).hydra.launcher
        assert (launcher_cfg.cells_per_gpu, launcher_cfg.n_jobs) == (4, 8)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=40 * 2**30))
        monkeypatch.setattr(devices.os, "cpu_count", lambda: 2)
        few_cores = compose("config", overrides=["hydra/launcher=parallel"], return_hydra_config=True).hydra.launcher
        assert (few_cores.cells_per_gpu, few_cores.n_jobs) == (1, 2)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=12 * 2**30))
        small = compose("config", overrides=["hydra/launcher=parallel"], return_hydra_config=True).hydra.launcher
        assert (small.cells_per_gpu, small.n_jobs) == (1, 2)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=80 * 2**30))
        monkeypatch.setattr(devices.os, "cpu_count", lambda: 16)  # the interpolation resolves here
        launcher = instantiate(launcher_cfg)
        assert (launcher.cells_per_gpu, launcher.n_jobs) == (4, 8)
        with pytest.raises(Exception, match="cells_per_gpu=0: give an int >= 1"):  # hydra wraps the ValueError
            instantiate(compose("config", overrides=["hydra/launcher=parallel", "hydra.launcher.cells_per_gpu=0"],
                                return_hydra_config=True).hydra.launcher)
        with pytest.raises(Exception, match="n_jobs=0: give an int >= 1"):
            instantiate(compose("config", overrides=["hydra/launcher=parallel", "hydra.launcher.n_jobs=0"],
                                return_hydra_config=True).hydra.launcher)
    GlobalHydra.instance().clear()


def test_slots_share_the_cores():
    assert devices.device_for_slot(1, 0, n_jobs=2, cores=2) == {"accelerator": "cpu", "index": None, "slot": 1, "threads": 1}
    assert devices.device_for_slot(0, 0, n_jobs=4, cores=16)["threads"] == 4
    assert devices.device_for_slot(0, 0, n_jobs=8, cores=2)["threads"] == 1
    # 8 cells on one GPU of a 16-core machine: 2 host threads each, not 16
    assert devices.device_for_slot(9, 1, n_jobs=8, cores=16, cells_per_gpu=8) == {
        "accelerator": "gpu", "index": 0, "slot": 9, "threads": 2}


def test_a_worker_starts_with_its_thread_share(monkeypatch):
    from ner_lightning.sweep import workers

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "7")  # the user's setting stays
    with workers._thread_share(2):
        assert (os.environ["OMP_NUM_THREADS"], os.environ["MKL_NUM_THREADS"]) == ("2", "7")
    assert "OMP_NUM_THREADS" not in os.environ and os.environ["MKL_NUM_THREADS"] == "7"


def test_parallel_launcher_pins_trainer_devices(tmp_path, monkeypatch, toy_cfg):
    cfg = toy_cfg()
    cfg.trainer.accelerator = "auto"
    launcher = OmegaConf.create({"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher",
                                 "n_jobs": 3})
    monkeypatch.setattr(devices, "gpu_count", lambda: 3)
    monkeypatch.setattr(devices, "_claimed", {})
    got = devices.assign(cfg, launcher, str(tmp_path / "sweep"))
    assert got["accelerator"] == "gpu" and got["index"] == 0 and got["slot"] == 0
    # the accelerator stays as composed (it is part of the cell's identity); auto takes the pinned GPU
    assert cfg.trainer.accelerator == "auto" and list(cfg.trainer.devices) == [0]

    threads = torch.get_num_threads()
    try:
        monkeypatch.setattr(devices, "gpu_count", lambda: 0)
        monkeypatch.setattr(devices, "_claimed", {})
        cfg = toy_cfg()
        cfg.trainer.accelerator = "auto"
        got = devices.assign(cfg, launcher, str(tmp_path / "sweep2"))
        assert got["accelerator"] == "cpu" and got["threads"] == max(1, (os.cpu_count() or 1) // 3)
        assert torch.get_num_threads() == got["threads"] and cfg.trainer.accelerator == "auto"
    finally:
        torch.set_num_threads(threads)
    # any other launcher: the config decides, nothing is pinned
    cfg = toy_cfg()
    assert devices.assign(cfg, OmegaConf.create({"_target_": "x.BasicLauncher"}), str(tmp_path))["accelerator"] == "cpu"


def test_the_default_launcher_runs_cells_side_by_side_on_a_gpu_and_one_after_another_without(monkeypatch, caplog):
    """hydra/launcher=auto: on a GPU machine it launches as parallel (GPUs x cells_per_gpu workers,
    each pinned to its GPU by sweep.devices), on a CPU as local; the console says which."""
    import logging

    from ner_lightning.sweep import launchers

    ran = []
    monkeypatch.setattr(launchers.ParallelLauncher, "launch", lambda self, o, i: ran.append(("parallel", self.n_jobs)))
    monkeypatch.setattr(launchers.LocalLauncher, "launch", lambda self, o, i: ran.append(("local", None)))
    monkeypatch.setattr(devices, "default_cells_per_gpu", lambda: 4)
    config = OmegaConf.create({"hydra": {"hydra_logging": None, "verbose": False}})
    caplog.set_level(logging.INFO, logger="ner_lightning")
    for gpus, asked, expected in ((2, (None, None), ("parallel", 8)), (2, (3, 1), ("parallel", 3)), (0, (None, None), ("local", None))):
        monkeypatch.setattr(launchers, "gpu_count", lambda gpus=gpus: gpus)
        monkeypatch.setattr(devices, "gpu_count", lambda gpus=gpus: gpus)
        launcher = launchers.AutoLauncher(*asked)
        launcher.config = config
        launcher.launch([["size=8"]], 0)
        assert ran[-1] == expected
        auto = OmegaConf.create({"_target_": "hydra_plugins.ner_lightning_sweep.AutoLauncher",
                                 "n_jobs": asked[0], "cells_per_gpu": asked[1]})
        assert devices._n_jobs(auto) == expected[1]  # what a worker's cell pins itself by
    assert "2 GPU(s) here, so cells run side by side, 4 per GPU" in caplog.text
    assert "no GPU here, so one cell after another (hydra/launcher=local)" in caplog.text


def test_begin_drops_stale_files_and_resumes_only_the_same_config(tmp_path, toy_cfg):
    out = tmp_path / "cell"
    ck = out / "checkpoints"
    ck.mkdir(parents=True)
    for name in ("failure.json", "results.json"):
        (out / name).write_text("{}")
    (ck / "last.ckpt").write_text("x")
    (ck / "best.ckpt").write_text("x")
    (ck / ".last.ckpt.k2j4.tmp").write_text("x")  # StreamingCheckpointIO's temp file of a SIGKILLed write
    prefix, resume = cells.begin(toy_cfg(), out, ["loss=ce"], "sha-A", {"accelerator": "cpu"})
    assert prefix == "run" and resume is None  # no cell.json before: another (unknown) config
    assert not (out / "failure.json").exists() and not (out / "results.json").exists()
    assert not list(ck.iterdir())
    (ck / "last.ckpt").write_text("x")
    _, resume = cells.begin(toy_cfg(), out, ["loss=ce"], "sha-A", {})
    assert resume == ck / "last.ckpt"
    record = json.loads((out / "cell.json").read_text())
    assert record["attempts"] == 2 and record["config_sha256"] == "sha-A" and record["pid"] == os.getpid()
    _, resume = cells.begin(toy_cfg(), out, ["loss=ce"], "sha-B", {})
    assert resume is None and not (ck / "last.ckpt").exists()


def test_status_tells_done_failed_interrupted_running_missing(tmp_path):
    def cell(name, files):
        d = tmp_path / name
        d.mkdir()
        for f, content in files.items():
            (d / f).write_text(json.dumps(content))
        return d

    me = {"host": os.uname().nodename, "pid": os.getpid()}
    dead = {"host": os.uname().nodename, "pid": 2**22 + 12345}
    assert cells.status_of(cell("a", {"cell.json": me, "results.json": {"status": "ok"}}))["state"] == "done"
    assert cells.status_of(cell("b", {"cell.json": me, "failure.json": {"status": "failed"}}))["state"] == "failed"
    assert cells.status_of(cell("c", {"failure.json": {"status": "interrupted"}}))["state"] == "interrupted"
    assert cells.status_of(cell("d", {"cell.json": dead}))["state"] == "interrupted"  # SIGKILLed: nothing written
    assert cells.status_of(cell("e", {"cell.json": me}))["state"] == "running"
    assert cells.status_of(tmp_path / "f")["state"] == "missing"


def test_sweep_status_cli_counts_cells_and_exits_nonzero_until_done(tmp_path, capsys):
    from ner_lightning.sweep.__main__ import main

    manifest = {"cells": [{"cell": k, "overrides": [f"loss={l}"], "dir": f"{k}_loss={l}", "config_sha256": "h"}
                          for k, l in enumerate(["ce", "crf", "focal"])], "invocations": [{"started": "t"}]}
    write_json_atomic(tmp_path / "manifest.json", manifest)
    (tmp_path / "0_loss=ce").mkdir()
    write_json_atomic(tmp_path / "0_loss=ce" / "results.json", {"status": "ok", "config_sha256": "h", "wall_time_s": 60})
    (tmp_path / "1_loss=crf").mkdir()
    write_json_atomic(tmp_path / "1_loss=crf" / "failure.json", {"status": "failed", "error": "FloatingPointError: nan"})
    assert main(["status", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "3 cells — 1 done, 1 failed, 0 interrupted, 0 running, 1 missing" in out
    assert "ETA ~0:02:00" in out and "FloatingPointError: nan" in out
    write_json_atomic(tmp_path / "0_loss=ce" / "results.json", {"status": "ok", "config_sha256": "other"})
    main(["status", str(tmp_path)])
    assert "0 done" in capsys.readouterr().out  # results of another config do not count


def test_sweep_status_shows_where_cells_run(tmp_path, capsys):
    """With several cells per GPU, the status says how many run on each GPU, and --cells where each runs."""
    from ner_lightning.sweep.__main__ import main

    manifest = {"cells": [{"cell": k, "overrides": [f"partition={k}"], "dir": f"{k}_partition={k}", "config_sha256": "h"}
                          for k in range(4)], "invocations": [{"started": "t"}]}
    write_json_atomic(tmp_path / "manifest.json", manifest)
    me = {"host": os.uname().nodename, "pid": os.getpid()}
    for k, (gpu, slot) in enumerate([(0, 0), (1, 1), (0, 2)]):
        (tmp_path / f"{k}_partition={k}").mkdir()
        write_json_atomic(tmp_path / f"{k}_partition={k}" / "cell.json",
                          {**me, "device": {"accelerator": "gpu", "index": gpu, "slot": slot}})
    main(["status", str(tmp_path), "--cells"])
    out = capsys.readouterr().out
    assert "running: gpu 0 x2, gpu 1 x1" in out and "[gpu 1, slot 1]" in out


def test_status_of_a_restarted_sweep_stopped_while_composing_its_grid(tmp_path):
    """The interim manifest (numbers first, folders later) keeps the earlier cells' folders, so
    the done cells still count as done if the restarted sweep is stopped before it rewrites it."""
    from ner_lightning.sweep import cells
    from ner_lightning.sweep.__main__ import sweep_status

    write_json_atomic(tmp_path / "old" / "manifest.json", {
        "cells": [{"cell": k, "overrides": [f"loss={l}"], "dir": f"{k}_loss={l}", "config_sha256": "h"}
                  for k, l in enumerate(["ce", "crf"])], "invocations": []})
    old = cells.read_manifest(tmp_path / "old")
    (tmp_path / "0_loss=ce").mkdir()
    write_json_atomic(tmp_path / "0_loss=ce" / "results.json", {"status": "ok", "config_sha256": "h"})
    jobs = [["loss=ce"], ["loss=crf"], ["loss=focal"]]
    interim = cells.numbered(jobs, old)
    assert [c["cell"] for c in interim] == [0, 1, 2] and "dir" not in interim[2]
    write_json_atomic(tmp_path / "manifest.json", {"cells": interim, "invocations": []})
    assert sweep_status(tmp_path)["counts"] == {"done": 1, "missing": 2}
    assert cells.numbered(jobs, None) == [{"cell": k, "overrides": o} for k, o in enumerate(jobs)]


def test_results_files_are_as_readable_as_any_other(tmp_path):
    old = os.umask(0o022)
    try:
        path = write_json_atomic(tmp_path / "results.json", {"a": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert not list(tmp_path.glob(".results.json.*"))  # no temp file left


@pytest.mark.parametrize("min_interval_s", [0, 3600])
def test_a_cell_resumed_from_its_last_checkpoint_ends_as_an_uninterrupted_one(toy_cfg, tmp_path, monkeypatch, min_interval_s):
    """Kill after epoch 1, resume from last.ckpt: same dev history, test scores, steps and
    counters as the run that was never interrupted (batch order, RNG, optimiser, schedule) —
    whether last.ckpt holds epoch 1 (written every epoch) or epoch 0 (at most once an hour), and
    the best.ckpt on disk is never newer than it (a newer best waits in memory)."""
    import pytorch_lightning as pl

    from tests.helpers import train

    overrides = ("trainer.max_epochs=3", "trainer.min_epochs=3", "data.batch_size=4", "size=12",
                 f"callbacks.last_checkpoint.min_interval_s={min_interval_s}")
    whole = train(toy_cfg(*overrides))
    (tmp_path / "run" / "results.json").unlink()  # same folder: as main() does when a cell restarts

    class Killed(Exception):
        pass

    def crash(self, trainer, pl_module):
        if trainer.current_epoch == 2:
            raise Killed

    monkeypatch.setattr(pl.Callback, "on_train_epoch_start", crash, raising=False)
    cfg = toy_cfg(*overrides)
    with pytest.raises(Killed):
        train(cfg)
    monkeypatch.undo()
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert last.is_file() and not (tmp_path / "run" / "results.json").exists()
    saved_epoch = torch.load(last, weights_only=True)["epoch"]
    best = torch.load(tmp_path / "run" / "checkpoints" / "best.ckpt", weights_only=True)["epoch"]
    assert saved_epoch == (1 if min_interval_s == 0 else 0) and best <= saved_epoch
    resumed = train(toy_cfg(*overrides), resume=last)
    assert resumed["resumed_from"] == str(last)
    assert resumed["dev"] == whole["dev"] and resumed["best_epoch"] == whole["best_epoch"]
    assert resumed["test"] == whole["test"] and resumed["global_steps"] == whole["global_steps"]
    assert resumed["compute"]["train_batches"] == whole["compute"]["train_batches"]
    assert not list((tmp_path / "run" / "checkpoints").glob("*.ckpt"))  # dropped once the cell is done


def test_huge_learning_rate_fails_the_cell(toy_cfg, tmp_path):
    from tests.helpers import train

    with pytest.raises(FloatingPointError, match="diverged; try a lower optimizer.lr"):
        train(toy_cfg("optimizer.lr=1e6", "head_lr=1e6", "trainer.max_epochs=2"))
    assert not (tmp_path / "run" / "results.json").exists()


def test_a_resumed_cell_keeps_every_attempt_its_time_and_its_metrics(tmp_path, toy_cfg):
    out = tmp_path / "cell"
    cells.begin(toy_cfg(), out, ["loss=ce"], "sha-A", {})
    (out / "failure.json").write_text(json.dumps({"status": "interrupted", "elapsed_s": 18.0}))
    (out / "checkpoints").mkdir()
    (out / "checkpoints" / "last.ckpt").write_text("x")
    (out / "csv").mkdir()
    (out / "csv" / "metrics.csv").write_text("epoch,train/loss\n0,1.5\n")
    _, resume = cells.begin(toy_cfg(), out, ["loss=ce"], "sha-A", {})
    assert resume is not None
    assert (out / "csv" / "metrics.attempt1.csv").read_text() == "epoch,train/loss\n0,1.5\n"  # CSVLogger deletes metrics.csv
    history, total = cells.attempts(out, 4.5)
    assert [a["wall_time_s"] for a in history] == [18.0, 4.5] and total == 22.5
    assert history[1]["resumed_from"] == str(resume)
    assert cells.attempts(tmp_path / "no_cell", 3.0) == (None, 3.0)


def test_a_folder_is_held_by_one_process_and_released_when_it_ends(tmp_path):
    import subprocess
    import sys

    with folder_lock.exclusive(tmp_path, "sweep"):
        held = subprocess.run([sys.executable, "-c", "from pathlib import Path; from ner_lightning.sweep import folder_lock\n"
                               f"with folder_lock.exclusive(Path({str(tmp_path)!r}), 'sweep'): pass"],
                              capture_output=True, text=True)
        assert held.returncode != 0 and f"is in use by pid {os.getpid()}" in held.stderr
    with folder_lock.exclusive(tmp_path, "sweep"):  # released on exit
        pass
    killed = subprocess.run([sys.executable, "-c", "import os; from pathlib import Path; from ner_lightning.sweep import folder_lock\n"
                             f"with folder_lock.exclusive(Path({str(tmp_path)!r}), 'sweep'): os._exit(9)"])
    assert killed.returncode == 9
    with folder_lock.exclusive(tmp_path, "sweep"):  # a dead holder's lock is gone with it
        pass


def test_disk_full_is_said_in_words_with_the_folder(tmp_path, monkeypatch):
    import errno
    import shutil

    from ner_lightning.results import write_atomic

    def no_space(fh):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match=f"no space left on device at {tmp_path}"):
        write_atomic(tmp_path / "results.json", no_space)

    def torch_writer(fh):
        raise RuntimeError("[enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing file "
                           "data/0: unexpected pos 64 vs 0")

    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10 << 30, 10 << 30, 1 << 20))
    with pytest.raises(OSError, match="no space left on device") as err:
        write_atomic(tmp_path / "last.ckpt", torch_writer)
    assert "unexpected pos" in str(err.value.__cause__) and not list(tmp_path.iterdir())


def test_a_corrupt_manifest_is_named(tmp_path):
    (tmp_path / "manifest.json").write_text('{"cells": [')
    with pytest.raises(ValueError, match=f"{tmp_path / 'manifest.json'} is corrupt"):
        cells.read_manifest(tmp_path)


@pytest.mark.parametrize("bad,message", [
    ("trainer.max_epochs=0", "trainer.max_epochs=0: train at least one epoch"),
    ("trainer.max_epochs=two", "trainer.max_epochs='two': expected an int"),
    ("trainer.min_epochs=40", "trainer.min_epochs=40 > trainer.max_epochs=2"),
    ("data.batch_size=1.5", "data.batch_size=1.5: expected an int"),
    ("trainer.devices=2", "trainer.devices=2: a cell trains on one device"),
    ("trainer.devices=auto", "trainer.devices=auto: a cell trains on one device"),
    ("trainer.devices=[0,1]", "trainer.devices=[0, 1]: a cell trains on one device"),
])
def test_bad_values_are_refused_before_anything_runs_naming_the_key(toy_cfg, bad, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        toy_cfg(bad)


def test_one_device_per_cell_is_accepted(toy_cfg):
    assert toy_cfg("trainer.devices=1").trainer.devices == 1
    assert list(toy_cfg("trainer.devices=[1]").trainer.devices) == [1]


def test_wandb_group_is_the_experiment_and_start_time_of_the_sweep():
    from ner_lightning.resolvers import _sweep_name

    assert _sweep_name(None, "multirun/2026-11-25/16-06-32-123456") == "2026-11-25 16:06:32"
    assert _sweep_name("replication_auc2t", "/x/multirun/2026-11-25/16-06-32-1") == "replication_auc2t 2026-11-25 16:06:32"
    assert _sweep_name(None, "/shared/sweeps/objectives") == "objectives"


def test_the_attempts_of_a_cell_log_into_one_wandb_run(tmp_path, toy_cfg, monkeypatch):
    """Each attempt of a cell starts W&B (offline) with the cell's run id and ``resume=allow``:
    W&B files both attempts' records under one run; another cell in the folder is another run."""
    from hydra.utils import instantiate

    from ner_lightning.wandb_logging import finish_wandb

    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = toy_cfg("logger=wandb")
    out = Path(cfg.paths.output_dir)
    assert cfg.logger.wandb.resume == "allow"

    def attempt(identity: str) -> str:
        cells.begin(cfg, out, [], identity, {})
        logger = instantiate({**OmegaConf.to_container(cfg.logger.wandb, resolve=True), "save_dir": str(tmp_path)})
        try:
            logger.log_metrics({"val/f1": 0.5}, step=0)
            return logger.experiment.id
        finally:
            finish_wandb([logger])  # the cell's own run (each of a lockstep group's cells has one)

    first = attempt("sha-A")
    assert attempt("sha-A") == first  # the resumed attempt: the same W&B run
    other = attempt("sha-B")
    assert other != first  # another cell in the same folder: another run
    # offline-run-<date>_<time>-<run id>, with "-1", "-2" ... when two attempts start in the same second
    runs = sorted(re.fullmatch(r"offline-run-\d{8}_\d{6}-([0-9a-z]+)(?:-\d+)?", p.name).group(1)
                  for p in (tmp_path / "wandb").glob("offline-run-*"))
    assert runs == sorted([first, first, other])  # what W&B wrote: two attempts of one run, one other run


def test_an_offline_wandb_run_starts_without_warnings(tmp_path, toy_cfg, capfd, monkeypatch):
    """The configured W&B logger starts its (offline) run although an override is longer than a
    W&B tag may be (the toy corpus' path), and without W&B's warning about the `anonymous`
    setting that Lightning's logger always passes."""
    from ner_lightning.wandb_logging import finish_wandb
    from hydra.utils import instantiate

    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = toy_cfg("logger=wandb")
    spec = OmegaConf.to_container(cfg.logger.wandb, resolve=True)
    logger = instantiate({**spec, "save_dir": str(tmp_path)})
    try:
        run = logger.experiment
        assert run.id == spec["id"]
        assert max(map(len, spec["tags"])) > 64 and max(map(len, run.tags)) == 64
        assert "logger=wandb" in run.tags
    finally:
        finish_wandb([logger])
    assert "WARNING" not in capfd.readouterr().err


def test_reidentify_restores_the_composed_accelerator_only_when_it_gives_the_manifests_identity(tmp_path):
    """Results recorded with the device the parallel launcher pinned (trainer.accelerator=cpu)
    get the composed ``auto`` back when — and only when — that is exactly the manifest's identity."""
    from ner_lightning.results import write_json_atomic
    from ner_lightning.sweep.__main__ import main, sweep_status
    from ner_lightning.sweep.identity import identity_of

    composed = {"trainer": {"accelerator": "auto", "max_epochs": 2}, "loss": {"name": "ce"}}
    pinned = {**composed, "trainer": {**composed["trainer"], "accelerator": "cpu"}}
    other = {**pinned, "loss": {"name": "crf"}}  # really another cell
    sweep = tmp_path / "s"
    cells_ = [{"cell": k, "overrides": [f"x={k}"], "dir": f"{k}_x", "config_sha256": identity_of(composed)["sha256"]}
              for k in range(3)]
    write_json_atomic(sweep / "manifest.json", {"cells": cells_, "invocations": []})
    for c, (config, device) in zip(cells_, [(pinned, {"slot": 0}), (other, {"slot": 1}), (pinned, {})]):
        write_json_atomic(sweep / c["dir"] / "results.json", {
            "status": "ok", "config": config, "device": {"accelerator": "cpu", **device},
            "config_sha256": identity_of(config)["sha256"], "test": {"micro": {"f1": 0.5}}})
    assert [r["state"] for r in sweep_status(sweep)["rows"]] == ["missing"] * 3
    assert main(["reidentify", str(sweep)]) == 0
    fixed = json.loads((sweep / "0_x" / "results.json").read_text())
    assert fixed["config"]["trainer"]["accelerator"] == "auto" and fixed["config_sha256"] == cells_[0]["config_sha256"]
    assert fixed["reidentified"]["trainer.accelerator"] == "cpu" and fixed["test"] == {"micro": {"f1": 0.5}}
    # another cell's results, and results not run by the parallel launcher, are left alone
    assert [r["state"] for r in sweep_status(sweep)["rows"]] == ["done", "missing", "missing"]

"""Checkpoints: written straight to a temp file and renamed (ner_lightning/checkpoint_io.py), and
when the best and resume checkpoints reach the disk (callbacks.BestCheckpoint, ResumeCheckpoint)."""
import os
import stat
from types import SimpleNamespace

import pytest
import torch
from lightning_fabric.plugins import TorchCheckpointIO
from pytorch_lightning.callbacks import ModelCheckpoint

from ner_lightning.callbacks import checkpointing as callbacks
from ner_lightning.checkpoint_io import StreamingCheckpointIO


def _state(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"state_dict": {"w": torch.randn(64, 32, generator=g), "b": torch.randn(32, generator=g)},
            "optimizer_states": [{"state": {0: {"exp_avg": torch.randn(64, 32, generator=g)}}}], "epoch": seed}


def _assert_same(a: dict, b: dict) -> None:
    assert a["epoch"] == b["epoch"]
    for k in a["state_dict"]:
        assert torch.equal(a["state_dict"][k], b["state_dict"][k])
    assert torch.equal(a["optimizer_states"][0]["state"][0]["exp_avg"], b["optimizer_states"][0]["state"][0]["exp_avg"])


def test_a_checkpoint_reads_back_as_lightnings_own_and_leaves_no_temp_file(tmp_path):
    io, ours, theirs = StreamingCheckpointIO(), tmp_path / "ours" / "last.ckpt", tmp_path / "theirs.ckpt"
    io.save_checkpoint(_state(1), ours)  # creates the folder, as Lightning's does
    TorchCheckpointIO().save_checkpoint(_state(1), theirs)
    _assert_same(io.load_checkpoint(ours), TorchCheckpointIO().load_checkpoint(theirs))
    io.save_checkpoint(_state(2), ours)  # overwrites the previous epoch's
    _assert_same(io.load_checkpoint(ours), _state(2))
    assert os.listdir(ours.parent) == ["last.ckpt"]


def test_a_save_that_fails_midway_keeps_the_previous_checkpoint_whole(tmp_path):
    io, path = StreamingCheckpointIO(), tmp_path / "last.ckpt"
    io.save_checkpoint(_state(1), path)
    with pytest.raises(Exception):  # a lambda cannot be pickled: torch.save fails after writing a part
        io.save_checkpoint({**_state(2), "callbacks": {"x": lambda: 0}}, path)
    _assert_same(io.load_checkpoint(path), _state(1))
    assert os.listdir(tmp_path) == ["last.ckpt"]


def test_a_checkpoint_is_as_readable_as_any_other_file(tmp_path):
    old = os.umask(0o022)
    try:
        StreamingCheckpointIO().save_checkpoint(_state(1), tmp_path / "best.ckpt")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "best.ckpt").stat().st_mode) == 0o644


def test_a_remote_path_goes_through_lightnings_writer(monkeypatch):
    calls = []
    monkeypatch.setattr(TorchCheckpointIO, "save_checkpoint", lambda self, ck, path, opts=None: calls.append(path))
    StreamingCheckpointIO().save_checkpoint(_state(1), "memory://bucket/last.ckpt")
    assert calls == ["memory://bucket/last.ckpt"]


def test_the_default_trainer_writes_checkpoints_with_it(toy_cfg):
    from hydra.utils import instantiate

    from ner_lightning.precision.plugin import trainer_precision

    cfg = toy_cfg()
    precision = trainer_precision(cfg.trainer.precision, cfg.trainer.accelerator, instantiate(cfg.trainer.get("plugins")))
    trainer = instantiate(cfg.trainer, callbacks=[], logger=False, **precision)
    assert isinstance(trainer.strategy.checkpoint_io, StreamingCheckpointIO)


class _Trainer(SimpleNamespace):
    """A stand-in trainer that, like Lightning's, can key the held checkpoints' registry."""

    __hash__ = object.__hash__


def test_the_resume_checkpoint_waits_its_interval_unless_the_best_one_was_just_written(tmp_path, monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(callbacks.time, "monotonic", lambda: clock[0])
    best = callbacks.BestCheckpoint(dirpath=tmp_path, filename="best", save_weights_only=True)
    best._last_global_step_saved = -1
    resume = callbacks.ResumeCheckpoint(min_interval_s=60, dirpath=tmp_path, filename="last", save_weights_only=False)
    writes = []
    trainer = _Trainer(global_step=0, checkpoint_callbacks=[best, resume], is_global_zero=True, loggers=[],
                              save_checkpoint=lambda path, weights_only: writes.append((trainer.global_step, weights_only)))

    def epoch_end(step: int, seconds_later: float, best_written: bool, cb=resume) -> None:
        clock[0] += seconds_later
        trainer.global_step = step
        if best_written:
            best._last_global_step_saved = step
        cb._save_checkpoint(trainer, str(tmp_path / "last.ckpt"))

    epoch_end(7, 5, best_written=False)   # the first: written
    epoch_end(14, 5, best_written=False)  # 5 s later: skipped
    epoch_end(21, 5, best_written=True)   # best.ckpt written at this step: written
    epoch_end(28, 59, best_written=False)  # 59 s after the previous write: skipped
    epoch_end(35, 1, best_written=False)  # 60 s: written
    assert writes == [(7, False), (21, False), (35, False)]
    assert resume._last_global_step_saved == 35

    every = callbacks.ResumeCheckpoint(min_interval_s=0, dirpath=tmp_path, filename="last")
    trainer.checkpoint_callbacks, writes[:] = [best, every], []
    for step in (42, 49):
        epoch_end(step, 0, best_written=False, cb=every)
    assert [step for step, _ in writes] == [42, 49]
    with pytest.raises(ValueError, match="min_interval_s must be >= 0"):
        callbacks.ResumeCheckpoint(min_interval_s=-1)


def test_a_held_best_checkpoint_reaches_the_disk_just_before_the_resume_checkpoint(tmp_path, monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(callbacks.time, "monotonic", lambda: clock[0])
    weights = torch.zeros(3)
    writes = []
    trainer = _Trainer(global_step=0, is_global_zero=True, loggers=[])
    trainer._checkpoint_connector = SimpleNamespace(
        dump_checkpoint=lambda weights_only: {"state_dict": {"w": weights}, "global_step": trainer.global_step})
    trainer.strategy = SimpleNamespace(save_checkpoint=lambda ck, path: writes.append((os.path.basename(path), ck["global_step"], ck["state_dict"]["w"].tolist())))
    trainer.save_checkpoint = lambda path, weights_only: writes.append((os.path.basename(path), trainer.global_step, None))
    best = callbacks.BestCheckpoint(dirpath=tmp_path, filename="best", save_weights_only=True)
    resume = callbacks.ResumeCheckpoint(min_interval_s=60, dirpath=tmp_path, filename="last")
    trainer.checkpoint_callbacks = [best, resume]
    callbacks.HOLDING[trainer] = [best]  # what BestCheckpoint.setup registers

    def epoch_end(step: int, seconds_later: float, improved: bool) -> None:
        clock[0] += seconds_later
        trainer.global_step = step
        weights.fill_(step)  # training moves the weights in place
        if improved:
            best._save_checkpoint(trainer, str(tmp_path / "best.ckpt"))
        resume._save_checkpoint(trainer, str(tmp_path / "last.ckpt"))

    epoch_end(7, 5, improved=True)    # first write: the held best, then last
    epoch_end(14, 5, improved=True)   # held, and no last.ckpt for it
    epoch_end(21, 5, improved=False)
    assert writes == [("best.ckpt", 7, [7.0] * 3), ("last.ckpt", 7, None)]
    epoch_end(28, 60, improved=False)  # a minute later: step 14's weights (a copy, not the live ones), then last
    assert writes[2:] == [("best.ckpt", 14, [14.0] * 3), ("last.ckpt", 28, None)]
    epoch_end(35, 1, improved=True)
    best.on_train_end(trainer, None)  # the end of training writes what is held
    assert writes[4:] == [("best.ckpt", 35, [35.0] * 3)]
    best.write_held(trainer)
    assert len(writes) == 5  # nothing held any more

    unheld = callbacks.BestCheckpoint(hold=False, dirpath=tmp_path, filename="best", save_weights_only=True)
    trainer.checkpoint_callbacks, writes[:] = [unheld, resume], []
    epoch_end(42, 1, improved=False)
    unheld._save_checkpoint(trainer, str(tmp_path / "best.ckpt"))  # written at once, as Lightning does ...
    resume._save_checkpoint(trainer, str(tmp_path / "last.ckpt"))  # ... so last.ckpt is written with it
    assert writes == [("best.ckpt", 42, None), ("last.ckpt", 42, None)]


def test_the_resume_checkpoint_runs_after_the_other_checkpoint_callbacks(toy_cfg):
    from hydra.utils import instantiate

    cfg = toy_cfg()
    resume = instantiate(cfg.callbacks.last_checkpoint)
    best = instantiate(cfg.callbacks.model_checkpoint)
    trainer = instantiate(cfg.trainer, callbacks=[resume, best], logger=False)
    resume.setup(trainer, None, "fit")
    assert [type(c) for c in trainer.callbacks if isinstance(c, ModelCheckpoint)] == [callbacks.BestCheckpoint, callbacks.ResumeCheckpoint]
    assert trainer.checkpoint_callback is best and best.hold  # the run tests the best one

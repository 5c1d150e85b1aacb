"""Dev and test predictions of the selected model, written next to ``results.json``."""

from __future__ import annotations

import os
from pathlib import Path

import pytorch_lightning as pl

from ner_lightning.callbacks.checkpointing import selecting_checkpoint
from ner_lightning.data.column_files import write_conll
from ner_lightning.data.contract import ModelData, require_datamodule
from ner_lightning.results import best_epoch
from ner_lightning.span_counts import PredictedTags


class PredictionWriter(pl.Callback):
    """``<dirpath>/dev.conll`` and ``test.conll`` (``test_<corpus>.conll`` for each auxiliary
    corpus of a multi-corpus run): token, gold and predicted tag per line, as the span metrics
    scored them. Dev holds the evaluation that the checkpoint callback selects (the first best
    ``monitor``, or the last when it selects nothing: the final model), so it matches the weights
    that test runs with: its tags are held (on the device) at each such evaluation and written
    once, when training ends — and whenever a resume checkpoint is saved (Lightning calls
    ``on_save_checkpoint`` for full checkpoints only), so the file on disk matches the state a
    rerun resumes from. Test is written once, when testing ends."""

    def __init__(self, dirpath: str):
        self.dirpath = Path(dirpath)
        self.written: dict[str, str] = {}  # split -> file
        self.held: dict[str, PredictedTags] | None = None  # the selected dev predictions not yet written

    def result_section(self, out_dir: Path) -> dict:
        return {"predictions": {split: os.path.relpath(path, out_dir) for split, path in self.written.items()}}

    def on_validation_end(self, trainer: pl.Trainer, pl_module) -> None:
        if trainer.sanity_checking or "val" not in pl_module.predictions or not pl_module.history:
            return
        ckpt = selecting_checkpoint(trainer)
        if (
            ckpt is None
            or ckpt.monitor is None
            or best_epoch(pl_module.history, ckpt.monitor, ckpt.mode) is pl_module.history[-1]
        ):
            self.hold(pl_module.predictions["val"])

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module, checkpoint: dict) -> None:
        self.write_held(require_datamodule(trainer))

    def on_train_end(self, trainer: pl.Trainer, pl_module) -> None:
        self.write_held(require_datamodule(trainer))

    def on_test_end(self, trainer: pl.Trainer, pl_module) -> None:
        self.write(require_datamodule(trainer), pl_module.predictions.get("test", {}), "test")

    def hold(self, predicted: dict[str, PredictedTags]) -> None:
        """The selected evaluation's dev predictions, written by :meth:`write_held`."""
        self.held = dict(predicted)

    def write_held(self, dm: ModelData) -> None:
        if self.held is not None:
            self.write(dm, self.held, "dev")
            self.held = None

    def write(self, dm: ModelData, predicted: dict[str, PredictedTags], split: str) -> None:
        """Each corpus's ``predicted`` tags of ``split`` beside its tokens and gold tags."""
        for corpus, predictions in predicted.items():
            tags = predictions.as_lists()
            sentences = dm.sentences_of(split, corpus)
            name = split if corpus == dm.corpus_names[0] else f"{split}_{corpus}"
            path = write_conll(
                self.dirpath / f"{name}.conll", [s.tokens for s in sentences], [s.tags for s in sentences], tags
            )
            self.written[name] = str(path)

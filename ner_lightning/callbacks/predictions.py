"""Dev and test predictions of the selected model, written next to ``results.json``."""

from __future__ import annotations

import os
from pathlib import Path

import pytorch_lightning as pl

from ner_lightning.callbacks.checkpointing import selecting_checkpoint
from ner_lightning.data.column_files import write_conll
from ner_lightning.data.contract import ModelData, require_datamodule
from ner_lightning.results import best_epoch


class PredictionWriter(pl.Callback):
    """``<dirpath>/dev.conll`` and ``test.conll`` (``test_<corpus>.conll`` for each auxiliary
    corpus of a multi-corpus run): token, gold and predicted tag per line, as the span metrics
    scored them. Dev is written at every evaluation that the checkpoint callback would select
    (the first best ``monitor``, or every one when it selects nothing: the final model), so it
    matches the weights that test runs with; test once, when testing ends."""

    def __init__(self, dirpath: str):
        self.dirpath = Path(dirpath)
        self.written: dict[str, str] = {}  # split -> file

    def result_section(self, out_dir: Path) -> dict:
        return {"predictions": {split: os.path.relpath(path, out_dir) for split, path in self.written.items()}}

    def on_validation_end(self, trainer: pl.Trainer, pl_module) -> None:
        if trainer.sanity_checking or "val" not in pl_module.predictions or not pl_module.history:
            return
        ckpt = selecting_checkpoint(trainer)
        monitor = ckpt.monitor if ckpt is not None else None
        if monitor is None or best_epoch(pl_module.history, monitor) is pl_module.history[-1]:
            self._write(trainer, pl_module.predictions["val"], "dev")

    def on_test_end(self, trainer: pl.Trainer, pl_module) -> None:
        self._write(trainer, pl_module.predictions.get("test", {}), "test")

    def _write(self, trainer: pl.Trainer, predicted: dict[str, list[list[str]]], split: str) -> None:
        self.write(require_datamodule(trainer), predicted, split)

    def write(self, dm: ModelData, predicted: dict[str, list[list[str]]], split: str) -> None:
        """Each corpus's ``predicted`` tags of ``split`` beside its tokens and gold tags."""
        for corpus, tags in predicted.items():
            sentences = dm.sentences_of(split, corpus)
            name = split if corpus == dm.corpus_names[0] else f"{split}_{corpus}"
            path = write_conll(
                self.dirpath / f"{name}.conll", [s.tokens for s in sentences], [s.tags for s in sentences], tags
            )
            self.written[name] = str(path)

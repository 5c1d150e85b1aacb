"""What objectives and callbacks read of a data module (``LowResourceDataModule`` and its
multi-corpus subclass provide it), and how they reach it from the ``Trainer``."""

from __future__ import annotations

from typing import Protocol, cast

import pytorch_lightning as pl
import torch

from ner_lightning.data.corpus import LabelSet, Sentence


class ModelData(Protocol):
    """The data module as a model sees it."""

    framing: str  # data.framing: "tagging" or "mrc"
    scheme: str  # the multi-corpus scheme ("singletask" for one corpus)

    @property
    def corpus_names(self) -> list[str]: ...  # head / corpus key of each corpus index

    @property
    def aux_label_sets(self) -> dict[str, LabelSet]: ...  # the auxiliary corpora a model needs a head for

    def label_counts(self, corpus: str = ...) -> torch.Tensor: ...  # training word-label counts (K,)

    def sentences_of(self, split: str, corpus: str = ...) -> list[Sentence]: ...

    def gold_tags(self, split: str, corpus: str = ...) -> list[list[str]]: ...


def datamodule_of(trainer: pl.Trainer | None) -> ModelData | None:
    """The data module ``trainer`` was given (``fit``/``test(datamodule=…)``), or None."""
    # Lightning's data connector sets Trainer.datamodule at run time; the class does not declare it.
    return cast("ModelData | None", trainer.datamodule) if trainer is not None else None  # type: ignore[attr-defined]


def require_datamodule(trainer: pl.Trainer) -> ModelData:
    """:func:`datamodule_of`, for what cannot run without one."""
    dm = datamodule_of(trainer)
    if dm is None:
        raise ValueError("the Trainer has no data module: run fit/test with datamodule=LowResourceDataModule(...)")
    return dm

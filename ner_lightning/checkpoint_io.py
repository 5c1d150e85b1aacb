"""How checkpoints reach and leave the disk (Lightning's ``CheckpointIO`` plugin, ``trainer.plugins``), and
the random states a resumed fit restores (:func:`rng_states`)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from fsspec.implementations.local import LocalFileSystem
from lightning_fabric.plugins import TorchCheckpointIO
from lightning_fabric.utilities.cloud_io import get_filesystem

from ner_lightning.results import write_atomic


class StreamingCheckpointIO(TorchCheckpointIO):
    """``torch.save`` straight into a temp file beside the target, then a rename.

    As atomic as Lightning's default (a crash leaves the previous ``last.ckpt`` whole), but
    Lightning's ``_atomic_save`` first serialises the whole checkpoint into memory and copies
    that buffer once more before writing it: for MiniLM with AdamW state, 273 MB held twice
    every epoch. Local paths only; remote ones (``s3://``...) keep Lightning's way.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None or not isinstance(get_filesystem(path), LocalFileSystem):
            return super().save_checkpoint(checkpoint, path, storage_options)
        write_atomic(path, lambda fh: torch.save(checkpoint, fh), fsync=False)

    def load_checkpoint(
        self, path, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        """Tensors and plain values only, whatever the caller asks: unpickling a checkpoint runs no
        code it names (ours hold nothing else: :func:`rng_states`)."""
        return super().load_checkpoint(path, map_location=map_location, weights_only=True)


def rng_states() -> dict:
    """torch, CUDA, numpy and Python RNG states in types ``torch.load(weights_only=True)`` accepts."""
    state = np.random.get_state(legacy=True)
    assert isinstance(state, tuple)  # the legacy form: (name, keys, pos, has_gauss, gauss)
    name, keys, pos, has_gauss, gauss = state
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
        "python": random.getstate(),
    }


def set_rng_states(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    random.setstate(state["python"])

"""Counting the tensor -> Python conversions a piece of code makes (each one waits for the device
on a GPU): ``item``, ``tolist``, ``__int__``, ``__float__``, ``__bool__``, ``__index__``, ``cpu``,
``numpy``."""
from __future__ import annotations

import collections
import contextlib
import traceback

import torch

CONVERSIONS = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__", "cpu", "numpy")


@contextlib.contextmanager
def count_conversions(where: collections.Counter | None = None):
    """Counts conversions by name while the block runs; ``where`` (optional) also counts them by
    the innermost project file and line that made them."""
    counts: collections.Counter = collections.Counter()
    originals = {name: getattr(torch.Tensor, name) for name in CONVERSIONS}

    def counting(name, original):
        def method(self, *args, **kwargs):
            counts[name] += 1
            if where is not None:
                frames = [f for f in traceback.extract_stack()[:-1] if "ner_lightning" in f.filename
                          and "/tests/" not in f.filename]
                where[f"{frames[-1].filename.split('ner_lightning/')[-1]}:{frames[-1].lineno} {name}"
                      if frames else f"(outside) {name}"] += 1
            return original(self, *args, **kwargs)
        return method

    for name, original in originals.items():
        setattr(torch.Tensor, name, counting(name, original))
    try:
        yield counts
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)

"""Counting what waits for the device on a GPU in a piece of code: the tensor -> Python
conversions (``item``, ``tolist``, ``__int__``, ``__float__``, ``__bool__``, ``__index__``, ``cpu``,
``numpy``) and the operations whose output size depends on the data (``nonzero``, ``unique``,
``masked_select``, selection by a boolean mask, ``repeat_interleave`` without ``output_size``),
which the host must wait for to allocate the result."""
from __future__ import annotations

import collections
import contextlib
import traceback

import torch
from torch.utils._python_dispatch import TorchDispatchMode

CONVERSIONS = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__", "cpu", "numpy")
SIZED_BY_DATA = {"nonzero", "_unique2", "unique_consecutive", "unique_dim", "masked_select", "repeat_interleave"}
INDEXING = {"index", "index_put", "index_put_", "_index_put_impl_"}


def waits_for_data(func, args: tuple, kwargs: dict) -> str | None:
    """The name of an operation whose output size depends on the data (None for others)."""
    name = func.overloadpacket.__name__
    if name == "repeat_interleave":
        return None if kwargs.get("output_size") is not None or not isinstance(args[0], torch.Tensor) \
            or func is torch.ops.aten.repeat_interleave.self_int else name
    if name in SIZED_BY_DATA:
        return name
    if name in INDEXING and any(i is not None and i.dtype in (torch.bool, torch.uint8) for i in args[1]):
        return f"{name} by a boolean mask"
    return None


class _DataSizedOps(TorchDispatchMode):
    def __init__(self, record):
        super().__init__()
        self.record = record

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = waits_for_data(func, args, kwargs)
        if name is not None:
            self.record(name)
        return func(*args, **kwargs)


@contextlib.contextmanager
def count_conversions(where: collections.Counter | None = None):
    """Counts conversions by name while the block runs; ``where`` (optional) also counts them by
    the innermost project file and line that made them."""
    counts: collections.Counter = collections.Counter()
    originals = {name: getattr(torch.Tensor, name) for name in CONVERSIONS}

    def record(name):
        counts[name] += 1
        if where is not None:
            frames = [f for f in traceback.extract_stack()[:-2] if "ner_lightning" in f.filename
                      and "/tests/" not in f.filename]
            where[f"{frames[-1].filename.split('ner_lightning/')[-1]}:{frames[-1].lineno} {name}"
                  if frames else f"(outside) {name}"] += 1

    def counting(name, original):
        def method(self, *args, **kwargs):
            record(name)
            return original(self, *args, **kwargs)
        return method

    for name, original in originals.items():
        setattr(torch.Tensor, name, counting(name, original))
    try:
        with _DataSizedOps(record):
            yield counts
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)

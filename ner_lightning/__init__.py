"""ner_lightning: NER under low resources and class imbalance (Lightning + Hydra)."""

from importlib.metadata import PackageNotFoundError, version  # noqa: E402

from ner_lightning import clock  # noqa: F401  (first: the process clock, ner_lightning/clock.py)
from ner_lightning.resolvers import register_resolvers  # noqa: E402

try:
    __version__ = version("ner_lightning")
except PackageNotFoundError:  # run from a source tree that is not installed
    __version__ = "unknown"

register_resolvers()

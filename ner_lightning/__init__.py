"""ner_lightning: NER under low resources and class imbalance (Lightning + Hydra)."""
from importlib.metadata import PackageNotFoundError, version

from ner_lightning.resolvers import register_resolvers

try:
    __version__ = version("ner_lightning")
except PackageNotFoundError:  # run from a source tree that is not installed
    __version__ = "unknown"

register_resolvers()

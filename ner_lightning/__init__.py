"""ner_lightning: NER under low resources and class imbalance (Lightning + Hydra)."""
from ner_lightning.config import register_resolvers

register_resolvers()

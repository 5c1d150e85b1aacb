"""Lightning callbacks of our own, by role: ``monitoring`` (throughput, evaluation precision),
``checkpointing`` (when best and resume checkpoints reach the disk), ``schedules`` (a batch
budget, the MUNCHABLES paper's annealing, the :class:`ScheduleHorizon` contract) and
``multi_corpus`` (MUNCH-Stack's phases) and ``predictions`` (dev/test predictions in CoNLL form)."""

from ner_lightning.callbacks.checkpointing import BestCheckpoint, ResumeCheckpoint
from ner_lightning.callbacks.monitoring import EvalPrecision, TokenThroughput
from ner_lightning.callbacks.multi_corpus import AuxiliaryPhases
from ner_lightning.callbacks.predictions import PredictionWriter
from ner_lightning.callbacks.schedules import AnnealOnPlateau, BatchBudget, ScheduleHorizon

__all__ = [
    "AnnealOnPlateau",
    "AuxiliaryPhases",
    "BatchBudget",
    "BestCheckpoint",
    "EvalPrecision",
    "PredictionWriter",
    "ResumeCheckpoint",
    "ScheduleHorizon",
    "TokenThroughput",
]

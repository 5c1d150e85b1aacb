"""What every objective family shares: encoder, optimiser + schedule, span evaluation.

A family subclasses :class:`NERModule` and implements ``training_loss(batch)`` and
``decode(batch)`` (word-level label ids per example). Evaluation collects the word
predictions of every chunk, reassembles whole sentences and scores them with seqeval against
the full gold word sequences of the split.
"""
from __future__ import annotations

from typing import Callable

import pytorch_lightning as pl
import torch
from transformers import get_linear_schedule_with_warmup

from ner_lightning.data.corpus import OUTSIDE, LabelSet
from ner_lightning.metrics import flat_scores, span_scores
from ner_lightning.models.encoder import TransformerEncoder

SPLIT_OF_STAGE = {"val": "dev", "test": "test"}


class NERModule(pl.LightningModule):
    """Base LightningModule: AdamW-style optimiser with linear warm-up and decay."""

    def __init__(
        self,
        encoder: TransformerEncoder,
        label_set: LabelSet,
        optimizer: Callable[..., torch.optim.Optimizer],
        warmup_ratio: float,
    ):
        super().__init__()
        self.encoder = encoder
        self.label_set = label_set
        self.id2label = label_set.id2label
        self.optimizer_factory = optimizer
        self.warmup_ratio = warmup_ratio
        self.scores: dict[str, dict] = {}  # latest span scores per stage
        self.history: list[dict] = []  # dev scores of every validation epoch
        self._predictions: dict[str, list] = {"val": [], "test": []}
        self.train()  # from_pretrained leaves the encoder in eval mode (dropout off)

    # --- to implement per family ---------------------------------------------------------------
    def training_loss(self, batch: dict) -> torch.Tensor:
        raise NotImplementedError

    def decode(self, batch: dict) -> list[list[int]]:
        """Predicted label ids for the words of each example (``word_mask`` positions)."""
        raise NotImplementedError

    # --- shared helpers --------------------------------------------------------------------------
    def word_states(self, batch: dict) -> torch.Tensor:
        hidden = self.encoder(batch["input_ids"], batch["attention_mask"])
        return self.encoder.word_states(hidden, batch["word_starts"])

    @staticmethod
    def word_labels(batch: dict) -> torch.Tensor:
        """Gold label id per word ``(B, W)``; padding words are ``-100``."""
        labels = batch["labels"].gather(1, batch["word_starts"])
        return labels.masked_fill(~batch["word_mask"], -100)

    # --- Lightning hooks -------------------------------------------------------------------------
    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss = self.training_loss(batch)
        self.log("train/loss", loss, on_step=True, on_epoch=True, prog_bar=True,
                 batch_size=batch["input_ids"].size(0))
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._collect("val", batch)

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._collect("test", batch)

    def _collect(self, stage: str, batch: dict) -> None:
        preds = self.decode(batch)
        for si, off, p in zip(batch["sentence_index"].tolist(), batch["word_offset"].tolist(), preds):
            self._predictions[stage].append((si, off, p))

    def on_validation_epoch_end(self) -> None:
        self._score("val")

    def on_test_epoch_end(self) -> None:
        self._score("test")

    def _score(self, stage: str) -> None:
        collected, self._predictions[stage] = self._predictions[stage], []
        if self.trainer.sanity_checking:
            return
        gold = self.trainer.datamodule.gold_tags(SPLIT_OF_STAGE[stage])
        pred = [[OUTSIDE] * len(g) for g in gold]
        covered = 0
        for si, off, ids in collected:
            pred[si][off : off + len(ids)] = [self.id2label[i] for i in ids]
            covered += len(ids)
        if covered != sum(len(g) for g in gold):
            raise RuntimeError(f"{stage}: predicted {covered} words for {sum(map(len, gold))} gold words")
        scores = span_scores(gold, pred)
        self.scores[stage] = scores
        flat = flat_scores(scores, stage)
        if stage == "val":
            self.history.append({"epoch": self.current_epoch, "metrics": dict(flat), "scores": scores})
        self.log(f"{stage}/f1", flat.pop(f"{stage}/f1"), prog_bar=True)
        self.log_dict(flat)

    def optimizer_parameters(self) -> list[torch.nn.Parameter]:
        """What the optimiser updates (families with min-max variables exclude those)."""
        return [p for p in self.parameters() if p.requires_grad]

    def configure_optimizers(self):
        optimizer = self.optimizer_factory(params=self.optimizer_parameters())
        total = self.trainer.estimated_stepping_batches
        scheduler = get_linear_schedule_with_warmup(optimizer, int(self.warmup_ratio * total), total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

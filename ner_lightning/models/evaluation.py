"""Span evaluation, shared by every objective family (a mixin of ``NERModule``): the word
predictions of every chunk collected on the device, laid end to end as the split's words on the
device (``word_grid.placed_words``) and counted span by span against the split's gold spans,
indexed once (``span_counts.SplitCounter``: strict and lenient, seqeval's numbers), one host copy
of the counts an evaluation — in a multi-corpus run (``models/heads.py``), each auxiliary corpus's
test set with its own head too. The tags become strings only when a file is written
(``PredictedTags``). What the module provides is declared on :class:`SpanEvaluation`:
``decode(batch)``, ``_full_precision()``, ``id2label``."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager

import pytorch_lightning as pl
import torch
from lightning_fabric.utilities.apply_func import move_data_to_device

from ner_lightning.data.alignment import BatchLayout
from ner_lightning.data.contract import ModelData, require_datamodule
from ner_lightning.metrics import flat_scores
from ner_lightning.models.word_grid import host_entries, layout_of, placed_words, whole_sentences
from ner_lightning.span_counts import PlacedWords, PredictedTags, SplitCounter, TagCodes

SPLIT_OF_STAGE = {"val": "dev", "test": "test"}


def batches_limited(trainer: pl.Trainer, stage: str) -> bool:
    """Whether Lightning evaluated only some batches of the stage (``fast_dev_run``,
    ``limit_val_batches`` / ``limit_test_batches`` below 1.0)."""
    limit = trainer.limit_val_batches if stage == "val" else trainer.limit_test_batches
    # Lightning's connectors set Trainer.fast_dev_run at run time; the class does not declare it.
    return bool(trainer.fast_dev_run) or limit != 1.0  # type: ignore[attr-defined]


class SpanEvaluation(pl.LightningModule):
    """Lightning's validation and test hooks of a family: collect, reassemble, score, log."""

    # Provided by the module (``NERModule.__init__``):
    id2label: dict[int, str]
    train_batches: int

    def __init__(self) -> None:
        super().__init__()
        self.scores: dict[str, dict] = {}  # latest span scores per stage
        self.history: list[dict] = []  # dev scores of every validation epoch
        self.aux_scores: dict[str, dict] = {}  # test span scores of each auxiliary corpus (multi-corpus)
        self.predictions: dict[str, dict[str, PredictedTags]] = {}  # latest tags per stage and corpus
        self._predictions: dict[str, list] = {"val": [], "test": []}  # (decoded output, layout) per batch
        # per (split, corpus, device): the data module, its gold spans, the words' placement (placed_words)
        self._counters: dict[tuple[str, str, str], tuple[ModelData, SplitCounter, dict]] = {}

    def decode(self, batch: dict) -> torch.Tensor:
        """Predicted label ids ``(B, W)`` for the words of each example, on the device (values
        outside ``word_mask`` are ignored). Decoding never moves data to the host: evaluation
        collects every batch's output and moves them once per epoch."""
        raise NotImplementedError

    def _full_precision(self) -> AbstractContextManager:
        """Autocast off: heads, losses and decoding run in fp32."""
        return torch.autocast(self.device.type, enabled=False)

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._collect("val", batch)

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._collect("test", batch)

    def _collect(self, stage: str, batch: dict) -> None:
        """Keep the batch's decoded output on the device with its layout; nothing reaches the
        host before the epoch ends (:meth:`_host_entries`)."""
        with self._full_precision():
            self._predictions[stage].append((self.decode(batch), layout_of(batch)))

    def _host_entries(self, collected: list[tuple[torch.Tensor, BatchLayout]]) -> dict[int, list[tuple]]:
        """Per corpus index, the :meth:`entry` of every example the epoch decoded (one transfer)."""
        return host_entries(collected, self.entry)

    def entry(self, layout: BatchLayout, row: int, values: list) -> tuple:
        """What :meth:`predicted_tags` reassembles of one decoded example: ``(sentence index,
        word offset, label ids)``."""
        return layout.sentences[row], layout.offsets[row], values

    @torch.inference_mode()
    def tag(self, batches: Iterable[dict], lengths: list[int]) -> list[list[str]]:
        """IOB2 tags of whole sentences (main corpus) from their encoded batches, outside a
        Trainer (``ner_lightning.predict``); ``lengths``: words per sentence."""
        collected = []
        for batch in batches:
            batch = move_data_to_device(batch, self.device)
            with self._full_precision():
                collected.append((self.decode(batch), layout_of(batch)))
        return self.predicted_tags(self._host_entries(collected).get(0, []), lengths, "predict")

    def on_validation_epoch_end(self) -> None:
        self._score("val")

    def on_test_epoch_end(self) -> None:
        self._score("test")

    def _score(self, stage: str) -> None:
        batches, self._predictions[stage] = self._predictions[stage], []
        if self.trainer.sanity_checking:
            return
        dm = require_datamodule(self.trainer)
        self.predictions[stage] = {}
        corpora = {c for _, layout in batches for c in layout.corpora} | {0}
        for c in sorted(corpora):  # the main corpus; in a multi-corpus run, each auxiliary (test only)
            name = dm.corpus_names[c]
            # debug=fast, limit_val_batches: score the sentences evaluated
            scores = self.score_split(dm, stage, name, batches, self._batches_limited(stage))
            if c:
                self.aux_scores[name] = scores
                self.log(f"{stage}_aux/{name}/f1", scores["micro"]["f1"])
                continue
            flat = self.record_scores(stage, scores, self.current_epoch)
            self.log(f"{stage}/f1", flat.pop(f"{stage}/f1"), prog_bar=True)
            self.log_dict(flat)

    def score_split(self, dm: ModelData, stage: str, corpus: str, batches: list, limited: bool) -> dict:
        """One corpus's span scores of the stage's split from the epoch's decoded ``batches``
        (output, layout), its predictions kept in ``predictions``; ``limited``: only some batches
        ran, so only the sentences they covered whole count."""
        counter = self.split_counter(dm, SPLIT_OF_STAGE[stage], corpus)
        label = stage if corpus == dm.corpus_names[0] else f"{stage} {corpus}"
        placed = self.placed_tags(batches, counter, dm.corpus_names.index(corpus), label, limited)
        counts = counter.counts(placed.tags, placed.counted).cpu().numpy()  # the evaluation's one host copy
        self.predictions.setdefault(stage, {})[corpus] = PredictedTags(counter, placed.tags, placed.seen)
        return counter.scores(counts)

    def split_counter(self, dm: ModelData, split: str, corpus: str, device: torch.device | None = None) -> SplitCounter:
        """The gold spans of a corpus's split, indexed once on ``device`` (None: this module's; a
        lockstep group's is its stack's) — tag index = label id; a gold tag outside the label set,
        which no prediction can match, after them."""
        device = device or self.device
        key = (split, corpus, str(device))
        if key not in self._counters or self._counters[key][0] is not dm:
            id2label = self.id2label if corpus == dm.corpus_names[0] else self.id2label_of(corpus)
            labels = [id2label[i] for i in range(len(id2label))]
            gold = dm.gold_tags(split, corpus)
            extra = sorted({t for s in gold for t in s} - set(labels))
            self._counters[key] = (dm, SplitCounter(TagCodes(labels + extra), gold, device), {})
        return self._counters[key][1]

    def placed_tags(self, batches: list, counter: SplitCounter, corpus: int, stage: str, limited: bool) -> PlacedWords:
        """The decoded label ids of ``corpus``'s rows laid end to end in the split (a family whose
        :meth:`decode` gives something else than label ids overrides this)."""
        cache = next((c for _, known, c in self._counters.values() if known is counter), None)
        return placed_words(
            batches, counter.starts, counter.lengths, corpus, counter.codes.outside, stage, limited, cache
        )

    def record_scores(self, stage: str, scores: dict, epoch: int) -> dict[str, float]:
        """The main corpus's scores of the stage kept (a dev evaluation also in ``history``, at
        ``epoch``); their flat metrics."""
        self.scores[stage] = scores
        flat = flat_scores(scores, stage)
        if stage == "val":
            record = {"epoch": epoch, "batches": self.train_batches, "metrics": dict(flat), "scores": scores}
            self.history.append(record)
        return flat

    def _batches_limited(self, stage: str) -> bool:
        return batches_limited(self.trainer, stage)

    def id2label_of(self, corpus: str) -> dict[int, str]:
        """Label names of a corpus's head (only ``HeadModule`` families have auxiliary corpora)."""
        return self.id2label

    def predicted_tags(
        self, collected: list, lengths: list[int], stage: str, id2label: dict[int, str] | None = None
    ) -> list[list[str]]:
        """Whole-sentence IOB2 predictions from the ``(sentence, word offset, label ids)`` of every
        chunk (:meth:`entry`); ``lengths``: words per sentence, each predicted exactly
        once. ``id2label``: an auxiliary corpus's labels (default: the main corpus's)."""
        return whole_sentences(collected, lengths, id2label or self.id2label, stage)

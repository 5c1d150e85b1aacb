"""``LowResourceDataModule``: a paired low-resource training partition, full dev and test."""
from __future__ import annotations

import functools
from typing import Sequence

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Sampler

from ner_lightning.data.alignment import Feature, SubwordAligner, collate_features
from ner_lightning.data.corpus import Corpus, Sentence, digest
from ner_lightning.data.sampling import partition_rng, sample_partition


class LengthGroupedBatchSampler(Sampler[list[int]]):
    """Random batches of similar length (HF ``group_by_length``), reproducible from ``seed``.

    Each epoch shuffles all examples, sorts windows of ``window`` batches by length, cuts
    them into batches and shuffles the batch order.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int, window: int = 8):
        self.lengths = np.asarray(lengths)
        self.batch_size = batch_size
        self.window = window
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)

    def __iter__(self):
        perm = self.rng.permutation(len(self.lengths))
        span = self.batch_size * self.window
        batches = []
        for i in range(0, len(perm), span):
            chunk = perm[i : i + span]
            chunk = chunk[np.argsort(-self.lengths[chunk], kind="stable")]
            batches += [chunk[j : j + self.batch_size].tolist() for j in range(0, len(chunk), self.batch_size)]
        for k in self.rng.permutation(len(batches)):
            yield batches[k]


class LowResourceDataModule(pl.LightningDataModule):
    """Train on ``size`` sentences drawn by (dataset, size, partition, seed); dev and test full.

    Dev can be subsampled to ``dev_size`` sentences (low-resource realism). Evaluation batches
    are sorted by length (results unchanged, far less padding).
    """

    def __init__(
        self,
        corpus: Corpus,
        tokenizer,
        size: int | str | None,
        partition: int,
        seed: int,
        batch_size: int,
        eval_batch_size: int,
        max_length: int,
        dev_size: int | None,
        group_by_length: bool,
        num_workers: int,
    ):
        super().__init__()
        self.corpus = corpus
        self.tokenizer = tokenizer
        self.size, self.partition, self.seed = size, partition, seed
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        self.dev_size = dev_size
        self.group_by_length = group_by_length
        self.num_workers = num_workers
        self.label_set = corpus.label_set
        self.aligner = SubwordAligner(tokenizer, max_length)
        self.sentences: dict[str, list[Sentence]] = {}
        self.features: dict[str, list[Feature]] = {}

    # --- the sentences each split uses -------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        if self.sentences:
            return
        c = self.corpus
        self.sentences["train"] = sample_partition(c.train, self.size, self.partition, self.seed, c.name)
        self.sentences["dev"] = sample_partition(c.dev, self.dev_size, 0, self.seed, c.name, split="dev")
        self.sentences["test"] = c.test
        for split, sents in self.sentences.items():
            self.features[split] = self.aligner.encode(sents, self.label_set.label2id)

    @property
    def train_ids(self) -> list[str]:
        return [s.id for s in self.sentences["train"]]

    def partition_record(self) -> dict:
        """What identifies the training data of this run (written to results.json)."""
        ids = self.train_ids
        return {
            "dataset": self.corpus.name,
            "size": len(ids),
            "partition": self.partition,
            "seed": self.seed,
            "sentence_ids": ids,
            "sha256": digest(ids),
            "dev_sentences": len(self.sentences["dev"]),
            "dev_sha256": digest(s.id for s in self.sentences["dev"]),
            "test_sentences": len(self.sentences["test"]),
            "notes": self.corpus.notes,
        }

    def gold_tags(self, split: str) -> list[list[str]]:
        return [list(s.tags) for s in self.sentences[split]]

    # --- loaders ---------------------------------------------------------------------------
    def _collate(self):
        return functools.partial(collate_features, pad_token_id=self.tokenizer.pad_token_id)

    def train_dataloader(self) -> DataLoader:
        feats = self.features["train"]
        if self.group_by_length:
            sampler = LengthGroupedBatchSampler([len(f.input_ids) for f in feats], self.batch_size, self.seed)
            return DataLoader(feats, batch_sampler=sampler, collate_fn=self._collate(), num_workers=self.num_workers)
        gen = torch.Generator().manual_seed(int(partition_rng("train-order", self.seed).integers(2**62)))
        return DataLoader(
            feats, batch_size=self.batch_size, shuffle=True, generator=gen,
            collate_fn=self._collate(), num_workers=self.num_workers,
        )

    def _eval_loader(self, split: str) -> DataLoader:
        feats = sorted(self.features[split], key=lambda f: len(f.input_ids))
        return DataLoader(feats, batch_size=self.eval_batch_size, shuffle=False,
                          collate_fn=self._collate(), num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("dev")

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test")

"""``LowResourceDataModule``: a paired low-resource training partition, full dev and test."""

from __future__ import annotations

import functools
from collections import Counter

import pytorch_lightning as pl
import torch
from lightning_fabric.utilities.apply_func import move_data_to_device
from lightning_utilities.core.apply_func import apply_to_collection
from torch.utils.data import DataLoader

from ner_lightning.data.alignment import SPAN_TAGS, Feature, aligner_for, collate_features
from ner_lightning.data.augmentation import augment
from ner_lightning.data.batching import (
    EpochShuffleSampler,
    LengthGroupedBatchSampler,
    list_dataset,
    prebuilt_loader,
    shared_sorted_batches,
    sorted_batches,
)
from ner_lightning.data.corpus import Corpus, LabelSet, Sentence
from ner_lightning.data.regimes import (
    UNTYPED,
    balanced_undersample,
    imbalance_sample,
    project_entity_types,
    resample,
    training_set_stats,
    untyped,
)
from ner_lightning.data.sampling import check_partition, digest, partition_rng, sample_partition

MAIN = "main"  # the head / corpus key of the main corpus


class LowResourceDataModule(pl.LightningDataModule):
    """Train on ``size`` sentences drawn by (dataset, size, partition, seed); dev and test full.

    Regimes, applied in this order to the training set only (``ner_lightning.data.regimes``):
    partition or imbalance sample (``imbalance.entity_share``) -> entity-type projection
    (``entity_types``) and ``label_scheme=untyped`` (both also applied to dev and test) ->
    ``resample`` -> ``undersample`` -> ``augment``. Dev can be subsampled to ``dev_size`` sentences
    (low-resource realism), test to ``test_size`` (quick checks; reported results use the full test
    split);
    ``train_on_dev`` adds the dev sentences to the training set (a final-model protocol).
    Evaluation batches are sorted by length (results unchanged, far less padding), cut by
    ``eval_batch_size`` sentences or ``eval_batch_tokens`` padded sub-words.

    ``framing``: ``tagging`` = one encoder input per sentence (chunk); ``mrc`` = one per sentence
    (chunk) and entity type, ``[CLS] query [SEP] sentence [SEP]`` with the dataset's query for the
    type (``loss=mrc`` selects it). The sentences, partition and regimes are the same in both.

    What objectives and callbacks read of it: ``data.contract.ModelData``.
    """

    scheme = "singletask"

    def __init__(
        self,
        corpus: Corpus,
        tokenizer,
        size: int | str | None,
        partition: int,
        seed: int,
        shuffle_seed: int,
        batch_size: int,
        eval_batch_size: int,
        eval_batch_tokens: int | None,
        max_length: int,
        framing: str,
        dev_size: int | None,
        test_size: int | None,
        eval_size_at_most: bool,
        train_on_dev: bool,
        group_by_length: bool,
        length_window: int | None,
        num_workers: int,
        imbalance: dict,
        entity_types: list[str] | None,
        label_scheme: str,
        resample: str,
        resample_variant: str,
        undersample: float | None,
        augment: dict,
    ):
        """Every argument is set in ``conf/data/default.yaml`` (no hidden defaults here)."""
        super().__init__()
        check_partition(partition)  # every regime, not only the partition sampler
        self.corpus, self.tokenizer, self.shuffle_seed = corpus, tokenizer, shuffle_seed
        self.collate = functools.partial(collate_features, pad_token_id=tokenizer.pad_token_id)
        self.size, self.partition, self.seed = size, partition, seed
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        if eval_batch_tokens is not None and eval_batch_tokens < 1:
            raise ValueError(f"data.eval_batch_tokens={eval_batch_tokens}: give sub-word positions >= 1, or null")
        self.eval_batch_tokens = eval_batch_tokens
        self.dev_size, self.test_size, self.train_on_dev = dev_size, test_size, train_on_dev
        self.eval_size_at_most = eval_size_at_most
        self.group_by_length, self.length_window, self.num_workers = group_by_length, length_window, num_workers
        self.imbalance = dict(imbalance)
        self.entity_types = list(entity_types) if entity_types else None
        self.resample, self.resample_variant, self.undersample = resample, resample_variant, undersample
        self.augment, self.label_scheme = dict(augment), label_scheme
        self.label_set = self._label_set()
        self.framing = framing
        queries = [corpus.query(t) for t in self.label_set.entity_types] if framing == "mrc" else []
        self.aligner = aligner_for(framing, tokenizer, max_length, queries)
        self.sentences: dict[str, list[Sentence]] = {}
        self.features: dict[str, list[Feature]] = {}
        self._sorted: dict[str, list[dict]] = {}  # dev and test batches, sorted by length (setup)
        self._eval_batches: dict[str, list[dict]] = {}  # ... as evaluated (pinned on a GPU)

    def _label_set(self) -> LabelSet:
        """The corpus's labels, projected on ``entity_types`` and made untyped by ``label_scheme``."""
        corpus = self.corpus
        if self.label_scheme not in ("typed", "untyped"):
            raise ValueError(f"data.label_scheme must be typed or untyped, got {self.label_scheme!r}")
        label_set = LabelSet([UNTYPED]) if self.label_scheme == "untyped" else corpus.label_set
        if self.entity_types:
            unknown = set(self.entity_types) - set(corpus.label_set.entity_types)
            if unknown:
                raise ValueError(
                    f"data.entity_types: {sorted(unknown)} not in {corpus.name}'s types "
                    f"{list(corpus.label_set.entity_types)}"
                )
            if self.label_scheme == "typed":
                label_set = LabelSet([t for t in corpus.label_set.entity_types if t in self.entity_types])
        return label_set

    # --- the sentences each split uses -------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        if self.sentences:
            return
        c = self.corpus
        partition = self._select_partition()
        at_most = self.eval_size_at_most
        dev = sample_partition(c.dev, self.dev_size, 0, self.seed, c.name, "dev", "data.dev_size", at_most)
        test = sample_partition(c.test, self.test_size, 0, self.seed, c.name, "test", "data.test_size", at_most)
        if self.entity_types:
            partition, dev, test = (project_entity_types(x, self.entity_types) for x in (partition, dev, test))
        if self.label_scheme == "untyped":
            partition, dev, test = untyped(partition), untyped(dev), untyped(test)
        self.partition_sentences = partition
        train = partition + dev if self.train_on_dev else partition
        self.sentences = {"train": self._transform(train), "dev": dev, "test": test}
        for split, sents in self.sentences.items():
            self.features[split] = self.aligner.encode(sents, self.label_set)
        for split in ("dev", "test"):  # built here, before any evaluation: the test phase only runs the model
            self._sorted[split] = shared_sorted_batches(
                self.features[split], self.eval_batch_size, self.tokenizer.pad_token_id, self.eval_batch_tokens
            )

    def _select_partition(self) -> list[Sentence]:
        c = self.corpus
        share = self.imbalance["entity_share"]
        if share is None:
            return sample_partition(c.train, self.size, self.partition, self.seed, c.name)
        if not isinstance(self.size, int):
            raise ValueError("data.imbalance.entity_share needs an integer size")
        return imbalance_sample(
            c.train, self.size, float(share), float(self.imbalance["tolerance"]), self.partition, self.seed, c.name
        )

    def _transform(self, train: list[Sentence]) -> list[Sentence]:
        if self.resample != "none":
            train = resample(train, self.resample, self.resample_variant)
        if self.undersample:
            train = balanced_undersample(train, float(self.undersample))
        methods = list(self.augment["methods"] or [])
        if methods:
            rng = partition_rng(self.corpus.name, "augment", self.size, self.partition, self.seed)
            train = augment(train, methods, float(self.augment["rate"]), rng)
        if not train:
            raise ValueError("the training set is empty after data.undersample (no sentence has an entity)")
        return train

    def partition_record(self) -> dict:
        """What identifies the training data of this run (partition.json; stats in results.json).

        ``sentence_ids``/``sha256`` name the partition (before any regime); ``training_set``
        gives the sentences actually trained on, with multiplicities, and before/after stats.
        """
        ids = [s.id for s in self.partition_sentences]
        used = [s.id for s in self.sentences["train"]]
        counts = dict(Counter(used))
        return {
            "dataset": self.corpus.name,
            "size": len(ids),
            "partition": self.partition,
            "seed": self.seed,
            "sentence_ids": ids,
            "sha256": digest(ids),
            "training_set": {
                "regime": {
                    "imbalance": self.imbalance,
                    "entity_types": self.entity_types,
                    "label_scheme": self.label_scheme,
                    "train_on_dev": self.train_on_dev,
                    "resample": self.resample,
                    "resample_variant": self.resample_variant,
                    "undersample": self.undersample,
                    "augment": self.augment,
                },
                "before": training_set_stats(self.partition_sentences),
                "after": training_set_stats(self.sentences["train"]),
                "sha256": digest(used),
                "multiplicities": counts,
            },
            "dev_sentences": len(self.sentences["dev"]),
            "dev_sha256": digest(s.id for s in self.sentences["dev"]),
            "test_sentences": len(self.sentences["test"]),
            "test_sha256": digest(s.id for s in self.sentences["test"]),
            "notes": self.corpus.notes,
        }

    @property
    def corpus_names(self) -> list[str]:
        """Head / corpus key of each corpus index (one corpus here)."""
        return [MAIN]

    @property
    def aux_label_sets(self) -> dict[str, LabelSet]:
        """Label sets of the auxiliary corpora (none here; ``MultiCorpusDataModule`` has some)."""
        return {}

    def label_counts(self, corpus: str = MAIN) -> torch.Tensor:
        """Word-label counts of the training inputs actually trained on (after regimes): (K,)
        over the label set when tagging; over ``SPAN_TAGS`` (all types together) in MRC."""
        if corpus != MAIN:
            raise KeyError(f"no corpus {corpus!r} in a single-corpus data module")
        k = len(SPAN_TAGS) if self.framing == "mrc" else len(self.label_set)
        ids = [label for f in self.features["train"] for label in f.labels if label >= 0]
        return torch.bincount(torch.tensor(ids, dtype=torch.long), minlength=k)

    def sentences_of(self, split: str, corpus: str = MAIN) -> list[Sentence]:
        """The sentences of a split as evaluated (after entity-type projection and label scheme)."""
        if corpus != MAIN:
            raise KeyError(f"no corpus {corpus!r} in a single-corpus data module")
        return self.sentences[split]

    def gold_tags(self, split: str, corpus: str = MAIN) -> list[list[str]]:
        return [list(s.tags) for s in self.sentences_of(split, corpus)]

    # --- loaders ---------------------------------------------------------------------------
    def train_dataloader(self) -> DataLoader:
        feats = self.features["train"]
        data = list_dataset(feats)
        pin = self._on_gpu()  # page-locked batches: their copy to the GPU does not wait
        if self.group_by_length:
            sampler = LengthGroupedBatchSampler(
                [len(f.input_ids) for f in feats], self.batch_size, self.shuffle_seed, self.length_window
            )
            return DataLoader(
                data, batch_sampler=sampler, collate_fn=self.collate, num_workers=self.num_workers, pin_memory=pin
            )
        return DataLoader(
            data,
            batch_size=self.batch_size,
            sampler=EpochShuffleSampler(len(feats), self.shuffle_seed),
            collate_fn=self.collate,
            num_workers=self.num_workers,
            pin_memory=pin,
        )

    def sorted_batches(self, items: list, collate, length=lambda f: len(f.input_ids)) -> list[dict]:
        return sorted_batches(items, self.eval_batch_size, collate, length, self.eval_batch_tokens)

    def _eval_loader(self, split: str) -> DataLoader:
        """Batches sorted by length, padded once per split and reused by every evaluation."""
        if split not in self._eval_batches:
            self._eval_batches[split] = self._pinned(self._sorted[split])
        return prebuilt_loader(self._eval_batches[split])

    def _pinned(self, batches: list[dict]) -> list[dict]:
        """On a GPU, batches kept in page-locked memory, so that moving them to the device does not
        wait (Lightning copies with ``non_blocking``); elsewhere as they are."""
        if not self._on_gpu():
            return batches
        return [apply_to_collection(b, torch.Tensor, torch.Tensor.pin_memory) for b in batches]

    def _on_gpu(self) -> bool:
        """Whether the run's Trainer puts the model on a GPU."""
        trainer = self.trainer
        return trainer is not None and trainer.strategy.root_device.type == "cuda"

    def transfer_batch_to_device(self, batch: dict, device: torch.device, dataloader_idx: int) -> dict:
        """The batch's tensors (and packing plan) to ``device``; its :class:`BatchLayout` stays as it
        is — host data, whose tuples Lightning's generic walk would visit number by number (~1 ms a
        batch)."""
        return {key: value if key == "layout" else move_data_to_device(value, device) for key, value in batch.items()}

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("dev")

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test")

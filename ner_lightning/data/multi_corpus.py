"""``MultiCorpusDataModule``: a main corpus plus auxiliary corpora with their own label sets.

The main corpus is exactly what :class:`LowResourceDataModule` builds (partition, regimes,
dev, test — the same sentences as a single-corpus run of the same config). Each auxiliary
corpus (``aux=[bc2gm,linnaeus,...]``, names of ``conf/dataset`` files) keeps its own labels and
contributes a training sample of ``aux_size`` sentences, drawn from (aux dataset, aux_size,
partition, seed) — partition k of the main corpus is trained with sample k of each
auxiliary — and a test sample of ``aux_test_size`` sentences (null = the full test split),
scored with that corpus's head after training. Training batches follow ``scheme``
(``ner_lightning.data.schedules``); the auxiliaries' order is ``listed``, ``random`` (no two
of the same entity type consecutive, MUNCHABLES §4.1) or ``sorted`` (ascending SingleAux main
dev score read from ``aux_sort_from`` sweep folders, §5.1). The auxiliary corpora arrive
instantiated from their composed ``conf/dataset`` nodes (``aux_datasets``, ner_lightning/config.py).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Sampler

from ner_lightning.data.alignment import Feature, collate_features
from ner_lightning.data.batching import EpochForwarding, list_dataset, prebuilt_loader
from ner_lightning.data.corpus import Corpus, LabelSet, Sentence
from ner_lightning.data.datamodule import MAIN, LowResourceDataModule
from ner_lightning.data.sampling import digest, sample_partition
from ner_lightning.data.schedules import alternate_types, check_scheme, epoch_schedule

log = logging.getLogger(__name__)
ORDERS = ("listed", "random", "sorted")


class ScheduleSampler(Sampler[list[int]]):
    """Batches of global example indices following ``epoch_schedule`` (set_epoch by Lightning;
    the phase read from the data module when an epoch starts)."""

    def __init__(self, datamodule: MultiCorpusDataModule):
        self.dm, self.epoch = datamodule, 0
        self.sampler = EpochForwarding(self)  # so Lightning's set_epoch reaches us

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def batches(self) -> list[list[tuple[int, int]]]:
        dm = self.dm
        return epoch_schedule(dm.scheme, dm.train_sizes(), dm.batch_size, dm.shuffle_seed, self.epoch, dm.phase)

    def __len__(self) -> int:
        return len(self.batches())

    def __iter__(self):
        offsets = self.dm.train_offsets()
        for batch in self.batches():
            yield [offsets[c] + i for c, i in batch]


def collate_corpora(items: Sequence[tuple[int, Feature]], pad_token_id: int) -> dict[str, Any]:
    """``collate_features`` plus ``corpus``: the corpus index of each row (0 = main)."""
    batch = collate_features([f for _, f in items], pad_token_id=pad_token_id)
    batch["corpus"] = torch.tensor([c for c, _ in items])
    batch["layout"] = batch["layout"]._replace(corpora=tuple(c for c, _ in items))
    return batch


class MultiCorpusDataModule(LowResourceDataModule):
    """Main corpus (every ``LowResourceDataModule`` argument) + auxiliary corpora + a scheme."""

    def __init__(
        self,
        auxiliaries: dict[str, Corpus],
        aux_size: int | None,
        aux_test_size: int | None,
        scheme: str,
        aux_order: str,
        aux_sort_from: list[str] | None,
        **main,
    ):
        super().__init__(**main)
        names = list(auxiliaries)
        if self.framing != "tagging":
            raise ValueError(
                "multi-corpus schemes (multitask=...) need data.framing=tagging: one head per corpus "
                "over the shared word states (loss=ce, wce1, wce2, focal, dice, mom, crf, bilstm_crf)"
            )
        if self.group_by_length:
            raise ValueError(
                "data.group_by_length does not apply to multi-corpus schedules (multitask=...): the "
                "scheme decides each batch; set data.group_by_length=false"
            )
        check_scheme(scheme, len(names))
        if aux_order not in ORDERS:
            raise ValueError(f"multitask.aux_order must be one of {ORDERS}, got {aux_order!r}")
        if aux_order == "sorted" and not aux_sort_from:
            raise ValueError(
                "multitask.aux_order=sorted needs aux_sort_from=[<SingleAux sweep folder>, ...]: the auxiliaries "
                "are sorted by their SingleAux main-dev score (run multitask=singleaux first)"
            )
        self.auxiliaries = dict(auxiliaries)
        self.aux_size, self.aux_test_size = aux_size, aux_test_size
        self.scheme, self.aux_order, self.aux_sort_from = scheme, aux_order, list(aux_sort_from or [])
        self.aux_names: list[str] = names  # in training order after setup
        self.phase = 0  # MUNCH-Stack: index of the auxiliary in use (use_phase)
        self.aux_sentences: dict[str, dict[str, list[Sentence]]] = {}
        self.aux_features: dict[str, dict[str, list]] = {}

    @property
    def has_phases(self) -> bool:
        """MUNCH-Stack: training moves through the auxiliaries one phase each (:meth:`use_phase`)."""
        return self.scheme == "munch_stack"

    def use_phase(self, phase: int) -> None:
        """Train with auxiliary ``phase`` (in training order) from the next epoch on; the phases'
        callback (``callbacks.AuxiliaryPhases``) says when."""
        if not self.has_phases:
            raise ValueError(f"phase {phase}: multitask={self.scheme} has no phases (multitask=munch_stack has)")
        if not 0 <= phase < len(self.aux_names):
            raise ValueError(
                f"phase {phase}: MUNCH-Stack here has phases 0..{len(self.aux_names) - 1}, one per auxiliary"
            )
        self.phase = phase

    @property
    def aux_label_sets(self) -> dict[str, LabelSet]:
        """Each auxiliary's label set, in training order (a head per corpus: models.heads.HeadModule)."""
        return {n: self.auxiliaries[n].label_set for n in self.aux_names}

    @property
    def corpus_names(self) -> list[str]:
        """Head / corpus key of each corpus index: ``main``, then the auxiliaries in order."""
        return [MAIN, *self.aux_names]

    # --- sentences ---------------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        if self.aux_sentences:
            return
        super().setup(stage)
        self.aux_names = self._order(list(self.auxiliaries))
        for name in self.aux_names:
            c = self.auxiliaries[name]
            train = sample_partition(c.train, self.aux_size, self.partition, self.seed, c.name, key="aux_size")
            test = sample_partition(c.test, self.aux_test_size, 0, self.seed, c.name, split="test", key="aux_test_size")
            self.aux_sentences[name] = {"train": train, "test": test}
            self.aux_features[name] = {
                s: self.aligner.encode(x, c.label_set) for s, x in self.aux_sentences[name].items()
            }
        log.info(
            "%s: main %s (%d training inputs) + auxiliaries %s",
            self.scheme,
            self.corpus.name,
            len(self.features["train"]),
            ", ".join(f"{n} ({len(self.aux_features[n]['train'])})" for n in self.aux_names),
        )

    def _order(self, names: list[str]) -> list[str]:
        if self.aux_order == "listed" or len(names) < 2:
            return names
        if self.aux_order == "random":
            return alternate_types(names, {n: set(self.aux_label_sets[n].entity_types) for n in names}, self.seed)
        scores = singleaux_dev_scores(
            [Path(d) for d in self.aux_sort_from], self.corpus.name, self.size, self.partition, self.seed
        )
        missing = [n for n in names if n not in scores]
        if missing:
            raise ValueError(
                f"multitask.aux_order=sorted: no SingleAux result for auxiliaries {missing} (main "
                f"{self.corpus.name}, size {self.size}, partition {self.partition}, seed {self.seed}) "
                f"under {self.aux_sort_from}; run multitask=singleaux with aux=[{missing[0]}] there first"
            )
        order = sorted(names, key=lambda n: (scores[n], n))  # ascending: the most helpful auxiliary last
        log.info(
            "auxiliaries sorted by SingleAux main dev score: %s", " -> ".join(f"{n} ({scores[n]:.4f})" for n in order)
        )
        return order

    def train_sizes(self) -> list[int]:
        return [len(self.features["train"])] + [len(self.aux_features[n]["train"]) for n in self.aux_names]

    def train_offsets(self) -> list[int]:
        sizes = self.train_sizes()
        return [sum(sizes[:k]) for k in range(len(sizes))]

    def partition_record(self) -> dict:
        record = super().partition_record()
        record["multi_corpus"] = {
            "scheme": self.scheme,
            "aux_order": self.aux_order,
            "order": self.aux_names,
            "auxiliaries": {
                n: {
                    "train_sentences": len(s["train"]),
                    "train_sha256": digest(x.id for x in s["train"]),
                    "test_sentences": len(s["test"]),
                    "entity_types": list(self.aux_label_sets[n].entity_types),
                }
                for n, s in self.aux_sentences.items()
            },
        }
        return record

    def label_counts(self, corpus: str = MAIN) -> torch.Tensor:
        if corpus == MAIN:
            return super().label_counts()
        ids = [label for f in self.aux_features[corpus]["train"] for label in f.labels if label >= 0]
        return torch.bincount(torch.tensor(ids, dtype=torch.long), minlength=len(self.aux_label_sets[corpus]))

    def sentences_of(self, split: str, corpus: str = MAIN) -> list[Sentence]:
        if corpus == MAIN:
            return super().sentences_of(split)
        return self.aux_sentences[corpus][split]

    # --- loaders -----------------------------------------------------------------------------
    def train_dataloader(self) -> DataLoader:
        items = [(0, f) for f in self.features["train"]]
        for c, name in enumerate(self.aux_names, start=1):
            items += [(c, f) for f in self.aux_features[name]["train"]]
        return DataLoader(
            list_dataset(items),
            batch_sampler=ScheduleSampler(self),
            num_workers=self.num_workers,
            collate_fn=functools.partial(collate_corpora, pad_token_id=self.tokenizer.pad_token_id),
        )

    def test_dataloader(self) -> DataLoader:
        """Main test batches, then each auxiliary's (``corpus`` marks the head that decodes them)."""
        if "test+aux" not in self._eval_batches:
            batches = list(self._eval_loader("test"))
            collate = functools.partial(collate_corpora, pad_token_id=self.tokenizer.pad_token_id)
            for c, name in enumerate(self.aux_names, start=1):
                batches += self._pinned(
                    self.sorted_batches(
                        [(c, f) for f in self.aux_features[name]["test"]],
                        collate,
                        length=lambda item: len(item[1].input_ids),
                    )
                )
            self._eval_batches["test+aux"] = batches
        return prebuilt_loader(self._eval_batches["test+aux"])


def singleaux_dev_scores(dirs: list[Path], dataset: str, size, partition: int, seed: int) -> dict[str, float]:
    """Best main-dev monitor value of each SingleAux run (one auxiliary) of this main corpus, size,
    partition and seed found under ``dirs`` (``results.json`` of one-auxiliary cells, or the
    ``candidate.json`` files of SingleAux cells that chose among several)."""
    scores: dict[str, float] = {}
    for d in dirs:
        if not d.is_dir():
            raise FileNotFoundError(f"aux_sort_from: {d} is not a folder (a SingleAux sweep folder)")
        for path in sorted([*d.rglob("results.json"), *d.rglob("candidate.json")]):
            run = json.loads(path.read_text())
            cfg = run.get("config", {})
            scheme, auxiliaries = _scheme_and_auxiliaries(cfg)
            if (
                scheme != "singleaux"
                or len(auxiliaries) != 1
                or cfg.get("dataset", {}).get("name") != dataset
                or str(cfg.get("size")) != str(size)
                or cfg.get("partition") != partition
                or cfg.get("seed") != seed
            ):
                continue
            scores[auxiliaries[0]] = run["dev_monitor"]
    return scores


def _scheme_and_auxiliaries(cfg: dict) -> tuple[str | None, list[str]]:
    """A run's multi-corpus scheme and auxiliary names from its resolved config (``multitask``;
    runs made before the scheme had its own group kept both under ``data``)."""
    multitask = cfg.get("multitask") or {}
    if "scheme" in multitask:
        return multitask["scheme"], list((multitask.get("datamodule") or {}).get("auxiliaries") or {})
    data = cfg.get("data", {})
    return data.get("scheme"), list(data.get("auxiliaries") or [])

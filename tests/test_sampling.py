import pytest
from hydra.utils import instantiate

from ner_lightning.data.corpus import Sentence
from ner_lightning.data.sampling import sample_partition

POOL = [Sentence(f"train:{i}", ("w",), ("O",)) for i in range(100)]


def ids(sents):
    return [s.id for s in sents]


def test_partition_is_deterministic_and_depends_on_every_key():
    base = ids(sample_partition(POOL, 20, partition=0, seed=1, dataset="d"))
    assert base == ids(sample_partition(POOL, 20, partition=0, seed=1, dataset="d"))
    assert len(base) == len(set(base)) == 20
    assert base == sorted(base, key=lambda x: int(x.split(":")[1]))  # file order kept
    for other in [dict(partition=1, seed=1, dataset="d"), dict(partition=0, seed=2, dataset="d"),
                  dict(partition=0, seed=1, dataset="e")]:
        assert ids(sample_partition(POOL, 20, **other)) != base


def test_full_and_bad_sizes():
    assert len(sample_partition(POOL, "full", 0, 1, "d")) == 100
    assert len(sample_partition(POOL, None, 0, 1, "d")) == 100
    with pytest.raises(ValueError, match="size=101 is larger than d/train, which has 100 sentences"):
        sample_partition(POOL, 101, 0, 1, "d")
    with pytest.raises(ValueError, match="positive integer"):
        sample_partition(POOL, 0, 0, 1, "d")
    with pytest.raises(ValueError, match="partition=-1: must be a non-negative integer"):
        sample_partition(POOL, 10, -1, 1, "d")


def test_too_large_dev_size_names_its_key(toy_cfg):
    cfg = toy_cfg("data.dev_size=50")
    encoder = instantiate(cfg.model)
    dm = instantiate(cfg.data, tokenizer=encoder.tokenizer)
    with pytest.raises(ValueError, match=r"data.dev_size=50 is larger than toy/dev, which has 4 sentences; "
                                         r"choose data.dev_size<=4 or data.dev_size=null"):
        dm.setup("fit")


def test_negative_partition_is_rejected(toy_cfg):
    cfg = toy_cfg("partition=-2")
    encoder = instantiate(cfg.model)
    with pytest.raises(Exception, match="partition=-2: must be a non-negative integer"):  # via instantiate
        instantiate(cfg.data, tokenizer=encoder.tokenizer)


def test_partition_independent_of_loss_encoder_and_batching(toy_cfg):
    """Same (dataset, size, partition, seed) => same sentences, whatever else changes."""
    def train_ids(*overrides):
        cfg = toy_cfg(*overrides)
        encoder = instantiate(cfg.model)
        dm = instantiate(cfg.data, tokenizer=encoder.tokenizer)
        dm.setup("fit")
        return dm.partition_record()

    a = train_ids("size=10")
    b = train_ids("size=10", "model=minilm", "data.batch_size=3", "optimizer.lr=1e-3",
                  "data.group_by_length=true", "trainer.max_epochs=7")
    c = train_ids("size=10", "partition=1")
    assert a["sentence_ids"] == b["sentence_ids"] and a["sha256"] == b["sha256"]
    assert a["sentence_ids"] != c["sentence_ids"]
    assert len(a["sentence_ids"]) == 10


@pytest.mark.parametrize("regime", [
    ["data.resample=sCR"], ["data.resample=nsCRD", "data.resample_variant=released"], ["data.undersample=3"],
    ["data.augment.methods=[lwtr,mr,sis]"], ["data.entity_types=[PER]", "data.resample=sC"],
    ["data.imbalance.entity_share=0.3", "data.imbalance.tolerance=0.1"],
])
def test_regime_training_set_independent_of_loss_and_encoder(toy_cfg, regime):
    def record(*overrides):
        cfg = toy_cfg("size=12", *regime, *overrides)
        encoder = instantiate(cfg.model)
        dm = instantiate(cfg.data, tokenizer=encoder.tokenizer)
        dm.setup("fit")
        return dm, dm.partition_record()

    dm, a = record()
    _, b = record("model=minilm", "optimizer.lr=1e-3", "data.batch_size=2")
    assert a["training_set"]["sha256"] == b["training_set"]["sha256"]
    assert a["training_set"]["multiplicities"] == b["training_set"]["multiplicities"]
    assert sum(a["training_set"]["multiplicities"].values()) == a["training_set"]["after"]["sentences"]
    assert a["training_set"]["before"]["sentences"] == 12
    if "data.entity_types=[PER]" in regime:
        assert dm.label_set.labels == ["O", "B-PER", "I-PER"]
        assert set(a["training_set"]["after"]["type_tokens"]) <= {"PER"}
        assert all(t in ("O", "B-PER", "I-PER") for s in dm.sentences["test"] for t in s.tags)


def test_unknown_projection_type_is_an_error(toy_cfg):
    cfg = toy_cfg("data.entity_types=[GPE]")
    encoder = instantiate(cfg.model)
    with pytest.raises(Exception, match=r"data.entity_types: \[.GPE.\] not in toy"):
        instantiate(cfg.data, tokenizer=encoder.tokenizer)


def _padded(batches, lengths):
    return sum(len(b) * max(lengths[i] for i in b) for b in batches)


def test_length_grouped_batches_cover_each_example_once_per_epoch_reproducibly():
    import random

    from ner_lightning.data.batching import LengthGroupedBatchSampler

    lengths = [random.Random(i).randint(3, 60) for i in range(203)]
    s = LengthGroupedBatchSampler(lengths, batch_size=8, seed=5)
    epoch0 = list(s)
    assert sorted(i for b in epoch0 for i in b) == list(range(203)) and len(epoch0) == len(s) == 26
    assert list(LengthGroupedBatchSampler(lengths, batch_size=8, seed=5)) == epoch0  # same (seed, epoch)
    s.set_epoch(1)
    assert sorted(i for b in s for i in b) == list(range(203)) and list(s) != epoch0
    assert max(lengths[i] for i in epoch0[0]) == max(lengths)  # the longest batch first


@pytest.mark.parametrize("n, window", [(50, 1), (100, 3), (400, 12), (100_000, 50)])
def test_length_window_follows_hugging_faces_rule(n, window):
    from ner_lightning.data.batching import LengthGroupedBatchSampler

    assert LengthGroupedBatchSampler([5] * n, batch_size=8, seed=0).window == window
    assert LengthGroupedBatchSampler([5] * n, batch_size=8, seed=0, window=2).window == 2


def test_length_grouping_sorts_within_windows_and_cuts_padding():
    """One window over everything = batches of consecutive lengths (least padding); the default
    window of a 400-example set pads far less than random batches, and window 1 sorts nothing."""
    import random

    from ner_lightning.data.batching import EpochShuffleSampler, LengthGroupedBatchSampler

    rng = random.Random(0)
    lengths = [rng.randint(3, 80) for _ in range(400)]
    whole = LengthGroupedBatchSampler(lengths, batch_size=8, seed=1, window=50)
    ideal = sorted(lengths, reverse=True)
    assert _padded(list(whole), lengths) == sum(8 * ideal[i] for i in range(0, 400, 8))
    order = list(EpochShuffleSampler(400, seed=1))
    random_batches = [order[i : i + 8] for i in range(0, 400, 8)]
    grouped = list(LengthGroupedBatchSampler(lengths, batch_size=8, seed=1))
    assert _padded(grouped, lengths) < 0.8 * _padded(random_batches, lengths)
    single = list(LengthGroupedBatchSampler(lengths, batch_size=8, seed=1, window=1))
    assert _padded(single, lengths) > 0.9 * _padded(random_batches, lengths)


@pytest.mark.parametrize("grouped", [False, True])
def test_every_epoch_of_a_real_fit_gets_new_batches(toy_cfg, monkeypatch, grouped):
    """Lightning sets the epoch on ``sampler`` / ``batch_sampler.sampler`` only: the length-grouped
    batch sampler must receive it too (earlier versions did not, so every epoch of a
    ``data.group_by_length=true`` run trained on epoch 0's batches in epoch 0's order)."""
    from ner_lightning.models.token_classification import TokenClassificationModule
    from tests.helpers import train

    seen, real = {}, TokenClassificationModule.training_loss

    def record(self, batch):
        seen.setdefault(self.current_epoch, []).append(tuple(batch["sentence_index"].tolist()))
        return real(self, batch)

    monkeypatch.setattr(TokenClassificationModule, "training_loss", record)
    train(toy_cfg("size=16", "data.batch_size=4", f"data.group_by_length={str(grouped).lower()}",
                  "trainer.max_epochs=3", "trainer.min_epochs=3"))
    assert len(seen) == 3 and len({tuple(v) for v in seen.values()}) == 3
    for batches in seen.values():
        assert sorted(i for b in batches for i in b) == list(range(16))

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

"""Data regimes against hand-computed values (resampling paper section 3.2, Akkasi et al., Dai & Adel)."""
from itertools import combinations

import numpy as np
import pytest

from ner_lightning.data.corpus import Sentence
from ner_lightning.data.augmentation import augment
from ner_lightning.data.regimes import (
    balanced_undersample, imbalance_sample, project_entity_types, resample,
    resampling_counts, share_bounds, training_set_stats,
)


def sent(i, pairs):
    return Sentence(f"train:{i}", tuple(p[0] for p in pairs), tuple(p[1] for p in pairs))


# N = 17 tokens; PER 4 tokens, LOC 3 tokens.
HAND = [
    sent(0, [("Ann", "B-PER"), ("Lee", "I-PER"), ("met", "O"), ("Bo", "B-PER")]),          # c(PER)=3, l=4
    sent(1, [("Oslo", "B-LOC"), ("is", "O"), ("cold", "O")]),                                # c(LOC)=1, l=3
    sent(2, [("it", "O"), ("rains", "O"), ("a", "O"), ("lot", "O"), ("here", "O")]),         # l=5
    sent(3, [("Visit", "O"), ("New", "B-LOC"), ("York", "I-LOC"), ("with", "O"), ("Ann", "B-PER")]),  # LOC 2, PER 1, l=5
]

# Worked by hand. Paper variant: r_PER = ln(17/4) = 1.446919, r_LOC = ln(17/3) = 1.734601.
#  sCR   s0: 1+ceil(sqrt(3 r_PER = 4.3408)) = 4; s1: 1+ceil(sqrt(1.7346)) = 3; s3: 1+ceil(sqrt(4.9161)) = 4
#  sCRD  s0: 1+ceil(4.3408/2) = 4; s1: 1+ceil(1.7346/1.7321 = 1.0015) = 3; s3: 1+ceil(4.9161/2.2361) = 4
#  nsCRD s0: 1+ceil(r_PER*1.7321/2 = 1.2531) = 3; s1: 3; s3: 1+ceil((2.4531+1.4469)/2.2361 = 1.7442) = 3
# Released variant: w_PER = log2(17/4) = 2.087463, w_LOC = log2(17/3) = 2.502500, entity-free -> 1.
#  sCR   s0: ceil(sqrt(1+6.2624)) = 3; s1: ceil(sqrt(3.5025)) = 2; s3: ceil(sqrt(8.0925)) = 3
#  sCRD  s0: ceil(7.2624/2) = 4; s1: ceil(3.5025/1.7321) = 3; s3: ceil(8.0925/2.2361) = 4
#  nsCRD s0: ceil((1+3.6156)/2) = 3; s1: ceil(3.5025/1.7321) = 3; s3: ceil((1+3.5391+2.0875)/2.2361) = 3
EXPECTED = {
    ("sC", "paper"): [4, 2, 1, 4],
    ("sCR", "paper"): [4, 3, 1, 4],
    ("sCRD", "paper"): [4, 3, 1, 4],
    ("nsCRD", "paper"): [3, 3, 1, 3],
    ("sC", "released"): [4, 2, 1, 4],
    ("sCR", "released"): [3, 2, 1, 3],
    ("sCRD", "released"): [4, 3, 1, 4],
    ("nsCRD", "released"): [3, 3, 1, 3],
}


@pytest.mark.parametrize("method, variant", sorted(EXPECTED))
def test_resampling_counts_hand_computed(method, variant):
    assert resampling_counts(HAND, method, variant) == EXPECTED[(method, variant)]


def test_resample_repeats_sentences_and_rejects_unknown():
    out = resample(HAND, "nsCRD")
    assert [s.id for s in out].count("train:0") == 3 and len(out) == 10
    with pytest.raises(ValueError, match="data.resample must be one of"):
        resampling_counts(HAND, "sX")


def test_training_set_stats():
    st = training_set_stats(HAND)
    assert st["tokens"] == 17 and st["sentences"] == 4 and st["sentences_with_entities"] == 3
    assert st["type_tokens"] == {"LOC": 3, "PER": 4}
    assert st["entity_token_share"] == pytest.approx(7 / 17)
    assert st["bio_shares"]["B"] == pytest.approx(5 / 17) and st["bio_shares"]["I"] == pytest.approx(2 / 17)


def test_balanced_undersampling_hand_worked():
    s = sent(7, [("a", "O"), ("b", "O"), ("c", "O"), ("D", "B-X"), ("E", "I-X"), ("f", "O"), ("g", "O"),
                 ("h", "O"), ("i", "O"), ("J", "B-Y"), ("k", "O")])
    (u,) = balanced_undersample([s, HAND[2]], ratio=3)  # the entity-free sentence is dropped
    # 3 entity tokens -> budget 9: round 1 adds c, f (around D E) and i, k (around J);
    # round 2 adds b (left of D E), g (right) -> 9 kept.
    assert u.tokens == ("b", "c", "D", "E", "f", "g", "i", "J", "k")
    assert u.tags == ("O", "O", "B-X", "I-X", "O", "O", "O", "B-Y", "O")
    assert u.id == "train:7#u"
    (whole,) = balanced_undersample([HAND[1]], ratio=3)  # budget 3 = the whole sentence
    assert whole.tokens == HAND[1].tokens


def test_projection_keeps_listed_types_only():
    (p,) = project_entity_types([HAND[3]], ["LOC"])
    assert p.tags == ("O", "B-LOC", "I-LOC", "O", "O") and p.tokens == HAND[3].tokens


def _valid_iob2(tags):
    prev = "O"
    for t in tags:
        if t.startswith("I-") and prev[2:] != t[2:]:
            return False
        prev = t
    return True


@pytest.mark.parametrize("method", ["lwtr", "mr", "sis"])
def test_augmentation_draws_only_from_training_partition(method):
    rng = np.random.default_rng(0)
    out = augment(HAND, [method], rate=1.0, rng=rng)
    originals, copies = out[:4], out[4:]
    assert originals == HAND and [c.id for c in copies] == [f"train:{i}#a" for i in range(4)]
    train_tokens_by_label = {}
    for s in HAND:
        for tok, tag in zip(s.tokens, s.tags):
            train_tokens_by_label.setdefault(tag, set()).add(tok)
    mentions = {("PER", ("Ann", "Lee")), ("PER", ("Bo",)), ("LOC", ("Oslo",)), ("LOC", ("New", "York")),
                ("PER", ("Ann",))}
    for orig, c in zip(HAND, copies):
        assert len(c.tokens) == len(c.tags) and _valid_iob2(c.tags)
        if method == "lwtr":
            assert c.tags == orig.tags
            assert all(tok in train_tokens_by_label[tag] for tok, tag in zip(c.tokens, c.tags))
        elif method == "sis":
            assert c.tags == orig.tags and sorted(c.tokens) == sorted(orig.tokens)
        else:
            spans = [(i, j) for i in range(len(c.tags)) for j in range(i + 1, len(c.tags) + 1)
                     if c.tags[i].startswith("B-") and all(t == "I-" + c.tags[i][2:] for t in c.tags[i + 1:j])
                     and (j == len(c.tags) or not c.tags[j].startswith("I-"))]
            for i, j in spans:
                assert (c.tags[i][2:], c.tokens[i:j]) in mentions
            assert [t for t in c.tokens if t in {"met", "is", "cold", "Visit", "with"}] == \
                   [t for t in orig.tokens if t in {"met", "is", "cold", "Visit", "with"}]


def test_augmentation_is_reproducible_and_rate_zero_copies():
    a = augment(HAND, ["lwtr", "mr", "sis"], 0.3, np.random.default_rng(5))
    b = augment(HAND, ["lwtr", "mr", "sis"], 0.3, np.random.default_rng(5))
    assert a == b
    zero = augment(HAND, ["lwtr", "mr", "sis"], 0.0, np.random.default_rng(5))
    assert [(s.tokens, s.tags) for s in zero[4:]] == [(s.tokens, s.tags) for s in HAND]
    with pytest.raises(ValueError, match="unknown"):
        augment(HAND, ["synonym"], 0.3, np.random.default_rng(0))


def _pool():
    rng = np.random.default_rng(3)
    pool = []
    for i in range(9):
        n = int(rng.integers(3, 8))
        e = int(rng.integers(0, n + 1))
        pool.append(sent(i, [(f"w{k}", "B-X" if k < e else "O") for k in range(n)]))
    return pool


def test_share_bounds_match_brute_force():
    pool = _pool()
    for size in (2, 4, 7):
        shares = [sum(p.tags.count("B-X") for p in c) / sum(len(p) for p in c) for c in combinations(pool, size)]
        lo, hi = share_bounds(pool, size)
        assert lo == pytest.approx(min(shares), abs=1e-9) and hi == pytest.approx(max(shares), abs=1e-9)


def test_imbalance_infeasible_target_names_reachable_range():
    pool = _pool()
    lo, hi = share_bounds(pool, 7)
    with pytest.raises(ValueError, match=rf"reachable shares are {lo:.2%} to {hi:.2%}"):
        imbalance_sample(pool, 7, min(0.99, hi + 0.1), 0.01, 0, 1, "toy")


@pytest.mark.parametrize("dataset", ["conll2003", "ncbi_disease", "linnaeus"])
def test_imbalance_generator_hits_targets_on_real_data(dataset, requires_real_data, tmp_path):
    from hydra.utils import instantiate

    from tests.conftest import compose_config

    corpus = instantiate(compose_config([f"dataset={dataset}", f"paths.data_dir={requires_real_data}"], tmp_path).dataset)
    for p in (0.01, 0.02, 0.05, 0.10, 0.20):
        sample = imbalance_sample(corpus.train, 100, p, 0.05, partition=0, seed=42, dataset=dataset)
        share = training_set_stats(sample)["entity_token_share"]
        assert len(sample) == len({s.id for s in sample}) == 100
        assert abs(share - p) <= 0.05 * p, (dataset, p, share)
        again = imbalance_sample(corpus.train, 100, p, 0.05, partition=0, seed=42, dataset=dataset)
        assert [s.id for s in again] == [s.id for s in sample]
    other = imbalance_sample(corpus.train, 100, 0.05, 0.05, partition=1, seed=42, dataset=dataset)
    assert [s.id for s in other] != [s.id for s in sample]

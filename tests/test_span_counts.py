"""Span counts as tensor operations (``ner_lightning.span_counts``) equal the reference scorer
(``metrics.span_scores``, itself checked against seqeval) and seqeval itself, on random tag sets."""

import random

import numpy as np
import pytest
import torch

from ner_lightning.metrics import span_scores
from ner_lightning.span_counts import SplitCounter, TagCodes

TYPED = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-MISC", "I-MISC"]
UNTYPED = ["O", "B", "I"]


def _split(rng: random.Random, tags: list[str]) -> list[list[str]]:
    """Sentences of random tags: empty ones, stray I- starts, type switches inside spans."""
    weights = [6] + [1] * (len(tags) - 1)  # mostly O, as in a real corpus
    return [rng.choices(tags, weights, k=rng.choice([0, 1, 2, 5, 9, 14])) for _ in range(rng.randint(1, 12))]


def _noisy(rng: random.Random, gold: list[list[str]], tags: list[str], p: float) -> list[list[str]]:
    return [[rng.choice(tags) if rng.random() < p else t for t in s] for s in gold]


@pytest.mark.parametrize("tags", [TYPED, UNTYPED], ids=["typed", "untyped"])
def test_counts_equal_span_scores_on_5000_random_sentence_sets(tags):
    """250 gold splits, each with 20 predictions scored stacked (one call): 5,000 sets a label set."""
    rng = random.Random(7)
    codes = TagCodes(tags)
    checked = 0
    for _ in range(250):
        gold = _split(rng, tags)
        preds = [_noisy(rng, gold, tags, p) for p in np.linspace(0.0, 1.0, 20)]
        counter = SplitCounter(codes, gold)
        encoded = [codes.encode(p) for p in preds]
        stacked = torch.stack(encoded) if counter.words else torch.zeros(20, 0, dtype=torch.long)
        counts = counter.counts(stacked).numpy()
        for pred, row in zip(preds, counts, strict=True):
            assert counter.scores(row) == span_scores(gold, pred)
            checked += 1
    assert checked == 5000


def test_counts_equal_seqeval_on_random_sentence_sets():
    """seqeval itself, both modes (strict IOB2 and its default), typed and untyped tags."""
    from seqeval.metrics import classification_report
    from seqeval.scheme import IOB2

    rng = random.Random(11)
    for trial in range(300):
        tags = TYPED if trial % 3 else UNTYPED
        gold = _split(rng, tags)
        pred = _noisy(rng, gold, tags, rng.random())
        if not any(t != "O" for s in gold + pred for t in s):
            continue
        codes = TagCodes(tags)
        counter = SplitCounter(codes, gold)
        ours = counter.scores(counter.counts(codes.encode(pred)).numpy())
        for got, kwargs in ((ours, {"mode": "strict", "scheme": IOB2}), (ours["lenient"], {})):
            ref = classification_report(gold, pred, output_dict=True, zero_division=0, **kwargs)
            if kwargs and not [k for k in ref if not k.endswith(" avg")]:
                assert got["micro"]["f1"] == 0.0  # only stray I- tags: no strict span on either side
                continue
            assert got["micro"]["f1"] == ref["micro avg"]["f1-score"]
            assert got["micro"]["precision"] == ref["micro avg"]["precision"]
            assert got["macro"]["f1"] == ref["macro avg"]["f1-score"]
            # seqeval names the type of untyped tags (B, I) "_"; ours: ""
            assert {t or "_": v["f1"] for t, v in got["per_type"].items()} == {
                t: v["f1-score"] for t, v in ref.items() if not t.endswith(" avg")
            }


def test_hand_worked_spans_and_sentence_boundaries():
    """A span never runs across sentences: ``I-PER`` opening the second sentence is stray (strict)
    or a span of its own (lenient)."""
    codes = TagCodes(TYPED)
    gold = [["B-PER", "I-PER"], ["I-PER", "O", "B-LOC"]]
    counter = SplitCounter(codes, gold)
    pred = codes.encode([["B-PER", "I-PER"], ["I-PER", "O", "O"]])
    strict, lenient = counter.counts(pred).numpy()
    per, loc = codes.types.index("PER"), codes.types.index("LOC")
    assert strict[:, per].tolist() == [1, 1, 1] and strict[:, loc].tolist() == [0, 0, 1]
    assert lenient[:, per].tolist() == [2, 2, 2]


def test_only_counted_sentences_count_and_tags_come_back():
    codes = TagCodes(TYPED)
    gold = [["B-PER"], ["B-LOC", "I-LOC"]]
    counter = SplitCounter(codes, gold)
    pred = codes.encode([["O"], ["B-LOC", "I-LOC"]])
    counted = torch.tensor([False, True, True])
    scores = counter.scores(counter.counts(pred, counted).numpy())
    assert scores["micro"]["f1"] == 1.0 and scores["per_type"].keys() == {"LOC"}
    assert counter.tags(pred.numpy()) == [["O"], ["B-LOC", "I-LOC"]]
    assert counter.tags(pred.numpy(), [1]) == [["B-LOC", "I-LOC"]]


def test_a_tag_outside_the_label_set_is_named():
    with pytest.raises(ValueError, match="E-PER"):
        TagCodes(["O", "E-PER"])
    with pytest.raises(ValueError, match="B-DATE"):
        TagCodes(TYPED).encode([["B-DATE"]])

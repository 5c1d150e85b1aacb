import pytest

from ner_lightning.metrics import flat_scores, span_scores


def test_strict_span_scores_hand_worked():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O", "B-PER"]]
    pred = [["B-PER", "I-PER", "O", "O"],      # PER right, LOC missed
            ["I-ORG", "O", "B-LOC"]]           # I-ORG without B: not a span in strict mode; PER->LOC wrong
    s = span_scores(gold, pred)
    # gold spans: PER x2, LOC, ORG (4); predicted spans: PER, LOC (2); correct: 1
    assert s["micro"]["precision"] == pytest.approx(1 / 2)
    assert s["micro"]["recall"] == pytest.approx(1 / 4)
    assert s["micro"]["f1"] == pytest.approx(2 * 0.5 * 0.25 / 0.75)
    per = s["per_type"]
    assert per["PER"] == pytest.approx({"precision": 1.0, "recall": 0.5, "f1": 2 / 3, "support": 2})
    assert per["LOC"]["f1"] == 0.0 and per["ORG"]["f1"] == 0.0
    assert s["macro"]["f1"] == pytest.approx((2 / 3 + 0 + 0) / 3)


def test_boundary_errors_count_as_wrong():
    gold = [["B-LOC", "I-LOC", "I-LOC"]]
    assert span_scores(gold, [["B-LOC", "I-LOC", "O"]])["micro"]["f1"] == 0.0
    assert span_scores(gold, gold)["micro"]["f1"] == 1.0


def test_flat_names_and_misaligned_input():
    s = span_scores([["B-PER"]], [["B-PER"]])
    flat = flat_scores(s, "val")
    assert flat["val/f1"] == 1.0 and flat["val/f1_macro"] == 1.0 and flat["val/f1_PER"] == 1.0
    with pytest.raises(ValueError):
        span_scores([["O", "O"]], [["O"]])


def test_lenient_mode_counts_spans_that_start_with_i():
    """seqeval's default (conlleval) mode, the one the AUC-2T and OVA-AUC papers cite: an I-X
    after O opens a span; strict IOB2 drops it (Algorithm 1 emits that when the begin head misses)."""
    gold = [["B-ENT", "I-ENT", "O", "B-ENT"]]
    pred = [["I-ENT", "I-ENT", "O", "B-ENT"]]
    s = span_scores(gold, pred)
    assert s["micro"]["precision"] == 1.0 and s["micro"]["recall"] == pytest.approx(1 / 2)  # strict: 1 of 2 found
    assert s["lenient"]["micro"]["f1"] == 1.0 and s["lenient"]["macro"]["f1"] == 1.0
    flat = flat_scores(s, "test")
    assert flat["test/f1"] == pytest.approx(2 / 3) and flat["test/f1_lenient"] == 1.0
    assert flat["test/recall_lenient"] == 1.0 and flat["test/f1_macro_lenient"] == 1.0


def _seqeval_report(gold, pred, mode):
    """The reference: seqeval's own classification_report, reduced to our keys."""
    from seqeval.metrics import classification_report
    from seqeval.scheme import IOB2

    kwargs = {"mode": "strict", "scheme": IOB2} if mode == "strict" else {}
    report = classification_report(gold, pred, output_dict=True, zero_division=0, **kwargs)

    def pick(row):
        return {"precision": row["precision"], "recall": row["recall"], "f1": row["f1-score"],
                "support": int(row["support"])}

    return {"micro": pick(report["micro avg"]), "macro": pick(report["macro avg"]),
            "per_type": {k: pick(v) for k, v in report.items() if not k.endswith(" avg")}}


@pytest.mark.parametrize("seed", range(40))
def test_scores_equal_seqeval_bit_for_bit_on_random_and_malformed_tags(seed):
    """Random tag sequences (stray I-, type switches inside spans, empty sentences, types only
    predicted or only gold) score exactly as seqeval scores them, in both modes."""
    import random

    rng = random.Random(seed)
    tags = ["O", "O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-ORG", "B-MISC"][: rng.randint(4, 9)]
    gold, pred = [], []
    for _ in range(rng.randint(1, 30)):
        n = rng.randint(0, 12)
        gold.append([rng.choice(tags) for _ in range(n)])
        pred.append([rng.choice(tags) if rng.random() < 0.6 else g for g in gold[-1]])
    ours = span_scores(gold, pred)
    for mode, got in (("strict", ours), ("lenient", ours["lenient"])):
        if not any(t != "O" for s in gold + pred for t in s):
            assert got["micro"]["f1"] == 0.0 and got["per_type"] == {}
            continue
        ref = _seqeval_report(gold, pred, mode)
        if mode == "strict" and not ref["per_type"]:
            continue  # only stray I- tags: seqeval has no rows; we report zeros (checked below)
        counts = {"correct": got["micro"].pop("correct"), "predicted": got["micro"].pop("predicted")}
        assert got["micro"] == ref["micro"] and got["macro"] == ref["macro"], mode
        assert counts["correct"] == round(ref["micro"]["recall"] * ref["micro"]["support"]), mode
        if ref["micro"]["precision"] > 0:
            assert counts["predicted"] == round(counts["correct"] / ref["micro"]["precision"]), mode
        assert got["per_type"] == ref["per_type"], mode


def test_only_stray_inside_tags_score_zero_in_strict_mode():
    s = span_scores([["I-PER", "O"]], [["I-PER", "O"]])
    assert s["micro"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0, "correct": 0, "predicted": 0}
    assert s["per_type"] == {}
    assert s["lenient"]["micro"]["f1"] == 1.0


def test_unknown_tag_prefix_is_an_error():
    with pytest.raises(ValueError, match="E-PER"):
        span_scores([["E-PER"]], [["O"]])

"""Span metrics in seqeval's two scoring modes: micro / macro P, R, F1 and per-type scores.

* **strict** (IOB2, the primary scores: ``val/f1``, ``test.micro.f1``): a predicted span counts
  only when it is well formed (starts with ``B-``) and matches a gold span exactly in
  boundaries and type — ``seqeval.metrics.classification_report(mode="strict", scheme=IOB2)``.
* **lenient** (seqeval's default mode, conlleval's rules: ``val/f1_lenient``,
  ``test.lenient.micro.f1``): a span may also start with ``I-`` (e.g. Algorithm 1's ``I``
  after ``O`` when the begin head misses). The AUC-2T and OVA-AUC papers cite seqeval without
  a mode, i.e. this one; compare with them here.

The spans are extracted here in one pass per sentence rather than by seqeval (which takes
~5 s per CoNLL-2003 dev evaluation, a quarter of its cost on CPU); for IOB2 tags the numbers
are seqeval's bit for bit, with its ``zero_division=0`` and its float formulas
(``tests/test_metrics.py`` compares them on random and malformed sequences).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

MODES = ("strict", "lenient")


def spans(tags: list[str], mode: str) -> list[tuple[str, int, int]]:
    """``(type, first, last)`` word spans of one sentence of ``O`` / ``B-X`` / ``I-X`` tags.

    strict: ``B-X`` followed by ``I-X``*, a stray ``I-X`` belongs to no span. lenient
    (conlleval): a span also opens at ``I-X`` after ``O`` or after another type.
    """
    if tags.count("O") == len(tags):  # most sentences of an imbalanced corpus: nothing to walk
        return []
    out = []
    kind, start = None, 0  # type of the open span (None: no span open)
    for i, tag in enumerate(tags):
        prefix, _, type_ = tag.partition("-")
        if prefix == "I" and type_ == kind:
            continue
        if kind is not None:
            out.append((kind, start, i - 1))
            kind = None
        if prefix == "B" or (prefix == "I" and mode == "lenient"):
            kind, start = type_, i
        elif prefix not in ("O", "I"):
            raise ValueError(f"tag {tag!r} is not O, B-<type> or I-<type>")
    if kind is not None:
        out.append((kind, start, len(tags) - 1))
    return out


def _prf(tp: np.ndarray, pred: np.ndarray, true: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """seqeval's ``_precision_recall_fscore_support`` with ``zero_division=0``, beta 1."""
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(pred > 0, tp / np.maximum(pred, 1), 0.0)
        recall = np.where(true > 0, tp / np.maximum(true, 1), 0.0)
    denom = precision + recall
    denom[denom == 0.0] = 1
    return precision, recall, 2 * precision * recall / denom


def _report(gold: list[list[str]], pred: list[list[str]], mode: str) -> dict:
    true_n: Counter[str] = Counter()
    pred_n: Counter[str] = Counter()
    tp_n: Counter[str] = Counter()
    for gold_tags, pred_tags in zip(gold, pred, strict=True):
        gs, ps = spans(gold_tags, mode), spans(pred_tags, mode)
        true_n.update(t for t, _, _ in gs)
        pred_n.update(t for t, _, _ in ps)
        tp_n.update(t for t, _, _ in set(gs) & set(ps))
    names = sorted(set(true_n) | set(pred_n))
    return scores_from_counts(names, *(np.array([n[t] for t in names], dtype=np.int64) for n in (tp_n, pred_n, true_n)))


def scores_from_counts(types: list[str], correct: np.ndarray, predicted: np.ndarray, gold: np.ndarray) -> dict:
    """One mode's ``{"micro", "macro", "per_type"}`` from span counts per type (``types`` sorted);
    a type with no gold and no predicted span has no row, as in seqeval."""
    rows = [k for k in range(len(types)) if gold[k] + predicted[k] > 0]
    if not rows:
        return {"micro": _empty(counts=True), "macro": _empty(), "per_type": {}}
    names = [types[k] for k in rows]
    tp, pr, tr = (np.asarray(x, dtype=np.int64)[rows] for x in (correct, predicted, gold))
    p, r, f = _prf(tp, pr, tr)
    mp, mr, mf = (x.item() for x in _prf(tp.sum(keepdims=True), pr.sum(keepdims=True), tr.sum(keepdims=True)))
    support = int(tr.sum())

    def row(pi, ri, fi, s) -> dict:
        return {"precision": float(pi), "recall": float(ri), "f1": float(fi), "support": int(s)}

    return {
        # counts too, so F1 can be pooled over corpora (the report's --average-over dataset: micro average)
        "micro": {**row(mp, mr, mf, support), "correct": int(tp.sum()), "predicted": int(pr.sum())},
        "macro": row(np.average(p), np.average(r), np.average(f), support),
        "per_type": {t: row(p[k], r[k], f[k], tr[k]) for k, t in enumerate(names)},
    }


def span_scores(gold: list[list[str]], pred: list[list[str]]) -> dict:
    """Strict ``{"micro": {precision, recall, f1, support, correct, predicted}, "macro": {precision,
    recall, f1, support}, "per_type": {T: …}}``
    with the same three keys for lenient mode under ``"lenient"``."""
    if len(gold) != len(pred) or any(len(g) != len(p) for g, p in zip(gold, pred, strict=True)):
        raise ValueError("gold and predicted sequences must align sentence by sentence, word by word")
    return {**_report(gold, pred, "strict"), "lenient": _report(gold, pred, "lenient")}


def _empty(counts: bool = False) -> dict:
    return {
        "precision": 0.0,
        "recall": 0.0,
        "f1": 0.0,
        "support": 0,
        **({"correct": 0, "predicted": 0} if counts else {}),
    }


def flat_scores(scores: dict, prefix: str) -> dict[str, float]:
    """``{"val/f1": strict micro F1, "val/f1_macro": …, "val/f1_PER": …, "val/f1_lenient": …}``."""
    out = {}
    for suffix, s in (("", scores), ("_lenient", scores["lenient"])):
        out.update(
            {
                f"{prefix}/f1{suffix}": s["micro"]["f1"],
                f"{prefix}/precision{suffix}": s["micro"]["precision"],
                f"{prefix}/recall{suffix}": s["micro"]["recall"],
                f"{prefix}/f1_macro{suffix}": s["macro"]["f1"],
                f"{prefix}/precision_macro{suffix}": s["macro"]["precision"],
                f"{prefix}/recall_macro{suffix}": s["macro"]["recall"],
            }
        )
    out.update({f"{prefix}/f1_{t}": v["f1"] for t, v in scores["per_type"].items()})
    return out

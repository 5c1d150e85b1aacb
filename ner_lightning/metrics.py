"""seqeval span metrics in both scoring modes: micro / macro P, R, F1 and per-type scores.

* **strict** (IOB2, the primary scores: ``val/f1``, ``test.micro.f1``): a predicted span counts
  only when it is well formed (starts with ``B-``) and matches a gold span exactly in
  boundaries and type.
* **lenient** (seqeval's default mode, conlleval's rules: ``val/f1_lenient``,
  ``test.lenient.micro.f1``): a span may also start with ``I-`` (e.g. Algorithm 1's ``I``
  after ``O`` when the begin head misses). The AUC-2T and OVA-AUC papers cite seqeval without
  a mode, i.e. this one; compare with them here.
"""
from __future__ import annotations

from seqeval.metrics import classification_report
from seqeval.scheme import IOB2

MODES = ("strict", "lenient")


def _report(gold: list[list[str]], pred: list[list[str]], mode: str) -> dict:
    kwargs = {"mode": "strict", "scheme": IOB2} if mode == "strict" else {}
    report = classification_report(gold, pred, output_dict=True, zero_division=0, **kwargs)
    keep = ("precision", "recall", "f1-score")

    def pick(row: dict) -> dict:
        out = {k.replace("-score", ""): float(row[k]) for k in keep}
        out["support"] = int(row["support"])
        return out

    per_type = {k: pick(v) for k, v in report.items() if not k.endswith(" avg")}
    micro = pick(report["micro avg"]) if "micro avg" in report else _empty()
    macro = pick(report["macro avg"]) if "macro avg" in report else _empty()
    return {"micro": micro, "macro": macro, "per_type": per_type}


def span_scores(gold: list[list[str]], pred: list[list[str]]) -> dict:
    """Strict ``{"micro": {precision, recall, f1, support}, "macro": …, "per_type": {T: …}}``
    with the same three keys for lenient mode under ``"lenient"``."""
    if len(gold) != len(pred) or any(len(g) != len(p) for g, p in zip(gold, pred)):
        raise ValueError("gold and predicted sequences must align sentence by sentence, word by word")
    return {**_report(gold, pred, "strict"), "lenient": _report(gold, pred, "lenient")}


def _empty() -> dict:
    return {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}


def flat_scores(scores: dict, prefix: str) -> dict[str, float]:
    """``{"val/f1": strict micro F1, "val/f1_macro": …, "val/f1_PER": …, "val/f1_lenient": …}``."""
    out = {}
    for suffix, s in (("", scores), ("_lenient", scores["lenient"])):
        out.update({
            f"{prefix}/f1{suffix}": s["micro"]["f1"],
            f"{prefix}/precision{suffix}": s["micro"]["precision"],
            f"{prefix}/recall{suffix}": s["micro"]["recall"],
            f"{prefix}/f1_macro{suffix}": s["macro"]["f1"],
            f"{prefix}/precision_macro{suffix}": s["macro"]["precision"],
            f"{prefix}/recall_macro{suffix}": s["macro"]["recall"],
        })
    out.update({f"{prefix}/f1_{t}": v["f1"] for t, v in scores["per_type"].items()})
    return out

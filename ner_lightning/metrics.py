"""seqeval strict span metrics (IOB2): micro / macro P, R, F1 and per-type scores.

Strict mode counts a predicted span only when it is well formed (starts with ``B-``) and
matches a gold span exactly in boundaries and type, as conlleval-style strict evaluation.
"""
from __future__ import annotations

from seqeval.metrics import classification_report
from seqeval.scheme import IOB2


def span_scores(gold: list[list[str]], pred: list[list[str]]) -> dict:
    """``{"micro": {precision, recall, f1}, "macro": {...}, "per_type": {T: {..., support}}}``."""
    if len(gold) != len(pred) or any(len(g) != len(p) for g, p in zip(gold, pred)):
        raise ValueError("gold and predicted sequences must align sentence by sentence, word by word")
    report = classification_report(gold, pred, mode="strict", scheme=IOB2, output_dict=True, zero_division=0)
    keep = ("precision", "recall", "f1-score")

    def pick(row: dict) -> dict:
        out = {k.replace("-score", ""): float(row[k]) for k in keep}
        out["support"] = int(row["support"])
        return out

    per_type = {k: pick(v) for k, v in report.items() if not k.endswith(" avg")}
    micro = pick(report["micro avg"]) if "micro avg" in report else _empty()
    macro = pick(report["macro avg"]) if "macro avg" in report else _empty()
    return {"micro": micro, "macro": macro, "per_type": per_type}


def _empty() -> dict:
    return {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}


def flat_scores(scores: dict, prefix: str) -> dict[str, float]:
    """``{"val/f1": micro F1, "val/f1_macro": ..., "val/precision": ..., "val/f1_PER": ...}``."""
    out = {
        f"{prefix}/f1": scores["micro"]["f1"],
        f"{prefix}/precision": scores["micro"]["precision"],
        f"{prefix}/recall": scores["micro"]["recall"],
        f"{prefix}/f1_macro": scores["macro"]["f1"],
        f"{prefix}/precision_macro": scores["macro"]["precision"],
        f"{prefix}/recall_macro": scores["macro"]["recall"],
    }
    out.update({f"{prefix}/f1_{t}": v["f1"] for t, v in scores["per_type"].items()})
    return out

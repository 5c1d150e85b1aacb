"""Span scoring of CoNLL-2003 dev (both modes) by ner_lightning.metrics vs seqeval: seconds and
equality. The predictions are the gold tags with 10 % of the words replaced at random.

    python benchmarks/scoring.py
"""
import random
import tempfile
import time
from pathlib import Path

from hydra.utils import instantiate
from seqeval.metrics import classification_report
from seqeval.scheme import IOB2

from ner_lightning.config import compose_config
from ner_lightning.metrics import span_scores


def main() -> None:
    corpus = instantiate(compose_config([], Path(tempfile.mkdtemp())).dataset)
    gold = [list(s.tags) for s in corpus.dev]
    rng = random.Random(0)
    pred = [[t if rng.random() < 0.9 else rng.choice(["O", "B-PER", "I-ORG", "B-LOC"]) for t in g] for g in gold]
    t = time.perf_counter()
    ours = span_scores(gold, pred)
    t_ours = time.perf_counter() - t
    t = time.perf_counter()
    strict = classification_report(gold, pred, output_dict=True, zero_division=0, mode="strict", scheme=IOB2)
    lenient = classification_report(gold, pred, output_dict=True, zero_division=0)
    t_seqeval = time.perf_counter() - t
    same = (ours["micro"]["f1"] == strict["micro avg"]["f1-score"]
            and ours["lenient"]["micro"]["f1"] == lenient["micro avg"]["f1-score"]
            and ours["macro"]["f1"] == strict["macro avg"]["f1-score"])
    print(f"{len(gold)} dev sentences: ner_lightning {t_ours:.3f} s, seqeval {t_seqeval:.3f} s "
          f"({t_seqeval / t_ours:.0f}x); micro/macro F1 identical: {same}")


if __name__ == "__main__":
    main()

"""What the MRC framing costs in input tokens, and what its tagger head can express at best.

    python benchmarks/mrc_inputs.py [--dataset conll2003] [--sizes 50,200]

1. Real (non-padding) training tokens an epoch and the padding factor (computed / real) of the
   training batches, tagging vs MRC, random batches vs ``data.group_by_length=true`` (5 epochs).
2. The tagger head's ceiling: the gold tags projected on each type, decoded and merged like a
   perfect model's answers (P = 1 inside, 0 outside), scored against gold on dev and test.
   What falls short is adjacent entities of one type, which a binary answer merges.
"""
from __future__ import annotations

import argparse

from hydra.utils import instantiate
from transformers import AutoTokenizer

from ner_lightning.config import compose_config
from ner_lightning.data.alignment import project_on_type
from ner_lightning.decoding import inside_spans, merge_typed_spans
from ner_lightning.metrics import span_scores


def padding(dm, epochs: int = 5) -> tuple[int, float]:
    real = computed = 0
    for epoch in range(epochs):
        loader = dm.train_dataloader()
        sampler = loader.batch_sampler if dm.group_by_length else loader.sampler
        sampler.set_epoch(epoch)
        for batch in loader:
            real += int(batch["attention_mask"].sum())
            computed += batch["attention_mask"].numel()
    return real // epochs, computed / real


def tagger_ceiling(sentences, types) -> float:
    pred = []
    for s in sentences:
        candidates = []
        for t in types:
            inside = [1.0 if label > 0 else 0.0 for label in project_on_type(s.tags, t)]
            candidates += [(t, a, b, score) for a, b, score in inside_spans(inside)]
        pred.append(merge_typed_spans(candidates, len(s), types))
    return span_scores([list(s.tags) for s in sentences], pred)["micro"]["f1"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="conll2003")
    ap.add_argument("--sizes", default="50,200")
    args = ap.parse_args()
    print("| size | framing | inputs | real tokens / epoch | padding, random batches | padding, group_by_length |")
    print("|---|---|---|---|---|---|")
    for size in map(int, args.sizes.split(",")):
        for framing in ("tagging", "mrc"):
            cfg = compose_config([f"dataset={args.dataset}", f"size={size}", f"data.framing={framing}"], "/tmp/mrc_inputs")
            dm = instantiate(cfg.data, tokenizer=AutoTokenizer.from_pretrained(cfg.model.name_or_path))
            dm.setup("fit")
            dm.group_by_length = False
            real, random_pad = padding(dm)
            dm.group_by_length = True
            _, grouped_pad = padding(dm)
            print(f"| {size} | {framing} | {len(dm.features['train'])} | {real} | {random_pad:.2f} | {grouped_pad:.2f} |")
    corpus = dm.corpus
    types = dm.label_set.entity_types
    for split in ("dev", "test"):
        sents = corpus.split(split)
        print(f"tagger-head ceiling on {args.dataset} {split} (all {len(sents)} sentences): "
              f"micro-F1 {tagger_ceiling(sents, types):.4f}")


if __name__ == "__main__":
    main()

"""Dev scoring of a real split, per cell: from the decoded label ids (as evaluation collects them,
batches of 32 sentences on the device) to strict and lenient span scores. Two ways, interleaved
in rounds of one invocation, medians:

* ``strings``: every batch to the host, whole sentences of tag strings reassembled
  (``word_grid.host_entries`` + ``whole_sentences``), spans walked per sentence
  (``metrics.span_scores``) — how a cell was scored before span counts;
* ``counts``: the words laid end to end on the device and counted against the gold spans
  indexed once (``word_grid.placed_words`` + ``span_counts.SplitCounter``), one host copy — for
  one cell, and for K cells of a lockstep group at once (seconds divided by K); the words'
  placement is kept between rounds as a module keeps it between evaluations of a cached loader.

    python benchmarks/scoring.py [--split dev] [--cells 1,8,32] [--rounds 5] [--out F.json]

The predicted ids are the gold ones with 10 % of words replaced at random (fixed seed); both ways
give the same scores (checked here on every round).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from ner_lightning.data.alignment import BatchLayout
from ner_lightning.data.corpus import LabelSet, read_conll
from ner_lightning.metrics import span_scores
from ner_lightning.models.word_grid import host_entries, placed_words, whole_sentences
from ner_lightning.span_counts import SplitCounter, TagCodes
from timing import write_raw  # benchmarks/timing.py

ROOT = Path(__file__).resolve().parents[1]


def decoded_batches(gold: list[list[str]], label_set: LabelSet, cells: int, batch: int = 32, seed: int = 0):
    """Noisy predicted ids ``(cells, B, W)`` per batch of ``batch`` sentences, with their layouts."""
    rng = np.random.default_rng(seed)
    index = {t: i for i, t in enumerate(label_set.labels)}
    out = []
    for start in range(0, len(gold), batch):
        rows = gold[start : start + batch]
        width = max(1, max(len(s) for s in rows))
        ids = np.zeros((cells, len(rows), width), dtype=np.int64)
        for r, s in enumerate(rows):
            ids[:, r, : len(s)] = [index[t] for t in s]
        noise = rng.random(ids.shape) < 0.1
        ids[noise] = rng.integers(0, len(label_set.labels), int(noise.sum()))
        layout = BatchLayout(
            words=tuple(len(s) for s in rows),
            sentences=tuple(range(start, start + len(rows))),
            offsets=(0,) * len(rows),
            types=(),
            corpora=(0,) * len(rows),
        )
        out.append((torch.from_numpy(ids), layout))
    return out


def by_strings(batches, gold, id2label, cell: int) -> dict:
    entries = host_entries([(ids[cell], layout) for ids, layout in batches], lambda lay, r, v: (lay.sentences[r], lay.offsets[r], v))
    return span_scores(gold, whole_sentences(entries.get(0, []), [len(s) for s in gold], id2label, "val"))


def by_counts(batches, counter: SplitCounter, cache: dict) -> list[dict]:
    placed = placed_words(batches, counter.starts, counter.lengths, 0, counter.codes.outside, "val", False, cache)
    counts = counter.counts(placed.tags).cpu().numpy()
    return [counter.scores(row) for row in counts]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", default="dev")
    ap.add_argument("--cells", default="1,8,32")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    data = Path(os.environ.get("NER_DATA_DIR", ROOT.parent / "shared" / "datasets")) / "conll2003"
    sentences = read_conll(data / f"{args.split}.txt", delimiter=" ", tag_scheme="iob2", split=args.split)
    gold = [list(s.tags) for s in sentences]
    label_set = LabelSet(sorted({t.partition("-")[2] for s in gold for t in s if t != "O"}))
    torch.set_num_threads(1)
    counter_start = time.perf_counter()
    counter = SplitCounter(TagCodes(label_set.labels), gold)
    index_s = time.perf_counter() - counter_start
    rows = []
    for k in (int(c) for c in args.cells.split(",")):
        batches = decoded_batches(gold, label_set, k)
        times: dict[str, list[float]] = {"strings": [], "counts": []}
        cache: dict = {}  # the words' placement, kept between evaluations as a module keeps it
        for rnd in range(args.rounds):
            for way in ("strings", "counts") if rnd % 2 == 0 else ("counts", "strings"):
                t0 = time.perf_counter()
                if way == "strings":
                    ref = [by_strings(batches, gold, label_set.id2label, c) for c in range(k)]
                else:
                    got = by_counts(batches, counter, cache)
                times[way].append(time.perf_counter() - t0)
            assert got == ref, "the two ways disagree"
        per_cell = {way: statistics.median(t) / k for way, t in times.items()}
        rows.append({"cells": k, "per_cell_ms": {w: round(1000 * s, 3) for w, s in per_cell.items()},
                     "rounds_s": times})
        print(f"{k:>3} cells: strings {1000 * per_cell['strings']:.1f} ms a cell, counts "
              f"{1000 * per_cell['counts']:.2f} ms a cell ({per_cell['strings'] / per_cell['counts']:.0f}x)", flush=True)
    print(f"gold spans indexed once per split: {1000 * index_s:.1f} ms ({len(gold)} sentences, "
          f"{counter.words} words)")
    if args.out:
        write_raw(args.out, {"split": args.split, "sentences": len(gold), "words": counter.words,
                             "index_ms": round(1000 * index_s, 2), "rows": rows, "torch_threads": 1})


if __name__ == "__main__":
    main()

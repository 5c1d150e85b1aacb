"""Training steps and evaluation with glibc's heap defaults vs ``malloc_top_pad_mb``
(``ner_lightning.hardware.reserve_heap``).

The setting is per process and cannot be undone inside one, so each measurement is a child
process; the settings take turns, ``--rounds`` times, and the medians are compared. A child
builds the default encoder and data (CoNLL-2003, MiniLM, partition 0 of ``--size``), sets the
pad as a cell does (after torch is loaded), then times ``--epochs`` epochs of training steps on
the framework's own random batches (packed, bf16 where native, fused AdamW, a linear head; a
new epoch's batches each time, as in a cell) and one forward pass over 1,000 dev sentences in
length-sorted evaluation batches. Minor page faults and peak resident memory come from ``getrusage``.

    python benchmarks/malloc_pad.py [--pads 0,1024] [--rounds 3] [--size 100] [--epochs 3]
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def child(pad: int, size: int, epochs: int) -> dict:
    import torch
    from hydra.utils import instantiate

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_ce import _autocast, _fastest_adamw, _sorted_batches, train_step

    from ner_lightning.config import compose_config
    from ner_lightning.hardware import precision_choice, reserve_heap

    cfg = compose_config([f"size={size}", f"malloc_top_pad_mb={pad}"], Path(tempfile.mkdtemp()))
    heap = reserve_heap(cfg.malloc_top_pad_mb)
    precision = "bf16" if precision_choice("cpu")[0] == "bf16-mixed" else "fp32"
    encoder = instantiate(cfg.model)
    dm = instantiate(cfg.data, tokenizer=encoder.tokenizer)
    dm.setup("fit")
    loader = dm.train_dataloader()
    head = torch.nn.Linear(encoder.hidden_size, len(dm.label_set))
    opt = _fastest_adamw([*encoder.parameters(), *head.parameters()], lr=1e-5)
    encoder.train()
    train_step(encoder, head, opt, precision, next(iter(loader)))  # warm-up
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    tokens, seconds = 0, 0.0
    for epoch in range(1, epochs + 1):
        loader.batch_sampler.sampler.set_epoch(epoch)  # where Lightning sets it (EpochForwarding when grouped)
        batches = list(loader)
        t = time.perf_counter()
        tokens += sum(train_step(encoder, head, opt, precision, b) for b in batches)
        seconds += time.perf_counter() - t
    train_faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    eval_batches = _sorted_batches(dm.features["dev"][:1000], cfg.data.eval_batch_size, encoder.tokenizer.pad_token_id)
    encoder.eval()
    with torch.inference_mode(), _autocast(precision):
        t = time.perf_counter()
        for b in eval_batches:
            encoder(b["input_ids"], b["attention_mask"])
        eval_s = time.perf_counter() - t
    eval_tokens = sum(int(b["attention_mask"].sum()) for b in eval_batches)
    return {"pad_mb": pad, "heap": heap, "precision": precision, "train_tok_s": tokens / seconds,
            "train_minor_faults": train_faults, "eval_tok_s": eval_tokens / eval_s,
            "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pads", default="0,1024", help="comma list of malloc_top_pad_mb values to compare")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help="write the runs as JSON here")
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.size, args.epochs)))
        return
    pads = [int(p) for p in args.pads.split(",")]
    runs = {p: [] for p in pads}
    for r in range(args.rounds):
        for p in pads:
            cmd = [sys.executable, __file__, "--child", str(p), "--size", str(args.size), "--epochs", str(args.epochs)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            runs[p].append(json.loads(out.strip().splitlines()[-1]))
            res = runs[p][-1]
            print(f"round {r + 1} pad {p:>5} MiB: train {res['train_tok_s']:,.0f} tok/s, {res['train_minor_faults']:,} "
                  f"minor faults, eval {res['eval_tok_s']:,.0f} tok/s, peak RSS {res['max_rss_mb']:,.0f} MB", flush=True)
    print(f"\nmedians over {args.rounds} rounds ({runs[pads[0]][0]['precision']}, size {args.size}, {args.epochs} epochs per child):")
    med = {p: {k: statistics.median(x[k] for x in runs[p]) for k in ("train_tok_s", "train_minor_faults", "eval_tok_s", "max_rss_mb")}
           for p in pads}
    for p in pads:
        m = med[p]
        print(f"pad {p:>5} MiB: train {m['train_tok_s']:,.0f} tok/s ({m['train_tok_s'] / med[pads[0]]['train_tok_s']:.2f}x), "
              f"{m['train_minor_faults']:,.0f} faults, eval {m['eval_tok_s']:,.0f} tok/s "
              f"({m['eval_tok_s'] / med[pads[0]]['eval_tok_s']:.2f}x), peak RSS {m['max_rss_mb']:,.0f} MB | {runs[p][0]['heap']}")
    if args.out:
        Path(args.out).write_text(json.dumps({"runs": runs, "medians": med, "argv": sys.argv}, indent=2))


if __name__ == "__main__":
    main()

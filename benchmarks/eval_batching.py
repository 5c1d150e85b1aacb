"""Which evaluation batches make the encoder fastest: MiniLM forward over the whole CoNLL-2003
dev split (the default job's 30 evaluations), sorted by length and cut at a number of sentences
(``data.eval_batch_size``), padded or packed (``model.pack``), at fp32 and bf16 autocast;
the fastest of ``--passes`` passes, the settings taking turns pass by pass (a busy VM slows all alike).

    python benchmarks/eval_batching.py [--sizes 16,32,64,128,256] [--pack false,true] [--passes 3]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from hydra.utils import instantiate

sys.path.insert(0, str(Path(__file__).parent))
from bench_ce import _autocast, _best_pass, _sorted_batches, forward_pass  # noqa: E402

from ner_lightning.config import compose_config  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="16,32,64,128,256")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--pack", default="false,true", help="model.pack values")
    ap.add_argument("--passes", type=int, default=3)
    args = ap.parse_args()
    cfg = compose_config(["size=20"], Path(tempfile.mkdtemp()))
    encoder = instantiate(cfg.model)
    encoder.eval()
    dm = instantiate(cfg.data, tokenizer=encoder.tokenizer)
    dm.setup("fit")
    pad = encoder.tokenizer.pad_token_id
    print(f"dev: {len(dm.features['dev'])} sentences, {torch.get_num_threads()} threads")

    packs = [v == "true" for v in args.pack.split(",")]
    settings = [(p, size, pack) for p in args.precisions.split(",") for size in map(int, args.sizes.split(","))
                for pack in packs]
    batches = {size: _sorted_batches(dm.features["dev"], size, pad) for size in map(int, args.sizes.split(","))}
    best = dict.fromkeys(settings, 0.0)
    with torch.inference_mode():
        for _ in range(args.passes):
            for precision, size, pack in settings:
                encoder.pack = pack
                with _autocast(precision):
                    encoder(batches[size][0]["input_ids"], batches[size][0]["attention_mask"])  # warm-up
                    best[precision, size, pack] = max(best[precision, size, pack], _best_pass(
                        lambda: forward_pass(encoder, batches[size]), 1))
    print(f"{'precision':>9}{'batch':>7}{'pack':>6}{'batches':>9}{'padding':>9}{'real tok/s':>12}")
    for (precision, size, pack), speed in best.items():
        real = sum(int(b["attention_mask"].sum()) for b in batches[size])
        padded = sum(b["attention_mask"].numel() for b in batches[size])
        print(f"{precision:>9}{size:7d}{'yes' if pack else 'no':>6}{len(batches[size]):9d}{padded / real:9.2f}{speed:12,.0f}")


if __name__ == "__main__":
    main()

"""Training steps on the framework's own random training batches, padded vs packed
(``model.pack``): real (non-padding) sub-words per second, the two taking turns epoch by epoch
so a busy VM slows both alike; the fastest of ``--passes`` epochs each. bf16 autocast where
the CPU has it natively, else fp32; fused AdamW, clipping, a linear head.

    python benchmarks/packing.py [--size 200] [--passes 3]
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
from bench_ce import _fastest_adamw, train_step  # noqa: E402

from ner_lightning.config import compose_config  # noqa: E402
from ner_lightning.hardware import precision_choice  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--passes", type=int, default=3)
    args = ap.parse_args()
    cfg = compose_config([f"size={args.size}"], Path(tempfile.mkdtemp()))
    precision = "bf16" if precision_choice("cpu")[0] == "bf16-mixed" else "fp32"
    encoder = instantiate(cfg.model)
    dm = instantiate(cfg.data, tokenizer=encoder.tokenizer)
    dm.setup("fit")
    batches = list(dm.train_dataloader())  # epoch 0's random batches
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    padded = sum(b["attention_mask"].numel() for b in batches)
    encoder.train()
    head = torch.nn.Linear(encoder.hidden_size, len(dm.label_set))
    opt = _fastest_adamw([*encoder.parameters(), *head.parameters()], lr=1e-5)

    def epoch() -> float:
        t = time.perf_counter()
        for b in batches:
            train_step(encoder, head, opt, precision, b)
        return real / (time.perf_counter() - t)

    best = {False: 0.0, True: 0.0}
    encoder.pack = True
    epoch()  # warm-up
    for _ in range(args.passes):
        for pack in best:
            encoder.pack = pack
            best[pack] = max(best[pack], epoch())
    print(f"size {args.size}, batch {cfg.data.batch_size}, {len(batches)} random batches, padding {padded / real:.2f}, "
          f"{precision}, {torch.get_num_threads()} threads")
    print(f"padded {best[False]:,.0f} real tok/s | packed {best[True]:,.0f} real tok/s | {best[True] / best[False]:.2f}x")


if __name__ == "__main__":
    main()

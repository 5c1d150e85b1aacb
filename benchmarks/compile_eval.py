"""Eager vs ``torch.compile(dynamic=True)`` MiniLM forward on every 6th sorted CoNLL-2003 dev
batch of 64: compile time, then two timed passes each.

    python benchmarks/compile_eval.py
"""
import sys
import tempfile
import time
from pathlib import Path

import torch
from hydra.utils import instantiate

sys.path.insert(0, str(Path(__file__).parent))
from bench_ce import _sorted_batches  # noqa: E402

from ner_lightning.config import compose_config  # noqa: E402


def main() -> None:
    cfg = compose_config(["size=20"], Path(tempfile.mkdtemp()))
    encoder = instantiate(cfg.model)
    dm = instantiate(cfg.data, tokenizer=encoder.tokenizer)
    dm.setup("fit")
    batches = _sorted_batches(dm.features["dev"], 64, encoder.tokenizer.pad_token_id)[::6]
    print(len(batches), "batches,", sum(int(b["attention_mask"].sum()) for b in batches), "tokens")
    encoder.eval()
    compiled = torch.compile(encoder, dynamic=True)

    def run(model) -> float:
        t = time.perf_counter()
        with torch.inference_mode():
            for b in batches:
                model(b["input_ids"], b["attention_mask"])
        return time.perf_counter() - t

    print(f"compile + first pass {run(compiled):.1f} s")
    for _ in range(2):
        print(f"eager {run(encoder):.2f} s   compiled {run(compiled):.2f} s")


if __name__ == "__main__":
    main()

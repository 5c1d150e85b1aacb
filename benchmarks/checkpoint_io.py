"""What the checkpoints cost a cell: the default CE cell for a few epochs in child processes,
one per way of writing them, taking turns over several rounds.

    python benchmarks/checkpoint_io.py [--epochs 8] [--rounds 3] [--variants a,b] [--out F] [overrides ...]

Each child runs ``ner_lightning.run.train`` and reports the checkpoints written to disk
(best.ckpt, last.ckpt for resume), the seconds the training process spent writing them (and
copying a held best.ckpt), the fit phase, and its peak resident memory. Variants:

* ``lightning_every_epoch``: Lightning's own writer (``trainer.plugins=[]``: the whole checkpoint
  serialised into memory, copied, then written), best.ckpt written at every improvement and
  last.ckpt after every epoch (the setting before session 17);
* ``streaming_every_epoch``: ``StreamingCheckpointIO`` (straight into a temp file, renamed),
  otherwise as before;
* ``async_streaming_every_epoch``: the same inside Lightning's experimental ``AsyncCheckpointIO``
  (written by a background thread after a copy of the state);
* ``best_at_once_last_every_60s``: streaming, last.ckpt at most every 60 s but with every
  best.ckpt, which is written at once (``callbacks.model_checkpoint.hold=false``);
* ``default``: as shipped: streaming, a new best held in memory and written just before each
  last.ckpt (at most every 60 s) and at the end of training;
* ``no_resume_checkpoint``: ``~callbacks.last_checkpoint`` (no resume; best.ckpt once, at the end).
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

STREAM = "{_target_:ner_lightning.checkpoint_io.StreamingCheckpointIO}"
AT_ONCE = ["callbacks.model_checkpoint.hold=false"]
EVERY_EPOCH = [*AT_ONCE, "callbacks.last_checkpoint.min_interval_s=0"]
VARIANTS = {
    "lightning_every_epoch": ["trainer.plugins=[]", *EVERY_EPOCH],
    "streaming_every_epoch": EVERY_EPOCH,
    "async_streaming_every_epoch": [
        f"trainer.plugins=[{{_target_:pytorch_lightning.plugins.io.AsyncCheckpointIO,checkpoint_io:{STREAM}}}]",
        *EVERY_EPOCH],
    "best_at_once_last_every_60s": AT_ONCE,
    "default": [],
    "no_resume_checkpoint": ["~callbacks.last_checkpoint"],
}


def child(overrides: list[str]) -> None:
    import pytorch_lightning as pl

    from ner_lightning.config import compose_config
    from ner_lightning.run import train

    from pytorch_lightning.strategies import Strategy

    from ner_lightning.callbacks import BestCheckpoint

    spent = {"seconds": 0.0, "writes": 0}

    def timed(method, counts: bool):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return method(*a, **k)
            finally:
                spent["seconds"] += time.perf_counter() - t
                spent["writes"] += counts
        return wrapper

    # every checkpoint that reaches the disk (Trainer.save_checkpoint and a held best.ckpt both go
    # through the strategy), and the copy a held best.ckpt takes (time only: nothing written)
    Strategy.save_checkpoint = timed(Strategy.save_checkpoint, True)
    hold = BestCheckpoint._save_checkpoint
    BestCheckpoint._save_checkpoint = lambda self, trainer, path: (
        timed(hold, False) if self.hold else hold)(self, trainer, path)
    cfg = compose_config(["trainer.enable_progress_bar=false", "logger=none", *overrides], tempfile.mkdtemp())
    res = train(cfg)
    print(json.dumps({"save_s": round(spent["seconds"], 2), "writes": spent["writes"], "fit_s": res["phase_s"]["fit"],
                      "epochs": res["epochs"], "test_f1": res["test"]["micro"]["f1"],
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, from: " + ", ".join(VARIANTS))
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    if args.child:
        return child(args.overrides)
    names = args.variants.split(",")
    if unknown := set(names) - set(VARIANTS):
        ap.error(f"--variants: unknown {sorted(unknown)}; choose from {', '.join(VARIANTS)}")
    runs: dict[str, list[dict]] = {k: [] for k in names}
    for r in range(args.rounds):
        for name in names:
            extra = VARIANTS[name]
            cmd = [sys.executable, __file__, "--child", "--", f"trainer.max_epochs={args.epochs}", *extra, *args.overrides]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            runs[name].append(json.loads(out.strip().splitlines()[-1]))
            print(f"round {r + 1} {name:28} {runs[name][-1]}", flush=True)
    print(f"\nmedians of {args.rounds} rounds, {args.epochs} epochs each:")
    print(f"{'variant':30}{'writes':>7}{'save s':>8}{'fit s':>8}{'peak RSS MB':>13}{'test F1':>9}")
    for name, rs in runs.items():
        med = {k: statistics.median(x[k] for x in rs) for k in ("writes", "save_s", "fit_s", "peak_rss_mb", "test_f1")}
        print(f"{name:30}{med['writes']:>7.0f}{med['save_s']:>8.2f}{med['fit_s']:>8.1f}{med['peak_rss_mb']:>13.0f}"
              f"{med['test_f1']:>9.4f}")
    if args.out:
        Path(args.out).write_text(json.dumps({"runs": runs, "argv": sys.argv}, indent=2))


if __name__ == "__main__":
    main()

"""One cell under several override sets, one fresh process each, one after the other: evaluation
and training throughput from each run's ``results.json`` (what a setting is worth on this device).

    python benchmarks/override_variants.py --base "trainer=gpu logger=csv trainer.max_epochs=2 trainer.min_epochs=1" \\
        "" "trainer.deterministic=false" "model.pack=false" \\
        "trainer.deterministic=false model.pack=false trainer.enable_progress_bar=false"

The first set is the reference of the ratio column; "" is the base alone.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from timing import fit_seconds, timed_process  # noqa: E402  (benchmarks/timing.py)


def run_variant(base: list[str], overrides: list[str], out_dir: Path) -> dict:
    """One run of ``ner_lightning.run`` with ``base + overrides``; its results.json and wall seconds."""
    cmd = [sys.executable, "-m", "ner_lightning.run", *base, *overrides, f"hydra.run.dir={out_dir}"]
    _, seconds = timed_process(cmd, log=out_dir.with_suffix(".log"))
    return {**json.loads((out_dir / "results.json").read_text()), "process_s": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="", help="overrides every run gets (one string)")
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    ap.add_argument("variants", nargs="+", help="override sets, one string each")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="variants_"))
    rows = []
    print("| overrides | eval tok/s | train tok/s | fit s | test s | test F1 | eval vs first |\n|---|---:|---:|---:|---:|---:|---:|")
    for i, variant in enumerate(args.variants):
        r = run_variant(args.base.split(), variant.split(), work / f"v{i}")
        tp = r["throughput"]
        rows.append({"overrides": variant, "eval_tokens_per_s": tp["eval_tokens_per_s"],
                     "train_tokens_per_s": tp["train_tokens_per_s"], "phase_s": r["phase_s"],
                     "test_f1": r["test"]["micro"]["f1"], "precision": r["precision"], "process_s": r["process_s"]})
        ratio = tp["eval_tokens_per_s"] / rows[0]["eval_tokens_per_s"]
        print(f"| {variant or '(base)'} | {tp['eval_tokens_per_s']:,.0f} | {tp['train_tokens_per_s']:,.0f} | "
              f"{fit_seconds(r['phase_s']):.1f} | {r['phase_s']['test']:.1f} | {r['test']['micro']['f1']:.4f} | {ratio:.2f} |",
              flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"base": args.base, "rows": rows, "argv": sys.argv}, indent=2))


if __name__ == "__main__":
    main()

"""Training-set statistics of the data regimes (no training): markdown tables on stdout.

    python benchmarks/regime_stats.py resampling --dataset wnut17 --size 500
    python benchmarks/regime_stats.py imbalance --dataset conll2003 --size 100

``resampling``: what each sentence-level resampling function (both variants), balanced
undersampling and augmentation make of one partition. ``imbalance``: the share the imbalance
generator achieves for each target, and the reachable range.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from ner_lightning.config import CONFIG_DIR
from ner_lightning.data.augmentation import augment
from ner_lightning.data.regimes import (
    RESAMPLING_METHODS, balanced_undersample, imbalance_sample, resample, share_bounds,
    training_set_stats,
)
from ner_lightning.data.sampling import partition_rng, sample_partition


def load(dataset: str):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"dataset={dataset}"])
    return instantiate(cfg.dataset)


def row(name: str, st: dict, types: list[str]) -> str:
    per_type = " | ".join(str(st["type_tokens"].get(t, 0)) for t in types)
    return (f"| {name} | {st['sentences']} | {st['tokens']} | {st['entity_token_share']:.2%} | "
            f"{st['bio_shares']['B']:.2%} / {st['bio_shares']['I']:.2%} / {st['bio_shares']['O']:.2%} | {per_type} |")


def resampling_table(args) -> None:
    corpus = load(args.dataset)
    types = list(corpus.label_set.entity_types)
    for partition in range(args.partitions):
        part = sample_partition(corpus.train, args.size, partition, args.seed, corpus.name)
        print(f"\n**{args.dataset}, size {args.size}, partition {partition}, seed {args.seed}**\n")
        print("| training set | sentences | tokens | entity-token share | B / I / O | " + " | ".join(types) + " |")
        print("|---" * (5 + len(types)) + "|")
        print(row("original", training_set_stats(part), types))
        for variant in ("paper", "released"):
            for m in RESAMPLING_METHODS:
                print(row(f"{m} ({variant})", training_set_stats(resample(part, m, variant)), types))
        print(row("balanced undersampling R=3", training_set_stats(balanced_undersample(part, 3)), types))
        rng = partition_rng(corpus.name, "augment", args.size, partition, args.seed)
        print(row("augmentation lwtr+mr+sis, 0.3", training_set_stats(augment(part, ["lwtr", "mr", "sis"], 0.3, rng)), types))


def imbalance_table(args) -> None:
    for dataset in args.dataset.split(","):
        corpus = load(dataset)
        lo, hi = share_bounds(corpus.train, args.size)
        print(f"\n**{dataset}, size {args.size}**: reachable entity-token share {lo:.2%} to {hi:.2%} "
              f"(corpus: {training_set_stats(corpus.train)['entity_token_share']:.2%})\n")
        print("| target | achieved (partition 0) | achieved (partition 1) | tokens (p0) | seconds (p0) |")
        print("|---|---|---|---|---|")
        for p in args.targets:
            t0 = time.perf_counter()
            s0 = imbalance_sample(corpus.train, args.size, p, args.tolerance, 0, args.seed, dataset)
            dt = time.perf_counter() - t0
            s1 = imbalance_sample(corpus.train, args.size, p, args.tolerance, 1, args.seed, dataset)
            st0, st1 = training_set_stats(s0), training_set_stats(s1)
            print(f"| {p:.0%} | {st0['entity_token_share']:.2%} | {st1['entity_token_share']:.2%} | "
                  f"{st0['tokens']} | {dt:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("table", choices=["resampling", "imbalance"])
    ap.add_argument("--dataset", default="wnut17", help="dataset config name(s), comma-separated for imbalance")
    ap.add_argument("--size", type=int, default=500)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--targets", type=float, nargs="*", default=[0.01, 0.02, 0.05, 0.10, 0.20])
    ap.add_argument("--tolerance", type=float, default=0.05)
    args = ap.parse_args()
    np.set_printoptions(precision=4)
    (resampling_table if args.table == "resampling" else imbalance_table)(args)


if __name__ == "__main__":
    main()

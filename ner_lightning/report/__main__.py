"""Aggregate the ``results.json`` of one or more sweep folders.

    python -m ner_lightning.report multirun/2026-11-22/17-04-43-949171 --by loss,size
    python -m ner_lightning.report DIR --by loss,size --metrics test.micro.f1,test.lenient.micro.f1 --baseline loss=ce
    python -m ner_lightning.report DIR --by loss,size --metrics test.macro.f1 --paper loss:size --baseline loss=ce
    python -m ner_lightning.report DIR --by loss,size --baseline loss=ce --plots docs/results/figures/x
    python -m ner_lightning.report SINGLEAUX_DIR DIR --by dataset,multitask --select-on-dev aux --average-over dataset

Rows group the runs by config keys (dotted paths into the resolved config; ``loss``, ``model``
and ``dataset`` mean the option chosen on the command line). Every metric is a dotted path into
results.json (``test.micro.f1``, ``test.lenient.macro.f1``, ``test.per_type.PER.f1``,
``compute.optimizer_steps`` …) and is reported as mean ± bootstrap standard error [95 %
percentile CI] over the runs of a row (the partitions), with n and the partitions missing.

``--baseline KEY=VALUE`` compares every row with the row that has KEY=VALUE and the same other
``--by`` values, on the partitions both have (same sentences, refused otherwise): mean difference
with its bootstrap CI and three paired p-values: bootstrap, Wilcoxon signed-rank and t-test (the
MoM paper's); ``--test`` picks the one that decides significance after Holm's correction across
the table (default wilcoxon: exact and distribution-free, but it cannot reach p < 0.05 with fewer
than 6 pairs; the bootstrap p is anti-conservative with so few). ``--paper METHOD:COLUMN`` prints a paper-style table
per metric (``--format md|latex|csv``); ``--plots DIR`` writes the figures (PNG + SVG);
``--wandb`` logs a summary run with the table and figures into the sweep's W&B group.
A tuning sweep (``experiment=tune_*``) also gets its trials listed and plotted.
``--select-on-dev KEY`` keeps, per row and partition, the run whose KEY has the best dev score
(SingleAux's auxiliary); ``--choose KEY`` prints, per row, the KEY value with the best mean dev
score over the partitions (a tuning grid's choice, e.g. each loss's head_lr); ``--average-over
KEY`` adds macro and pooled-micro averages over KEY (main corpora, the MUNCHABLES paper's
Table 2); auxiliary test scores are ``test_aux.<corpus>.…``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ner_lightning import run_store
from ner_lightning.grid_time import time_spent
from ner_lightning.report.checks import duplicates, pooled_differences, unknown_baseline, unknown_keys
from ner_lightning.report.runs import choose_on_dev, load_runs, load_trials, mixed_settings, select_on_dev
from ner_lightning.report.tables import (
    baseline_row_value,
    comparison_table,
    comparisons,
    corpus_average_table,
    paper_table,
    summary_table,
)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m ner_lightning.report", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("dirs", nargs="*", type=Path, help="sweep folders or their exports (not with --claims)")
    _claims_options(ap.add_argument_group("claims"))
    _table_options(ap.add_argument_group("tables and figures"))
    _statistics_options(ap.add_argument_group("statistics"))
    ap.add_argument("--strict", action="store_true", help="stop at an unreadable results.json instead of skipping it")
    return ap


def _claims_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--claims",
        type=Path,
        metavar="FILE",
        help="judge the claims of a YAML file by the rule of "
        "ner_lightning/report/claims.py and print the claims table (--format md or latex)",
    )
    group.add_argument(
        "--only",
        metavar="ID[,ID]",
        type=lambda s: s.split(","),
        help="with --claims: print just these claims' rows (an id's first word, e.g. 6a, or its number, "
        "6 for 6a-6c), each judged with its whole family",
    )
    group.add_argument(
        "--update",
        type=Path,
        metavar="DOC",
        action="append",
        help="with --claims: rewrite the claims tables of this Markdown file in place (blocks "
        "'<!-- claims table: FILE[ only=ID,ID] -->' ... '<!-- end claims table -->'); repeatable",
    )


def _table_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--by", default="loss,size", help="comma-separated config keys that define a row")
    group.add_argument("--metrics", default="test.micro.f1,test.macro.f1")
    group.add_argument("--baseline", metavar="KEY=VALUE", help="paired comparisons against this row, e.g. loss=ce")
    group.add_argument("--paper", metavar="METHOD:COLUMN", help="paper-style table, e.g. loss:size")
    group.add_argument("--format", choices=("md", "latex", "csv"), default="md", help="format of --paper tables")
    group.add_argument("--plots", type=Path, metavar="DIR", help="write the figures the sweep allows here")
    group.add_argument(
        "--select-on-dev",
        metavar="KEY",
        help="keep, per row and partition, the run whose KEY value "
        "has the best dev monitor (e.g. aux: SingleAux's auxiliary chosen on main dev)",
    )
    group.add_argument(
        "--choose",
        metavar="KEY",
        help="a tuning grid's choice: per row (--by without KEY), the KEY "
        "value with the best mean dev monitor over the partitions",
    )
    group.add_argument(
        "--average-over",
        metavar="KEY",
        help="also average the first metric over KEY's values per "
        "partition (e.g. dataset: macro and pooled micro averages over main corpora)",
    )


def _statistics_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--alpha", type=float, default=0.05, help="significance level (after Holm's correction)")
    group.add_argument(
        "--test",
        choices=("wilcoxon", "bootstrap", "ttest"),
        default="wilcoxon",
        help="the paired test that decides significance (all three p-values are printed)",
    )
    group.add_argument(
        "--wandb",
        choices=("offline", "online"),
        help="log a summary run (table + figures) into the "
        "sweep's W&B group, offline by default: `wandb sync` uploads it later",
    )
    group.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples")
    group.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    group.add_argument(
        "--pool",
        default="",
        metavar="KEY[,KEY]",
        help="let a row average over runs that differ in "
        "these settings (refused otherwise: a row's runs may differ only in partition and seeds)",
    )


def _refuse_guesses(runs: list[dict], by: list[str], metrics: list[str], pool: list[str], baseline: str | None) -> None:
    """Stop, naming what is wrong, rather than print a table that mixes what it should not."""
    problems = unknown_keys(runs, by, metrics) + unknown_baseline(runs, baseline, by)
    if not problems:  # settings first: runs that differ in one are not the same run
        problems = pooled_differences(runs, by, pool)
        if problems:
            problems.append("add the key to --by (a row per value), or --pool KEY to average over it")
    if not problems:
        problems = duplicates(runs, by)
        if problems:
            problems.insert(
                0,
                "the same run in two folders (one row, partition, initialisation and settings); a row "
                "counts each run once, so report the folders that hold one copy of each run:",
            )
    if problems:
        raise SystemExit("\n".join(problems))


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.claims:
        from ner_lightning.report.claims_table import claims_table, update_tables

        for doc in args.update or []:
            print(f"{doc}: {update_tables(doc, args.claims)} claims tables of {args.claims.name} rewritten")
        if not args.update:
            print(claims_table(args.claims, "latex" if args.format == "latex" else "md", args.plots, args.only))
        return
    if not args.dirs:
        raise SystemExit("give the sweep folders to report on (or --claims FILE)")
    args.dirs = [p for d in args.dirs for p in (run_store.expand(str(d)) or [d])]  # patterns into run stores
    runs, failed = load_runs(args.dirs, args.strict)
    if not runs and not failed:
        raise SystemExit(f"no results.json under {', '.join(map(str, args.dirs))}")
    by, metrics = args.by.split(","), args.metrics.split(",")
    pool = [k for k in args.pool.split(",") if k] + [k for k in (args.select_on_dev, args.choose) if k]
    if args.select_on_dev:
        runs, chosen = select_on_dev(runs, args.select_on_dev, by)
        print(f"Chosen on dev ({args.select_on_dev}):\n" + "\n".join(f"- {c}" for c in chosen) + "\n")
    _refuse_guesses(runs, by, metrics, pool, args.baseline)
    print(summary_table(runs, by, metrics, args.resamples, args.seed))
    spent = time_spent(runs)
    if spent:
        print(f"\n{spent[0].upper()}{spent[1:]}")
    if args.choose:
        print(f"\nChosen on dev ({args.choose}; mean best-dev monitor over the partitions every value ran on):")
        for c in choose_on_dev(runs, args.choose, by):
            means = ", ".join(f"{v} {m:.4f}" for v, m in c["means"].items())
            print(f"- {' '.join(c['row'])}: {c['key']}={c['best']} ({means}; partitions {', '.join(c['partitions'])})")
    for note in mixed_settings(runs, by):
        print(f"\n{note}")
    if args.average_over:
        print("\n" + corpus_average_table(runs, by, metrics[0], args.average_over, args.resamples, args.seed))
    base_value = _print_comparisons(args, runs, by, metrics, pool)
    trials = load_trials(args.dirs)
    if trials:
        _print_trials(trials)
    written = []
    if args.plots:
        from ner_lightning.report.plots import render

        written = render(runs, args.plots, by[0], metrics[0], base_value, args.resamples, args.seed, trials)
        print(f"\n{len(written)} figure files in {args.plots}: " + ", ".join(sorted({p.stem for p in written})))
    if args.wandb and runs:
        from ner_lightning.report.wandb_summary import publish

        where = (
            Path(args.dirs[0]) if Path(args.dirs[0]).is_dir() else Path("multirun") / "report"
        )  # not into a store's path
        folder = publish(runs, by, metrics, written, where, args.wandb, args.resamples, args.seed)
        print(f"\nW&B summary run ({args.wandb}): {folder}")
    if failed:
        print(f"\n{len(failed)} failed cell(s):")
        for f in failed:
            print(f"- {f.parent.name}: {json.loads(run_store.read_text(f))['error'].splitlines()[0]}")


def _print_comparisons(
    args: argparse.Namespace, runs: list[dict], by: list[str], metrics: list[str], pool: list[str]
) -> str | None:
    """The paired comparisons against ``--baseline`` and the ``--paper`` tables; the baseline row's value."""
    if args.baseline:
        print(f"\nPaired comparisons against {args.baseline} (pairs = same partition sentences and init seed):\n")
        found = comparisons(runs, by, metrics, args.baseline, args.resamples, args.seed, args.test, pool)
        print(comparison_table(found, by, args.baseline, args.alpha, args.test))
    base_value = baseline_row_value(runs, args.baseline) if args.baseline else None
    if args.paper:
        method_key, _, column_key = args.paper.partition(":")
        for m in metrics:
            print(
                f"\n{m} — mean with bootstrap SE; best bold, second underlined"
                + (f"; † differs from {base_value} ({args.test}, Holm, α={args.alpha})" if base_value else "")
                + ":\n"
            )
            print(
                paper_table(
                    runs,
                    method_key,
                    column_key,
                    m,
                    base_value,
                    args.alpha,
                    args.resamples,
                    args.seed,
                    args.format,
                    args.test,
                    pool,
                )
            )
    return base_value


def _print_trials(trials: list[dict]) -> None:
    print(f"\nTuning trials (objective: mean best-dev {trials[0]['monitor']} over the partitions):\n")
    print("| trial | overrides | per partition | mean |\n|---|---|---|---|")
    for t in trials:
        per = ", ".join(f"{p}: {v:.4f}" for p, v in t["partitions"].items())
        print(f"| {t['trial']} | {' '.join(t['overrides'])} | {per} | {t['mean']:.4f} |")
    best = max(trials, key=lambda t: t["mean"])
    print(f"\nbest: trial {best['trial']} ({' '.join(best['overrides'])}) = {best['mean']:.4f}")


if __name__ == "__main__":
    main()

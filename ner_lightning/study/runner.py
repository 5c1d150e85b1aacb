"""Studies that run and decide themselves: ``ner-lightning study CLAIMS.yaml [--sequential] [OVERRIDE ...]``.

A claims file (``ner_lightning.report.claim_spec``) whose claims name a ``grid`` instead of ``runs``,
plus the grids and the study's plan::

    study:
      partitions: 10                 # reporting partitions 0..9 (first_partition: 0)
      stages: [4, 7, 10]             # --sequential: partitions judged at each look, fixed before the first run
      spending: obrien_fleming       # or pocock (Lan-DeMets alpha spending, report/sequential.py)
      boundaries: t_simulated        # exact for the t statistic (default); z_nominal: the earlier rule
      exclusions: []                 # partitions left out, each {partition: N, why: ...}, declared before
      alpha_recycling: none          # α of a decided claim is not passed to the rest of its family
      alpha_split: {AUC-2T: 0.03, MoM: 0.02}   # optional: each family's α (default: α each)
      robust: wilcoxon               # optional: a second analysis beside the t-test
    grids:
      auc2t_vs_ce: [experiment=replication_auc2t, "loss=ce,auc2t", size=50, "init_seed=42,43,44"]
    claims:
    - {id: 1, grid: auc2t_vs_ce, key: loss, method: auc2t, baseline: ce, metric: test.micro.f1, relation: ">", ...}

For each look, every grid that an undecided claim reads is run as one multirun
(``python -m ner_lightning.run -m GRID... partition=0,…,n-1 hydra.sweep.dir=STUDY/GRID`` plus the
command's overrides, e.g. ``hydra/launcher=parallel``): the sweep's manifest and resume mean that
only cells without a result of the same identity run, so a study stopped anywhere resumes by
running the same command. Then the claims are judged on the look's partitions, each on its
paper's registered scorer (``claim_spec.scored_metric``):

* fixed design (default): one look at ``partitions``, the symmetric rule of the claims module
  (Holm over each family's 2m directions);
* ``--sequential``: at look k each direction of each claim is tested against a group-sequential
  boundary spending α / 2m (Bonferroni over the family's 2m directions) by information fraction
  n_k / n_K, exact for the t statistic (``report/sequential.py``); a claim is decided the first
  time a direction crosses, a grid stops growing when every claim reading it is decided. A claim
  undecided at the last look is labelled by the claims module's rule
  (:func:`~ner_lightning.report.claims.undecided_verdict`) on its interval at that look's level.

``--register`` fixes the design before any cell runs (``ner_lightning.study.registration``): a
registered study refuses cells from a dirty tree and a changed file, and ``--show`` says
"registered at …, before its first cell" only when git and the cells' times prove it.

The plan (α, stages, spending, the claims and grids) is written to ``STUDY/study.json`` before
the first cell; a later run with another plan is refused — a sequential study is valid only if
its looks were fixed before its data were seen. Every look's statistics, levels and α spent are
recorded there and printed with the table. ``--show`` launches nothing: it judges the recorded
looks again from the folder's cells (on disk or exported as ``GRID.jsonl.xz``) as they ran (the
decisions must be the record's), then as registered with the deviations found since
(``study_plan.read_deviations``), and prints that table, the as-run one where it differs, the study-wide
error and whether the registered rule judged it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from ner_lightning.report.claim_spec import family_alpha, family_directions, load_claims, scored_metric
from ner_lightning.report.study_diagnostics import diagnose
from ner_lightning.report.study_table import show, table, update_block
from ner_lightning.results import write_json_atomic
from ner_lightning.study import registration
from ner_lightning.study.looks import decisions, run_looks
from ner_lightning.study.plan import look_levels, look_partitions, plan_of, read_deviations, study_wide_error
from ner_lightning.sweep import cells

RECORD = "study.json"
SCORING = "paper"  # a study judges each claim on its paper's registered scorer (claim_spec.scored_metric)


def study_dir(path: Path, settings: dict) -> Path:
    """Where the study's sweeps and record go: ``study.dir`` (relative to the working directory,
    as ``hydra.sweep.dir`` is), else ``multirun/study/<claims file name>``."""
    return Path(settings["study"].get("dir") or Path("multirun") / "study" / Path(path).stem)


def _partitions_in(folder: Path) -> set[int]:
    """The partitions of the cells a sweep folder's manifest already holds."""
    manifest = cells.read_manifest(folder) or {"cells": []}
    return {
        int(o.split("=", 1)[1]) for cell in manifest["cells"] for o in cell["overrides"] if o.startswith("partition=")
    }


def launch(grid: str, overrides: list[str], partitions: list[int], folder: Path, extra: list[str]) -> None:
    """One multirun of ``grid`` over ``partitions`` into ``folder``, resumed if it exists. A
    rerun of the study reaches its early looks again with later partitions in the folder: they
    stay in the command (a sweep folder resumes only the grid it holds or a larger one; their
    cells are done, and the look judges its own partitions only)."""
    partitions = sorted(set(partitions) | _partitions_in(folder))
    command = [
        sys.executable,
        "-m",
        "ner_lightning.run",
        "-m",
        *overrides,
        f"partition={','.join(map(str, partitions))}",
        f"hydra.sweep.dir={folder}",
        *extra,
    ]
    print(f"study: grid {grid}, partitions {partitions[0]}–{partitions[-1]}: {' '.join(command[3:])}", flush=True)
    code = subprocess.run(command).returncode
    if code:
        raise SystemExit(
            f"study: the sweep of grid {grid} ({folder}) exited with {code}: its failed cells are "
            "named above — fix the cause and run the same study command again (done cells are kept)"
        )


def _plan_and_record(path: Path, record_path: Path, sequential: bool, replay: bool) -> tuple[dict, dict | None]:
    """The study's plan and its earlier record, if any; another plan than the record's is refused
    (a replay follows the recorded design), as is a replay without a record."""
    recorded = json.loads(record_path.read_text()) if record_path.exists() else None
    if replay and recorded:
        sequential = recorded["plan"]["sequential"]
    plan = plan_of(path, sequential)
    if recorded:  # a record from before the t-exact boundaries ran with the z-nominal ones
        recorded["plan"] = {"boundaries": "z_nominal", **recorded["plan"]}
    if recorded and recorded["plan"] != plan:
        changed = ", ".join(k for k in plan if recorded["plan"].get(k) != plan[k])
        raise SystemExit(
            f"{record_path}: this study ran with another plan ({changed} differ). A study's looks, "
            "claims and α are fixed before its first run; start a new study folder (study.dir)"
        )
    if replay and not recorded:
        raise SystemExit(f"{record_path}: no study record to replay — run the study first (without --show)")
    return plan, recorded


def run_study(
    path: Path,
    sequential: bool = False,
    extra: list[str] | None = None,
    folder: Path | None = None,
    replay: bool = False,
) -> dict:
    """Run the study of a claims file (module docstring), in ``folder`` if given; ``replay``: judge
    the recorded looks again from the folder's cells, launching and writing nothing (:func:`replay_study`)."""
    path = Path(path)
    settings, claims = load_claims(path)
    folder = Path(folder) if folder else study_dir(path, settings)
    if replay:
        return replay_study(path, folder)
    record_path = folder / RECORD
    plan, recorded = _plan_and_record(path, record_path, sequential, False)
    if recorded and recorded.get("scoring", "as_written") != SCORING:
        raise SystemExit(
            f"{record_path}: this study ran judging each claim's metric as written, not on its "
            "paper's scorer; it cannot go on under another rule: `--show` replays it both ways"
        )
    registered = registration.read(path)
    if registered:
        registration.check_before_running(path, registered, plan)
    folder.mkdir(parents=True, exist_ok=True)
    record = {"claims_file": str(path), "plan": plan, "scoring": SCORING, "looks": [], "verdicts": {}}
    write_json_atomic(record_path, record)

    def launch_grids(grids: list[str], partitions: list[int]) -> None:
        for grid in grids:
            launch(grid, list(settings["grids"][grid]), partitions, folder / grid, list(extra or []))

    run_looks(
        record,
        settings,
        claims,
        folder,
        len(plan["stages"]),
        SCORING,
        lambda: write_json_atomic(record_path, record),
        launch_grids,
        robust=plan.get("robust"),
    )
    return record


def replay_study(path: Path, folder: Path) -> dict:
    """The recorded study judged again from its cells, launching nothing: first as it ran (its
    record's scoring; the decisions must be the record's, else the cells changed), then as
    registered — each claim on its paper's scorer, with the Δ sources and exploratory analyses of
    a deviations file (``FILE.deviations.yaml``) — and the registration's proof and rule."""
    settings, claims = load_claims(path)
    plan, recorded = _plan_and_record(path, folder / RECORD, False, True)
    assert recorded is not None  # _plan_and_record refuses a replay without a record
    as_run_scoring = recorded.get("scoring", "as_written")  # records from before the scorer was applied
    count = len(recorded["looks"])
    judged = {"claims_file": str(path), "plan": plan, "scoring": as_run_scoring, "looks": [], "verdicts": {}}
    run_looks(judged, settings, claims, folder, count, as_run_scoring)
    if decisions(judged) != decisions(recorded):
        raise SystemExit(
            f"{folder / RECORD}: the cells judged again give {judged['verdicts']}, the record says "
            f"{recorded['verdicts']}: the cells changed since the study ran"
        )
    deviations = read_deviations(path)
    record: dict[str, Any] = {"claims_file": str(path), "plan": plan, "scoring": SCORING, "looks": [], "verdicts": {}}
    run_looks(
        record,
        settings,
        [{**c, **deviations.get("claims", {}).get(str(c["id"]), {})} for c in claims],
        folder,
        count,
        SCORING,
        robust=plan.get("robust") or deviations.get("exploratory_robust"),
    )
    if any(scored_metric(c, settings, as_run_scoring) != scored_metric(c, settings, SCORING) for c in claims):
        record["as_run"] = recorded  # judged on other metrics than the registered ones
    record["deviations"] = deviations.get("note")
    record["diagnostics"] = diagnose(record, claims, folder, lambda n: look_partitions(plan, n))
    record["study_wide_error"] = study_wide_error(plan, list(family_directions(claims)))
    registered = registration.read(path)
    record["registration"] = registration.provenance(path, registered, folder) if registered else None
    record["rule"] = registration.rule_check(path, registered, folder, record["verdicts"]) if registered else None
    return record


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="ner-lightning study", description=__doc__.split("\n\n")[0])
    ap.add_argument("claims", type=Path, help="a claims file with `grids`, `grid` per claim and a `study` plan")
    ap.add_argument("--sequential", action="store_true", help="judge at the plan's stages, stop when decided")
    ap.add_argument(
        "--dir", type=Path, help="the study folder (default: the file's study.dir, else multirun/study/<file name>)"
    )
    ap.add_argument(
        "--show",
        action="store_true",
        help="launch nothing: judge the recorded study's cells again, "
        "check them against its record and print the table",
    )
    ap.add_argument(
        "--register",
        action="store_true",
        help="fix the committed file's design before any cell "
        "runs: write its registration record (commit it, then run the study)",
    )
    ap.add_argument(
        "--update",
        type=Path,
        metavar="DOC",
        help="with --show: rewrite the block '<!-- study table: "
        "FILE -->' ... '<!-- end study table -->' of this Markdown file with what --show prints",
    )
    ap.add_argument("overrides", nargs="*", help="Hydra overrides for every grid (e.g. hydra/launcher=parallel)")
    args = ap.parse_intermixed_args(argv)  # overrides before or after --sequential
    if not args.claims.is_file():
        raise SystemExit(f"{args.claims}: no such claims file")
    if args.register:
        settings, claims = load_claims(args.claims)
        plan = plan_of(args.claims, True)
        families = family_directions(claims)
        levels = {name: look_levels(plan, tests, family_alpha(plan, name)) for name, tests in families.items()}
        print(
            registration.register(
                args.claims,
                plan,
                levels,
                args.dir or study_dir(args.claims, settings),
                study_wide_error(plan, list(families)),
            )
        )
        return
    record = run_study(args.claims, args.sequential, args.overrides, args.dir, args.show)
    print(show(record) if args.show else table(record))
    if args.show and args.update:
        update_block(args.update, str(args.claims), show(record))

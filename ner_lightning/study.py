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
    grids:
      auc2t_vs_ce: [experiment=replication_auc2t, "loss=ce,auc2t", size=50, "init_seed=42,43,44"]
    claims:
    - {id: 1, grid: auc2t_vs_ce, key: loss, method: auc2t, baseline: ce, metric: test.micro.f1, relation: ">", ...}

For each look, every grid that an undecided claim reads is run as one multirun
(``python -m ner_lightning.run -m GRID... partition=0,…,n-1 hydra.sweep.dir=STUDY/GRID`` plus the
command's overrides, e.g. ``hydra/launcher=parallel``): the sweep's manifest and resume mean that
only cells without a result of the same identity run, so a study stopped anywhere resumes by
running the same command. Then the claims are judged on the look's partitions:

* fixed design (default): one look at ``partitions``, the symmetric rule of the claims module
  (Holm over each family's 2m directions);
* ``--sequential``: at look k each direction of each claim is tested against a group-sequential
  boundary spending α / 2m (Bonferroni over the family's 2m directions) by information fraction
  n_k / n_K, exact for the t statistic (``report/sequential.py``); a claim is decided the first
  time a direction crosses, a grid stops growing when every claim reading it is decided. A claim
  undecided at the last look is *smaller than reported* or *underpowered* by the claims module's
  rule (:func:`~ner_lightning.report.claims.undecided_verdict`), the latter at the effect the last
  look detects with 80 % power at its level.

``--register`` fixes the design before any cell runs (``ner_lightning.registration``): a
registered study refuses cells from a dirty tree and a changed file, and ``--show`` says
"registered at …, before its first cell" only when git and the cells' times prove it.

The plan (α, stages, spending, the claims and grids) is written to ``STUDY/study.json`` before
the first cell; a later run with another plan is refused — a sequential study is valid only if
its looks were fixed before its data were seen. Every look's statistics, levels and α spent are
recorded there and printed with the table. ``--show`` launches nothing: it judges the recorded
looks again from the folder's cells (on disk or exported as ``GRID.jsonl.xz``), checks the
verdicts against the record and prints the table.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

from ner_lightning import registration
from ner_lightning.report.claim_spec import family, family_directions, grids_of, load_claims
from ner_lightning.report.claims import Judged, decide, judge, undecided_verdict, verdict
from ner_lightning.report.stats import detectable_effect
from ner_lightning.report.sequential import BOUNDARIES, SPENDING, nominal_levels, spent, t_boundaries, t_levels
from ner_lightning.results import write_json_atomic
from ner_lightning.sweep import cells

RECORD = "study.json"


def plan_of(path: Path, sequential: bool) -> dict:
    """The study's plan from its claims file, checked: looks (partitions per look), spending, α,
    and a hash of the claims and grids it judges."""
    settings, claims = load_claims(path)
    spec = settings["study"]
    missing = [c["id"] for c in claims if "grid" not in c]
    if missing:
        raise SystemExit(f"{path}: claims {', '.join(map(str, missing))} name no `grid` — a study runs the grids "
                         "its claims need (`grids:` and `grid:` per claim)")
    for name, overrides in settings["grids"].items():
        if not isinstance(overrides, list) or not all(isinstance(o, str) and "=" in o for o in overrides):
            raise SystemExit(f"{path}: grids.{name} must be a list of Hydra overrides (key=value strings)")
        if any(o.split("=", 1)[0].lstrip("+~") == "partition" for o in overrides):
            raise SystemExit(f"{path}: grids.{name} sets partition — the study sets the partitions of each look")
    total = int(spec.get("partitions", 10))
    stages = [int(s) for s in spec.get("stages") or [total]] if sequential else [total]
    if sequential and (stages[-1] != total or stages[0] < 2 or any(b <= a for a, b in zip(stages, stages[1:]))):
        raise SystemExit(f"{path}: study.stages {stages} must increase from at least 2 to study.partitions ({total})")
    if total < 2:
        raise SystemExit(f"{path}: study.partitions must be at least 2 (a verdict needs 2 paired partitions)")
    kind = str(spec.get("spending", "obrien_fleming"))
    if kind not in SPENDING:
        raise SystemExit(f"{path}: study.spending {kind!r} is not one of {SPENDING}")
    rule = str(spec.get("boundaries", "t_simulated"))
    if rule not in BOUNDARIES:
        raise SystemExit(f"{path}: study.boundaries {rule!r} is not one of {BOUNDARIES}")
    judged_spec = json.dumps({"claims": claims, "grids": settings["grids"]}, sort_keys=True, ensure_ascii=False)
    plan = {"sequential": sequential, "alpha": settings["alpha"], "partitions": total, "stages": stages,
            "first_partition": int(spec.get("first_partition", 0)), "spending": kind if sequential else None,
            "claims_sha256": hashlib.sha256(judged_spec.encode()).hexdigest(), "boundaries": rule}
    if sequential and rule == "t_simulated":
        plan["simulation"] = {"studies": int(spec.get("simulation_studies", 2_000_000)),
                              "seed": int(spec.get("simulation_seed", 0))}
    plan.update(_declared(path, spec))
    return plan


def _declared(path: Path, spec: dict) -> dict:
    """The exclusions and α recycling a study file declares (only when it declares them: a file
    from before they were declared keeps its plan)."""
    out = {}
    if "exclusions" in spec:
        exclusions = spec["exclusions"] or []
        if not all(isinstance(e, dict) and isinstance(e.get("partition"), int) and e.get("why") for e in exclusions):
            raise SystemExit(f"{path}: study.exclusions must be a list of {{partition: N, why: ...}}")
        out["exclusions"] = sorted(int(e["partition"]) for e in exclusions)
    if "alpha_recycling" in spec:
        if spec["alpha_recycling"] != "none":
            raise SystemExit(f"{path}: study.alpha_recycling {spec['alpha_recycling']!r}: only `none` is supported "
                             "(a decided claim's α stays with it; the rest of its family keeps its own level)")
        out["alpha_recycling"] = "none"
    return out


def look_levels(plan: dict, tests: int) -> list[float]:
    """The one-sided p-levels of each look for a family of ``tests`` directions (α / tests each):
    the t-exact simulated boundaries, or the earlier z-nominal ones (``plan["boundaries"]``)."""
    stages, alpha = plan["stages"], plan["alpha"] / tests
    if plan["boundaries"] == "z_nominal":
        return nominal_levels([s / stages[-1] for s in stages], alpha, plan["spending"])
    sim = plan["simulation"]
    return t_levels(stages, t_boundaries(stages, alpha, plan["spending"], sim["studies"], sim["seed"]))


def look_partitions(plan: dict, n: int) -> list[int]:
    """The first ``n`` partitions from ``first_partition`` that the plan does not exclude."""
    excluded, out, p = set(plan.get("exclusions", [])), [], plan["first_partition"]
    while len(out) < n:
        if p not in excluded:
            out.append(p)
        p += 1
    return out


def study_dir(path: Path, settings: dict) -> Path:
    """Where the study's sweeps and record go: ``study.dir`` (relative to the working directory,
    as ``hydra.sweep.dir`` is), else ``multirun/study/<claims file name>``."""
    return Path(settings["study"].get("dir") or Path("multirun") / "study" / Path(path).stem)


def _partitions_in(folder: Path) -> set[int]:
    """The partitions of the cells a sweep folder's manifest already holds."""
    manifest = cells.read_manifest(folder) or {"cells": []}
    return {int(o.split("=", 1)[1]) for cell in manifest["cells"] for o in cell["overrides"]
            if o.startswith("partition=")}


def launch(grid: str, overrides: list[str], partitions: list[int], folder: Path, extra: list[str]) -> None:
    """One multirun of ``grid`` over ``partitions`` into ``folder``, resumed if it exists. A
    rerun of the study reaches its early looks again with later partitions in the folder: they
    stay in the command (a sweep folder resumes only the grid it holds or a larger one; their
    cells are done, and the look judges its own partitions only)."""
    partitions = sorted(set(partitions) | _partitions_in(folder))
    command = [sys.executable, "-m", "ner_lightning.run", "-m", *overrides,
               f"partition={','.join(map(str, partitions))}", f"hydra.sweep.dir={folder}", *extra]
    print(f"study: grid {grid}, partitions {partitions[0]}–{partitions[-1]}: {' '.join(command[3:])}", flush=True)
    code = subprocess.run(command).returncode
    if code:
        raise SystemExit(f"study: the sweep of grid {grid} ({folder}) exited with {code}: its failed cells are "
                         "named above — fix the cause and run the same study command again (done cells are kept)")


def _judge_look(claims: list[dict], settings: dict, folder: Path, partitions: list[int]) -> list[Judged]:
    labels = {str(p) for p in partitions}
    loaded: dict = {}
    return [judge({**c, "runs": grids_of(c)}, settings["alpha"], settings["resamples"], settings["seed"], folder,
                  loaded=loaded, partitions=labels) for c in claims]


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
        raise SystemExit(f"{record_path}: this study ran with another plan ({changed} differ). A study's looks, "
                         "claims and α are fixed before its first run; start a new study folder (study.dir)")
    if replay and not recorded:
        raise SystemExit(f"{record_path}: no study record to replay — run the study first (without --show)")
    return plan, recorded


def run_study(path: Path, sequential: bool = False, extra: list[str] | None = None, folder: Path | None = None,
              replay: bool = False) -> dict:
    """Run the study of a claims file (module docstring), in ``folder`` if given; ``replay``: judge
    the recorded looks again from the folder's cells, launching and writing nothing."""
    path = Path(path)
    settings, claims = load_claims(path)
    folder = Path(folder) if folder else study_dir(path, settings)
    record_path = folder / RECORD
    plan, recorded = _plan_and_record(path, record_path, sequential, replay)
    registered = registration.read(path)
    if registered and not replay:
        registration.check_before_running(path, registered, plan)
    record = {"claims_file": str(path), "plan": plan, "looks": [], "verdicts": {}}
    if not replay:
        folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(record_path, record)
    alpha, stages = plan["alpha"], plan["stages"]
    directions = family_directions(claims)  # as decide() counts a family
    open_ids = [str(c["id"]) for c in claims if not c.get("vacuous")]  # a vacuous claim is not judged
    levels: dict[int, list[float]] = {}
    for k, n_k in enumerate(stages[:len(recorded["looks"])] if replay else stages):  # a replay: the recorded looks
        partitions = look_partitions(plan, n_k)
        needed = [c for c in claims if str(c["id"]) in open_ids]
        if not replay:
            for grid in dict.fromkeys(g for c in needed for g in grids_of(c)):
                launch(grid, list(settings["grids"][grid]), partitions, folder / grid, list(extra or []))
        judged = _judge_look(needed, settings, folder, partitions)
        look = {"look": k + 1, "partitions": n_k, "claims": {}}
        if plan["sequential"]:
            for j in judged:
                tests = directions[family(j.claim)]
                if tests not in levels:  # the boundary of a family of this size
                    levels[tests] = look_levels(plan, tests)
                look["claims"][str(j.claim["id"])], final = _sequential_look(j, plan, k, levels[tests][k], tests)
                if final:
                    record["verdicts"][str(j.claim["id"])] = final
                    open_ids.remove(str(j.claim["id"]))
        else:
            decide(judged, alpha)
            for j in judged:
                look["claims"][str(j.claim["id"])] = {"n": j.n, "seeds": list(j.seeds), "mean": j.mean, "p": j.p,
                                                      "p_reverse": j.p_reverse, "p_holm": j.p_holm}
                record["verdicts"][str(j.claim["id"])] = {"verdict": j.verdict, "look": 1, "partitions": n_k}
            open_ids = []
        record["looks"].append(look)
        if not replay:
            write_json_atomic(record_path, record)
        if not open_ids:
            break
    if replay and _decisions(record) != _decisions(recorded):
        raise SystemExit(f"{record_path}: the cells judged again give {record['verdicts']}, the record says "
                         f"{recorded['verdicts']}: the cells changed since the study ran")
    if replay:
        record["registration"] = registration.provenance(path, registered, folder) if registered else None
    return record


def _sequential_look(j: Judged, plan: dict, k: int, level: float, tests: int) -> tuple[dict, dict | None]:
    """One claim at look ``k``: its statistics against the look's ``level``, and its verdict when
    a direction crossed or this is the last look (then undecided: what of the paper's Δ?)."""
    stages = plan["stages"]
    decided = None if (v := verdict(j.p, j.p_reverse, level)) == "inconclusive" else v
    stats = {"n": j.n, "seeds": list(j.seeds), "mean": j.mean, "t_interval": [j.t_low, j.t_high], "p": j.p,
             "p_reverse": j.p_reverse, "level": level,
             "alpha_spent": tests * spent(stages[k] / stages[-1], plan["alpha"] / tests, plan["spending"]),
             "decision": decided}
    if not decided and k < len(stages) - 1:
        return stats, None
    undecided = undecided_verdict(j.claim, j.t_low, j.t_high, detectable_effect(j.sd, j.n, level, 1))
    return stats, {"verdict": verdict(j.p, j.p_reverse, level, undecided), "look": k + 1, "partitions": stages[k]}


def _decisions(record: dict) -> dict:
    """Each claim's look and decision (replicated / not replicated / undecided): what the cells
    decide; the label of an undecided claim follows the claims module's current rule."""
    undecided = ("inconclusive", "underpowered", "smaller than reported")
    return {cid: (v["look"], "undecided" if v["verdict"] in undecided else v["verdict"])
            for cid, v in record["verdicts"].items()}


def table(record: dict) -> str:
    """The study's verdicts, the look each was decided at and the plan, as Markdown."""
    plan = record["plan"]
    rule = ("t-exact boundaries (simulated null studies)" if plan.get("boundaries") == "t_simulated" else
            "z-nominal boundaries")
    lines = [f"study of {record['claims_file']}: " + (
        f"sequential, looks at {plan['stages']} partitions, {plan['spending']} spending of α = {plan['alpha']} "
        f"(Bonferroni over each family's 2m directions), {rule}" if plan["sequential"] else
        f"fixed design, {plan['partitions']} partitions, α = {plan['alpha']} (Holm over each family's 2m directions)"),
        *([record["registration"]] if record.get("registration") else []),
        "", "| claim | verdict | look (partitions) | n (× seeds) | mean Δ | p | p reverse | level | α spent |",
        "|---|---|---|---|---|---|---|---|---|"]
    last = record["looks"][-1] if record["looks"] else {"claims": {}}
    still_open = {cid: {"verdict": f"open: next look at {plan['stages'][last['look']]} partitions",
                        "look": last["look"], "partitions": last["partitions"]}
                  for cid in last["claims"] if cid not in record["verdicts"]}
    for cid, v in {**record["verdicts"], **still_open}.items():
        s = record["looks"][v["look"] - 1]["claims"][cid]
        seeds = s["seeds"][1]
        lines.append(f"| {cid} | {v['verdict']} | {v['look']} ({v['partitions']}) | {s['n']}"
                     + (f" × {seeds}" if seeds > 1 else "") + f" | {s['mean']:+.4f} | {s['p']:.4g} | "
                     f"{s['p_reverse']:.4g} | " + (f"{s['level']:.4g} | {s['alpha_spent']:.4g} |" if "level" in s
                                                   else f"Holm {s['p_holm']:.4g} | {plan['alpha']} |"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="ner-lightning study", description=__doc__.split("\n\n")[0])
    ap.add_argument("claims", type=Path, help="a claims file with `grids`, `grid` per claim and a `study` plan")
    ap.add_argument("--sequential", action="store_true", help="judge at the plan's stages, stop when decided")
    ap.add_argument("--dir", type=Path, help="the study folder (default: the file's study.dir, else "
                    "multirun/study/<file name>)")
    ap.add_argument("--show", action="store_true", help="launch nothing: judge the recorded study's cells again, "
                    "check them against its record and print the table")
    ap.add_argument("--register", action="store_true", help="fix the committed file's design before any cell "
                    "runs: write its registration record (commit it, then run the study)")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides for every grid (e.g. hydra/launcher=parallel)")
    args = ap.parse_intermixed_args(argv)  # overrides before or after --sequential
    if not args.claims.is_file():
        raise SystemExit(f"{args.claims}: no such claims file")
    if args.register:
        settings, claims = load_claims(args.claims)
        plan = plan_of(args.claims, True)
        levels = {t: look_levels(plan, t) for t in set(family_directions(claims).values())}
        print(registration.register(args.claims, plan, levels, args.dir or study_dir(args.claims, settings)))
        return
    print(table(run_study(args.claims, args.sequential, args.overrides, args.dir, args.show)))


if __name__ == "__main__":
    main()

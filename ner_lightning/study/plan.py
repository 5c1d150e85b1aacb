"""A study's plan (``study:`` of a study file, ``ner_lightning.study``): its looks, α and how each
family spends it, the partitions of each look, the study-wide error of the design, and the
deviations from it found after its results."""

from __future__ import annotations

import hashlib
import json
from itertools import pairwise
from pathlib import Path

import numpy as np
import yaml

from ner_lightning.report.claim_spec import (
    check_delta_source,
    family_alpha,
    family_directions,
    load_claims,
    paper_distance,
)
from ner_lightning.report.sequential import (
    BOUNDARIES,
    SPENDING,
    detectable,
    nominal_levels,
    power,
    t_boundaries,
    t_levels,
)

POWER_TARGET = 0.8  # a registered claim's detectable Δ: the one found with this power

ROBUST = ("wilcoxon",)  # the second analyses a study may register (report/claims.wilcoxon_p)


def plan_of(path: Path, sequential: bool) -> dict:
    """The study's plan from its claims file, checked: looks (partitions per look), spending, α,
    and a hash of the claims and grids it judges."""
    settings, claims = load_claims(path)
    spec = settings["study"]
    missing = [c["id"] for c in claims if "grid" not in c]
    if missing:
        raise SystemExit(
            f"{path}: claims {', '.join(map(str, missing))} name no `grid` — a study runs the grids "
            "its claims need (`grids:` and `grid:` per claim)"
        )
    for name, overrides in settings["grids"].items():
        if not isinstance(overrides, list) or not all(isinstance(o, str) and "=" in o for o in overrides):
            raise SystemExit(f"{path}: grids.{name} must be a list of Hydra overrides (key=value strings)")
        if any(o.split("=", 1)[0].lstrip("+~") == "partition" for o in overrides):
            raise SystemExit(f"{path}: grids.{name} sets partition — the study sets the partitions of each look")
    total = int(spec.get("partitions", 10))
    stages = [int(s) for s in spec.get("stages") or [total]] if sequential else [total]
    if sequential and (stages[-1] != total or stages[0] < 2 or any(b <= a for a, b in pairwise(stages))):
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
    plan = {
        "sequential": sequential,
        "alpha": settings["alpha"],
        "partitions": total,
        "stages": stages,
        "first_partition": int(spec.get("first_partition", 0)),
        "spending": kind if sequential else None,
        "claims_sha256": hashlib.sha256(judged_spec.encode()).hexdigest(),
        "boundaries": rule,
    }
    if sequential and rule == "t_simulated":
        plan["simulation"] = {
            "studies": int(spec.get("simulation_studies", 2_000_000)),
            "seed": int(spec.get("simulation_seed", 0)),
        }
    plan.update(_declared(path, spec))
    return plan


def _declared(path: Path, spec: dict) -> dict:
    """The exclusions and α recycling a study file declares (only when it declares them: a file
    from before they were declared keeps its plan)."""
    out: dict = {}
    if "exclusions" in spec:
        exclusions = spec["exclusions"] or []
        if not all(isinstance(e, dict) and isinstance(e.get("partition"), int) and e.get("why") for e in exclusions):
            raise SystemExit(f"{path}: study.exclusions must be a list of {{partition: N, why: ...}}")
        out["exclusions"] = sorted(int(e["partition"]) for e in exclusions)
    if "alpha_recycling" in spec:
        if spec["alpha_recycling"] != "none":
            raise SystemExit(
                f"{path}: study.alpha_recycling {spec['alpha_recycling']!r}: only `none` is supported "
                "(a decided claim's α stays with it; the rest of its family keeps its own level)"
            )
        out["alpha_recycling"] = "none"
    if "alpha_split" in spec:
        split = {str(k): float(v) for k, v in (spec["alpha_split"] or {}).items()}
        families = set(family_directions(load_claims(path)[1]))
        if set(split) != families or not all(0 < v < 1 for v in split.values()):
            raise SystemExit(
                f"{path}: study.alpha_split must give each family ({', '.join(sorted(families))}) an α in (0, 1)"
            )
        out["alpha_split"] = split
    if "robust" in spec:
        if spec["robust"] not in ROBUST:
            raise SystemExit(f"{path}: study.robust {spec['robust']!r} is not one of {ROBUST}")
        out["robust"] = spec["robust"]
    return out


def study_wide_error(plan: dict, families: list[str]) -> dict:
    """The chance of at least one false verdict anywhere in the study: each family's α (Bonferroni
    over its 2m directions holds it), across families at most their sum, and 1 − Π(1 − α_f)
    when the families' data are independent."""
    alphas = {name: family_alpha(plan, name) for name in families}
    return {
        "families": alphas,
        "bound": min(1.0, sum(alphas.values())),
        "independent": 1 - float(np.prod([1 - a for a in alphas.values()])),
    }


def look_levels(plan: dict, tests: int, alpha: float | None = None) -> list[float]:
    """The one-sided p-levels of each look for a family of ``tests`` directions (``alpha`` / tests
    each, the study's α by default): the t-exact simulated boundaries, or the earlier z-nominal
    ones (``plan["boundaries"]``)."""
    stages, alpha = plan["stages"], (plan["alpha"] if alpha is None else alpha) / tests
    if plan["boundaries"] == "z_nominal":
        return nominal_levels([s / stages[-1] for s in stages], alpha, plan["spending"])
    sim = plan["simulation"]
    return t_levels(stages, t_boundaries(stages, alpha, plan["spending"], sim["studies"], sim["seed"]))


def look_partitions(plan: dict, n: int) -> list[int]:
    """The first ``n`` partitions from ``first_partition`` that the plan does not exclude."""
    excluded, p = set(plan.get("exclusions", [])), plan["first_partition"]
    out: list[int] = []
    while len(out) < n:
        if p not in excluded:
            out.append(p)
        p += 1
    return out


def read_deviations(path: Path) -> dict:
    """A registered study's deviations, found after its results (``FILE.deviations.yaml`` beside
    it): ``note`` (what was wrong, when it was found, what changes), ``paper_delta_from`` per claim
    id (the Δ's source, ``claim_spec.check_delta_source``) and ``exploratory_robust`` (a robust
    analysis not registered, shown as exploratory). They change labels, never decisions."""
    file = Path(path).with_suffix(".deviations.yaml")
    if not file.exists():
        return {}
    data = yaml.safe_load(file.read_text()) or {}
    claims = {str(k): {"paper_delta_from": v} for k, v in (data.get("paper_delta_from") or {}).items()}
    known = {str(c["id"]): c for c in load_claims(path)[1]}
    for cid, overlay in claims.items():
        if cid not in known:
            raise SystemExit(f"{file}: paper_delta_from.{cid}: no such claim in {path}")
        check_delta_source(file, {**known[cid], **overlay})
    robust = data.get("exploratory_robust")
    if robust is not None and robust not in ROBUST:
        raise SystemExit(f"{file}: exploratory_robust {robust!r} is not one of {ROBUST}")
    return {"note": data.get("note"), "claims": claims, "exploratory_robust": robust}


def claim_power(claim: dict, plan: dict, levels: list[float], tests: int) -> dict:
    """The design's power at the paper's Δ and its 80 %-power Δ for the claim's planning SD."""
    from scipy import stats

    sd = claim.get("planning_sd")
    if sd is None:
        raise SystemExit(
            f"claim {claim['id']}: a registered study states each claim's `planning_sd` (the SD of "
            "paired differences its exploratory runs showed) and where it comes from (`planning_sd_from`)"
        )
    stages = plan["stages"]
    bounds = [float(stats.t.isf(level, n - 1)) for n, level in zip(stages, levels, strict=True)]
    out = {
        "planning_sd": float(sd),
        "planning_sd_from": claim.get("planning_sd_from"),
        "directions": tests,
        "detectable_delta": round(detectable(stages, bounds, POWER_TARGET) * float(sd), 6),
    }
    distance = paper_distance(claim)
    if distance is not None:
        out.update(
            {
                "paper_delta": float(claim["paper_delta"]),
                "distance_beyond_bound": distance,
                "power_at_paper_delta": round(power(stages, bounds, distance / float(sd)), 4),
            }
        )
    return out

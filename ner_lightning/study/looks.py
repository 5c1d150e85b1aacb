"""A study's looks (``ner_lightning.study``): at each, the grids of its undecided claims launched,
the claims judged on the look's partitions, decided ones dropped — fixed design (Holm over each
family's 2m directions) or group-sequential (each direction against its look's boundary,
``report/sequential.py``)."""

from __future__ import annotations

from pathlib import Path

from ner_lightning.report.claim_spec import family, family_alpha, family_directions, grids_of, scored_metric
from ner_lightning.report.claims import (
    Judged,
    decide,
    interval_at,
    judge,
    undecided_verdict,
    verdict,
    verdict_kind,
    wilcoxon_p,
)
from ner_lightning.report.sequential import spent
from ner_lightning.report.stats import detectable_effect
from ner_lightning.study.plan import look_levels, look_partitions


def judge_look(claims: list[dict], settings: dict, folder: Path, partitions: list[int], scoring: str) -> list[Judged]:
    """Each claim on the look's partitions, its metric under ``scoring`` (``claim_spec.scored_metric``)."""
    labels = {str(p) for p in partitions}
    loaded: dict = {}
    return [
        judge(
            {**c, "runs": grids_of(c), "metric": scored_metric(c, settings, scoring)},
            settings["alpha"],
            settings["resamples"],
            settings["seed"],
            folder,
            loaded=loaded,
            partitions=labels,
        )
        for c in claims
    ]


def run_looks(
    record: dict,
    settings: dict,
    claims: list[dict],
    folder: Path,
    count: int,
    scoring: str,
    save=lambda: None,
    launch_grids=None,
    robust: str | None = None,
) -> None:
    """The study's first ``count`` looks into ``record``: at each, the grids of the undecided claims
    launched (``launch_grids``, unless replaying), the claims judged under ``scoring``, decided
    ones dropped; stops when none is left open."""
    plan = record["plan"]
    directions = family_directions(claims)  # as decide() counts a family
    open_ids = [str(c["id"]) for c in claims if not c.get("vacuous")]  # a vacuous claim is not judged
    levels: dict[tuple[int, float], list[float]] = {}
    for k, n_k in enumerate(plan["stages"][:count]):
        partitions = look_partitions(plan, n_k)
        needed = [c for c in claims if str(c["id"]) in open_ids]
        if launch_grids is not None:
            launch_grids(list(dict.fromkeys(g for c in needed for g in grids_of(c))), partitions)
        judged = judge_look(needed, settings, folder, partitions, scoring)
        look = {"look": k + 1, "partitions": n_k, "claims": {}}
        if plan["sequential"]:
            for j in judged:
                name = family(j.claim)
                key = (directions[name], family_alpha(plan, name))
                if key not in levels:  # the boundary of a family of this size and α
                    levels[key] = look_levels(plan, *key)
                stats, final = sequential_look(j, plan, k, levels[key][k], key, robust)
                look["claims"][str(j.claim["id"])] = stats
                if final:
                    record["verdicts"][str(j.claim["id"])] = final
                    open_ids.remove(str(j.claim["id"]))
        else:
            decide(judged, plan["alpha"])
            for j in judged:
                look["claims"][str(j.claim["id"])] = {
                    "n": j.n,
                    "seeds": list(j.seeds),
                    "mean": j.mean,
                    "p": j.p,
                    "p_reverse": j.p_reverse,
                    "p_holm": j.p_holm,
                    "sd": j.sd,
                    "deltas": dict(zip(j.labels, j.deltas, strict=True)),
                    "resumed": j.resumed,
                }
                record["verdicts"][str(j.claim["id"])] = {"verdict": j.verdict, "look": 1, "partitions": n_k}
            open_ids = []
        record["looks"].append(look)
        save()
        if not open_ids:
            break


def sequential_look(
    j: Judged, plan: dict, k: int, level: float, family_size: tuple[int, float], robust: str | None = None
) -> tuple[dict, dict | None]:
    """One claim at look ``k``: its statistics against the look's ``level``, and its verdict when
    a direction crossed or this is the last look (then undecided: what does the interval at the
    look's level say of the paper's Δ and of 0?). ``robust``: the second analysis beside it."""
    stages, (tests, alpha) = plan["stages"], family_size
    decided = None if (v := verdict(j.p, j.p_reverse, level)) == "inconclusive" else v
    low, high = interval_at(j, level)
    stats = {
        "n": j.n,
        "seeds": list(j.seeds),
        "mean": j.mean,
        "t_interval": [j.t_low, j.t_high],
        "p": j.p,
        "p_reverse": j.p_reverse,
        "level": level,
        "alpha_spent": tests * spent(stages[k] / stages[-1], alpha / tests, plan["spending"]),
        "decision": decided,
        "interval_at_level": [low, high],
        "sd": j.sd,
        "planning_sd": j.claim.get("planning_sd"),
        "deltas": dict(zip(j.labels, j.deltas, strict=True)),
        "resumed": j.resumed,
    }
    if robust:
        stats["robust"] = {
            "test": robust,
            "registered": robust == plan.get("robust"),
            "p": dict(zip(("claim", "reverse"), wilcoxon_p(j), strict=True)),
        }
    if not decided and k < len(stages) - 1:
        return stats, None
    undecided = undecided_verdict(j.claim, low, high, detectable_effect(j.sd, j.n, level, 1))
    return stats, {"verdict": verdict(j.p, j.p_reverse, level, undecided), "look": k + 1, "partitions": stages[k]}


def decisions(record: dict) -> dict:
    """Each claim's look and decision (replicated / not replicated / undecided): what the cells
    decide; the label of an undecided claim follows the claims module's current rule."""
    undecided = ("inconclusive", "underpowered", "smaller than reported")
    return {
        cid: (v["look"], "undecided" if verdict_kind(v["verdict"]) in undecided else v["verdict"])
        for cid, v in record["verdicts"].items()
    }

"""Claims as data: the YAML file a claims table or a study reads (``load_claims``), checked.

A claim names the runs it reads (sweep folders, their exports or cell folders: glob patterns
relative to the claims file) or, in a study file, the ``grid`` (one name or a list) whose cells
it reads; a filter (``where``), the key whose two values it compares (``key``: ``method``
against ``baseline``), a metric and a relation (``>``, ``>>`` with a ``margin``, ``≈`` within
±``margin``: ``ner_lightning.report.claims``). Optional: ``interaction: {key, with, without}``
(a difference of differences), ``average_over: KEY`` (a macro average per partition),
``select_on_dev: KEY`` (runs that differ only in KEY reduced to the best on dev), ``pool``
(settings a row may differ in), ``family`` (default: the paper), ``paper_delta`` (the paper's own
method − baseline) with its source (``paper_delta_from``: :func:`check_delta_source`) and
``vacuous`` (why the comparison cannot test the statement). Each claim is
read under its paper's span scorer (``papers: {NAME: {scorer: strict | lenient}}``; strict where a
paper names none).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from pathlib import Path

import yaml

RELATIONS = (">", ">>", "≈")

FIELDS = ("id", "paper", "source", "statement", "relation", "runs", "key", "method", "baseline", "metric")

SCORERS = ("strict", "lenient")


def load_claims(path: Path) -> tuple[dict, list[dict]]:
    """The file's settings (``alpha``, ``resamples``, ``seed``, ``names``, ``figures``, ``papers``,
    ``grids``, ``study``) and its claims, checked."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    claims = data.get("claims") or []
    if not claims:
        raise SystemExit(f"{path}: no claims (a top-level `claims:` list)")
    grids = data.get("grids") or {}
    papers = {str(k): dict(v or {}) for k, v in (data.get("papers") or {}).items()}
    for name, paper in papers.items():
        if paper.get("scorer", "strict") not in SCORERS:
            raise SystemExit(f"{path}: papers.{name}.scorer {paper['scorer']!r} is not one of {SCORERS}")
    for i, c in enumerate(claims):
        missing = [f for f in FIELDS if f not in c and not (f == "runs" and "grid" in c)]
        if missing:
            raise SystemExit(f"{path}: claim {c.get('id', i + 1)} lacks {', '.join(missing)}")
        for grid in grids_of(c):
            if grid not in grids:
                raise SystemExit(
                    f"{path}: claim {c['id']}: grid {grid!r} is not one of the file's grids "
                    f"({', '.join(grids) or 'none: add a top-level `grids:` map'})"
                )
        if c["relation"] not in RELATIONS:
            raise SystemExit(f"{path}: claim {c['id']}: relation {c['relation']!r} is not one of {RELATIONS}")
        if c["relation"] != ">" and not c.get("margin"):
            raise SystemExit(f"{path}: claim {c['id']}: relation {c['relation']} needs a positive margin")
        check_delta_source(path, c)
    settings = {
        "alpha": float(data.get("alpha", 0.05)),
        "resamples": int(data.get("resamples", 10_000)),
        "seed": int(data.get("seed", 0)),
        "names": {str(k): str(v) for k, v in (data.get("names") or {}).items()},
        "figures": list(data.get("figures") or []),
        "papers": papers,
        "grids": grids,
        "study": dict(data.get("study") or {}),
    }
    return settings, claims


def grids_of(claim: dict) -> list[str]:
    """The grids a study's claim reads: its ``grid``, one name or a list (rows that need their own
    overrides, e.g. a tuned λ for one loss only)."""
    grid = claim.get("grid")
    return [] if grid is None else [str(g) for g in grid] if isinstance(grid, list) else [str(grid)]


def family(claim: dict) -> str:
    """The claim's family for :func:`symmetric_verdicts`: its ``family`` key, else its paper."""
    return str(claim.get("family") or claim["paper"])


def family_alpha(plan: dict, name: str) -> float:
    """The α a family spends: its share of a registered ``study.alpha_split``, else the study's α."""
    return float((plan.get("alpha_split") or {}).get(name, plan["alpha"]))


def family_directions(claims: list[dict]) -> dict[str, int]:
    """Each family's number of one-sided tests (2m): a claim and its reverse for each of its m
    judged claims (a vacuous claim is not judged and does not count)."""
    return {name: 2 * m for name, m in Counter(family(c) for c in claims if not c.get("vacuous")).items()}


def scorer(claim: dict, settings: dict) -> str:
    """The span scorer of the claim's paper (``papers: {NAME: {scorer: ...}}``; strict if unstated)."""
    return str(settings["papers"].get(claim["paper"], {}).get("scorer", "strict"))


def lenient(metric: str) -> str:
    """The same score under lenient (conlleval) span rules: ``test.micro.f1`` -> ``test.lenient.micro.f1``."""
    split, _, rest = metric.partition(".")
    return metric if rest.startswith("lenient.") else f"{split}.lenient.{rest}"


def strict(metric: str) -> str:
    """The same score under strict span rules: ``test.lenient.micro.f1`` -> ``test.micro.f1``."""
    split, _, rest = metric.partition(".")
    return f"{split}.{rest.removeprefix('lenient.')}"


def scored_metric(claim: dict, settings: dict, scoring: str = "paper") -> str:
    """The metric a claim is judged on — the one place that applies a scorer. ``scoring``:
    ``paper`` (its paper's registered scorer, :func:`scorer`), ``other`` (the other one),
    ``strict`` or ``lenient`` (every claim so), ``as_written`` (the claim's metric untouched)."""
    if scoring == "as_written":
        return claim["metric"]
    chosen = {
        "paper": scorer(claim, settings),
        "strict": "strict",
        "lenient": "lenient",
        "other": SCORERS[1 - SCORERS.index(scorer(claim, settings))],
    }[scoring]
    return (lenient if chosen == "lenient" else strict)(claim["metric"])


DELTA_SOURCE = ("where", "method", "baseline", "train_sentences", "metric", "scorer")


def check_delta_source(path: Path | str, claim: dict) -> None:
    """A claim's ``paper_delta`` names its source (``paper_delta_from``): a mapping with the table,
    figure or section (``where``), the two reported values (``method``, ``baseline``), the paper's
    training-set size, metric and scorer, and Δ = method − baseline; or ``comparable: false`` with
    ``why`` (a pooled or maximum figure, another size, metric or scorer). A plain string (files
    written before sources were itemised) is read as not comparable."""
    source = claim.get("paper_delta_from")
    if claim.get("paper_delta") is None or not isinstance(source, dict):
        return
    where = f"{path}: claim {claim['id']}: paper_delta_from"
    if source.get("comparable", True) is False:
        if not source.get("why") or not source.get("where"):
            raise SystemExit(f"{where}: comparable: false needs `where` and `why` (what differs from the claim)")
        return
    missing = [k for k in DELTA_SOURCE if source.get(k) is None]
    if missing:
        raise SystemExit(f"{where} lacks {', '.join(missing)} (or say `comparable: false` and why)")
    reported = float(source["method"]) - float(source["baseline"])
    if abs(reported - float(claim["paper_delta"])) > 1e-4:
        raise SystemExit(f"{where}: method − baseline = {reported:+.4f}, but paper_delta is {claim['paper_delta']}")


def comparable_delta(claim: dict) -> bool:
    """Whether the claim's ``paper_delta`` is a number the paper reports for the claim's setting
    (an itemised source not marked ``comparable: false``)."""
    source = claim.get("paper_delta_from")
    return (
        claim.get("paper_delta") is not None
        and isinstance(source, dict)
        and source.get("comparable", True) is not False
    )


def delta_source(claim: dict) -> str:
    """The claims table's source of the paper's Δ, in words."""
    source = claim.get("paper_delta_from")
    if claim.get("paper_delta") is None:
        return "—"
    if not isinstance(source, dict):
        return f"{source or 'unstated'} (not itemised: not comparable)"
    if source.get("comparable", True) is False:
        return f"{source['where']}: not comparable ({source['why']})"
    return (
        f"{source['where']}: {source['method']} − {source['baseline']}, {source['train_sentences']} training "
        f"sentences, {source['metric']}, {source['scorer']}"
    )


def paper_distance(claim: dict) -> float | None:
    """How far the paper's own Δ (``paper_delta``) lies beyond the claim's bound: Δ (``>``),
    Δ − margin (``>>``), margin − |Δ| (``≈``); None when the claim states no comparable paper Δ
    (:func:`comparable_delta`)."""
    if not comparable_delta(claim):
        return None
    delta, margin = float(claim["paper_delta"]), float(claim.get("margin") or 0.0)
    return {">": delta, ">>": delta - margin, "≈": margin - abs(delta)}[claim["relation"]]


def selected(claim_id: str, only: Collection[str]) -> bool:
    """Whether ``--only`` names a claim: by its id's first word ("6a" for "6a (20)") or that word's
    number ("6" for 6a, 6b and 6c)."""
    word = str(claim_id).split()[0]
    return word in only or word.rstrip("abcdefghijklmnopqrstuvwxyz") in only

"""Claims as data: the YAML file a claims table or a study reads (``load_claims``), checked.

A claim names the runs it reads (sweep folders, their exports or cell folders: glob patterns
relative to the claims file) or, in a study file, the ``grid`` (one name or a list) whose cells
it reads; a filter (``where``), the key whose two values it compares (``key``: ``method``
against ``baseline``), a metric and a relation (``>``, ``>>`` with a ``margin``, ``≈`` within
±``margin``: ``ner_lightning.report.claims``). Optional: ``interaction: {key, with, without}``
(a difference of differences), ``average_over: KEY`` (a macro average per partition),
``select_on_dev: KEY`` (runs that differ only in KEY reduced to the best on dev), ``pool``
(settings a row may differ in), ``family`` (default: the paper), ``paper_delta`` (the paper's own
method − baseline) and ``vacuous`` (why the comparison cannot test the statement). Each claim is
read under its paper's span scorer (``papers: {NAME: {scorer: strict | lenient}}``; strict where a
paper names none).
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Collection

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
                raise SystemExit(f"{path}: claim {c['id']}: grid {grid!r} is not one of the file's grids "
                                 f"({', '.join(grids) or 'none: add a top-level `grids:` map'})")
        if c["relation"] not in RELATIONS:
            raise SystemExit(f"{path}: claim {c['id']}: relation {c['relation']!r} is not one of {RELATIONS}")
        if c["relation"] != ">" and not c.get("margin"):
            raise SystemExit(f"{path}: claim {c['id']}: relation {c['relation']} needs a positive margin")
    settings = {"alpha": float(data.get("alpha", 0.05)), "resamples": int(data.get("resamples", 10_000)),
                "seed": int(data.get("seed", 0)), "names": {str(k): str(v) for k, v in (data.get("names") or {}).items()},
                "figures": list(data.get("figures") or []), "papers": papers, "grids": grids,
                "study": dict(data.get("study") or {})}
    return settings, claims


def grids_of(claim: dict) -> list[str]:
    """The grids a study's claim reads: its ``grid``, one name or a list (rows that need their own
    overrides, e.g. a tuned λ for one loss only)."""
    grid = claim.get("grid")
    return [] if grid is None else [str(g) for g in grid] if isinstance(grid, list) else [str(grid)]


def family(claim: dict) -> str:
    """The claim's family for :func:`symmetric_verdicts`: its ``family`` key, else its paper."""
    return str(claim.get("family") or claim["paper"])


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


def paper_distance(claim: dict) -> float | None:
    """How far the paper's own Δ (``paper_delta``) lies beyond the claim's bound: Δ (``>``),
    Δ − margin (``>>``), margin − |Δ| (``≈``); None when the claim states no paper Δ."""
    if claim.get("paper_delta") is None:
        return None
    delta, margin = float(claim["paper_delta"]), float(claim.get("margin") or 0.0)
    return {">": delta, ">>": delta - margin, "≈": margin - abs(delta)}[claim["relation"]]


def selected(claim_id: str, only: Collection[str]) -> bool:
    """Whether ``--only`` names a claim: by its id's first word ("6a" for "6a (20)") or that word's
    number ("6" for 6a, 6b and 6c)."""
    word = str(claim_id).split()[0]
    return word in only or word.rstrip("abcdefghijklmnopqrstuvwxyz") in only

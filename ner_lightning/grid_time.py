"""Where a grid's time went, read from its cells' ``results.json``: the phases of every cell's
process summed (``phase_s``, ``ner_lightning/clock.py``) and the wall-clock timeline (each cell's
``timeline``, each lockstep group's fit: ``lockstep.fit_timeline``, ``lockstep.fit_phase_s``).
``sweep status`` and the report print both."""

from __future__ import annotations


def _hours(x: float) -> str:
    return f"{x / 3600:.2f} h" if x >= 3600 else f"{x / 60:.1f} min" if x >= 120 else f"{x:.1f} s"


def time_spent(results: list[dict]) -> str | None:
    """The phases of the cells' ``phase_s`` summed (``results.json`` of this version: every phase
    of each cell's process), largest first, with their share of the cells' summed wall time; None
    without such cells."""
    timed = [r for r in results if (r.get("phase_s") or {}).get("startup") is not None]
    if not timed:
        return None
    totals: dict[str, float] = {}
    for r in timed:
        for phase, seconds in r["phase_s"].items():
            totals[phase] = totals.get(phase, 0.0) + (seconds or 0.0)
    wall = sum(r["wall_time_s"] for r in timed) or 1.0
    parts = ", ".join(
        f"{phase} {_hours(x)} ({x / wall:.0%})" for phase, x in sorted(totals.items(), key=lambda kv: -kv[1]) if x > 0
    )
    return f"time of {len(timed)} cells, {_hours(wall)}: {parts}"


def timeline(results: list[dict]) -> str | None:
    """The grid's wall-clock span (first set-up to last result) against its cells' own spans summed
    (how many ran at once, on average), and its lockstep groups: their fits' wall time, and what
    their cells spent outside them (set-up before, test and writes after, one cell after another
    in the group's process); None without timed cells."""
    spans = [r["timeline"] for r in results if r.get("timeline")]
    if not spans:
        return None
    span = max(s["ended"] for s in spans) - min(s["started"] for s in spans)
    cells = sum(s["ended"] - s["started"] for s in spans)
    at_once = cells / max(span, 1e-9)
    line = f"timeline: {_hours(span)} from the first set-up to the last result, {at_once:.1f} cells at once on average"
    fits: dict[str | None, tuple[dict, list[dict]]] = {}
    for r in results:
        group = r.get("lockstep") or {}
        if group.get("fit_timeline") and r.get("timeline"):
            fits.setdefault(group.get("group_sha256"), (group["fit_timeline"], []))[1].append(r["timeline"])
    if fits:
        fit_s = sum(f["ended"] - f["started"] for f, _ in fits.values())
        around = sum(
            max(0.0, f["started"] - min(c["started"] for c in members))
            + max(0.0, max(c["ended"] for c in members) - f["ended"])
            for f, members in fits.values()
        )
        line += (
            f"; {len(fits)} lockstep groups: their fits {_hours(fit_s)}, their cells' set-up before"
            f" and test and writes after them {_hours(around)}"
        )
    return line

"""The claims table of a claims file (``python -m ner_lightning.report --claims FILE``), the
pages' table blocks it rewrites (``--update DOC``) and its figures (``--plots DIR``).

Each row: the claim, Δ with its paired t-interval and percentile bootstrap interval, the Holm p
in its family, the verdict (``ner_lightning.report.claims``) and its design — *exploratory* for
every claims file: its rule, families, scorers, specs or partitions may have been chosen after
its results were seen; *confirmatory* verdicts come only from registered studies
(``ner_lightning.study``) — then the family, the scorer, the detectable Δ, the paper's Δ, the
partitions that would detect it at the observed SD (``report.stats.partitions_needed``), and the
verdict under the other scorer and with every claim in one family as sensitivity columns. Under
the table: the runs that resumed from a checkpoint and which verdicts change without them.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Collection
from pathlib import Path

from ner_lightning.report.claim_spec import (
    delta_source,
    family,
    family_directions,
    paper_distance,
    scorer,
    selected,
    strict,
)
from ner_lightning.report.claims import Judged, decide, judge_all
from ner_lightning.report.claims_figures import figure, forest_plot
from ner_lightning.report.stats import POWER, partitions_needed

DESIGN = "exploratory"  # a claims file's verdicts; confirmatory ones come from registered studies


def _relation(claim: dict) -> str:
    margin = claim.get("margin")
    return {">": ">", ">>": f"> by {margin}", "≈": f"≈ ±{margin}"}[claim["relation"]]


def _difference(claim: dict, name) -> str:
    d = f"{name(claim['method'])} − {name(claim['baseline'])}"
    inter = claim.get("interaction")
    if inter:
        d = f"({d}) at {name(inter['with'])} − at {name(inter['without'])}"
    return f"{d} ({strict(claim['metric'])}, {_relation(claim)})"


def _replicates(j: Judged) -> str:
    low, high = j.seeds
    return str(j.n) if high == 1 else f"{j.n} × {low}" if low == high else f"{j.n} × {low}–{high}"


def _needed(j: Judged, alpha: float, tests: int) -> str:
    distance = paper_distance(j.claim)
    if distance is None:
        return "—"
    if distance <= 0:
        return "none (the paper's Δ is not beyond the bound)"
    n = partitions_needed(distance, j.sd, alpha, tests)
    return str(n) if n is not None else "> 100000"


def claims_table(path: Path, fmt: str = "md", plots: Path | None = None, only: Collection[str] | None = None) -> str:
    """The claims table, every verdict computed by the rule in this module's docstring (and with
    ``plots``, the forest plot of every claim's Δ there). With ``only``, just the rows of those
    claims (:func:`selected`), judged with their whole families, without the notes."""
    head, rows, note = _table(path, plots)
    return _render(head, rows, note, fmt, only)


BLOCK = re.compile(
    r"<!-- claims table: (?P<file>\S+?)(?: only=(?P<only>\S+))? -->\n"
    r"(?:(?P<body>(?:(?!<!-- (?:end )?claims table).)*?)\n)?<!-- end claims table -->",
    re.S,
)


def table_blocks(text: str, claims_file: str) -> list[tuple[list[str] | None, str]]:
    """The claims tables a document holds for ``claims_file`` (a file name beside the document):
    ``<!-- claims table: FILE[ only=ID,ID] -->`` … ``<!-- end claims table -->``, each as (only, body)."""
    blocks = [(_only(m), m["body"] or "") for m in BLOCK.finditer(text) if m["file"] == claims_file]
    opened = len(re.findall(rf"<!-- claims table: {re.escape(claims_file)}[ -]", text))
    if opened != len(blocks):
        raise SystemExit(
            f"{opened} claims tables of {claims_file} open but {len(blocks)} close with "
            "'<!-- end claims table -->': end each block before the next one starts"
        )
    return blocks


def _only(block: re.Match) -> list[str] | None:
    """A table block's ``only=`` ids (None: the whole table)."""
    return block["only"].split(",") if block["only"] else None


def update_tables(doc: Path, claims: Path) -> int:
    """Rewrite every claims table of ``claims`` in ``doc`` (:func:`table_blocks`) with what the
    command prints now (the claims judged once); returns how many there were."""
    head, rows, note = _table(claims, None)

    def block(m: re.Match) -> str:
        if m["file"] != Path(claims).name:
            return m[0]
        return m[0].split("\n", 1)[0] + "\n" + _render(head, rows, note, "md", _only(m)) + "\n<!-- end claims table -->"

    text = Path(doc).read_text()
    count = len(table_blocks(text, Path(claims).name))
    Path(doc).write_text(BLOCK.sub(block, text))
    return count


def _render(head: list[str], rows: list[list[str]], note: str, fmt: str, only: Collection[str] | None) -> str:
    if only is not None:
        unknown = [o for o in only if not any(selected(r[0], [o]) for r in rows)]
        if unknown:
            raise SystemExit(
                f"no claim {', '.join(unknown)} in the claims file (asked for by --only or a "
                f"table block's only=): name a claim id's first word or its number"
            )
        rows, note = [r for r in rows if selected(r[0], only)], ""
    if fmt == "latex":

        def esc(s: str) -> str:
            return "".join(LATEX.get(ch, ch) for ch in s)

        lines = (
            [
                "\\begin{tabular}{" + "l" * len(head) + "}",
                "\\toprule",
                " & ".join(map(esc, head)) + " \\\\",
                "\\midrule",
            ]
            + [" & ".join(map(esc, r)) + " \\\\" for r in rows]
            + ["\\bottomrule", "\\end{tabular}"]
        )
        return "\n".join(lines) + (f"\n% {note}" if note else "")
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out) + (f"\n\n{note}" if note else "")


def _table(path: Path, plots: Path | None) -> tuple[list[str], list[list[str]], str]:
    """The claims table's header, rows and note (the resumed runs)."""
    loaded: dict = {}  # the runs, read once for every reading of the claims
    settings, judged = judge_all(path, loaded=loaded)
    try:
        other = [j.verdict for j in judge_all(path, "other", loaded=loaded)[1]]
    except SystemExit:  # runs without lenient scores (results.json written by hand)
        other = ["—"] * len(judged)
    one = [copy.copy(j) for j in judged]
    decide(one, settings["alpha"], one_family=True)
    if plots is not None:
        forest_plot(judged, settings, plots)
        for spec in settings["figures"]:
            figure(spec, settings, Path(path).parent, plots)
    directions = family_directions([j.claim for j in judged])
    rows = [
        _row(j, settings, directions) + [o_verdict, o.verdict]
        for j, o, o_verdict in zip(judged, one, other, strict=True)
    ]
    resumed = sorted({d for j in judged for d in j.resumed})
    note = (
        f"{len(resumed)} of the runs read resumed from a checkpoint: {', '.join(resumed)}. "
        + _without_resumed(path, judged, loaded)
        if resumed
        else "No run read resumed from a checkpoint."
    )
    return _header(settings), rows, note


def _header(settings: dict) -> list[str]:
    level = round(100 * (1 - settings["alpha"]))
    return [
        "claim",
        "paper",
        "source",
        "statement",
        "Δ = method − baseline",
        "n (partitions × seeds)",
        f"mean Δ [t {level}% CI]",
        f"bootstrap {level}% CI",
        "p (Holm in family)",
        "verdict",
        "design",
        "family",
        "scorer",
        f"detectable Δ ({round(100 * POWER)}% power)",
        "paper's Δ",
        "source of the paper's Δ",
        "partitions for the paper's Δ",
        "verdict, other scorer",
        "verdict, one family of all claims",
    ]


def _row(j: Judged, settings: dict, directions: dict[str, int]) -> list[str]:
    """A claim's cells up to the sensitivity columns (:func:`_header`)."""
    c, paper, vacuous = j.claim, j.claim.get("paper_delta"), j.claim.get("vacuous")
    return [
        str(c["id"]),
        c["paper"],
        c["source"],
        c["statement"],
        _difference(c, lambda v: settings["names"].get(str(v), str(v))),
        _replicates(j),
        f"{j.mean:+.3f} [{j.t_low:+.3f}, {j.t_high:+.3f}]",
        f"[{j.boot_low:+.3f}, {j.boot_high:+.3f}]",
        "—" if vacuous else f"{j.p_holm:.4f}",
        f"{j.verdict}: {vacuous}" if vacuous else j.verdict,
        DESIGN,
        family(c),
        scorer(c, settings),
        "—" if vacuous else f"{j.detectable:.3f}",
        "—" if paper is None else f"{float(paper):+.3f}",
        delta_source(c),
        "—" if vacuous else _needed(j, settings["alpha"], directions[family(c)]),
    ]


def _without_resumed(path: Path, judged: list[Judged], loaded: dict) -> str:
    """Which verdicts change when the resumed runs (and their partitions) are left out."""
    try:
        _, without = judge_all(path, drop_resumed=True, loaded=loaded)
    except SystemExit as err:  # a claim left with fewer than 2 partitions
        return f"Without them, not every claim can be judged ({err})."
    changed = [
        f"{j.claim['id']} ({j.verdict} -> {w.verdict}, n {j.n} -> {w.n})"
        for j, w in zip(judged, without, strict=True)
        if j.verdict != w.verdict
    ]
    return (
        ("Without them, the verdicts of " + "; ".join(changed) + " change.")
        if changed
        else "Without them, no verdict changes."
    )


LATEX = {
    "_": "\\_",
    "%": "\\%",
    "&": "\\&",
    "#": "\\#",
    "≈": "$\\approx$",
    "≫": "$\\gg$",
    "±": "$\\pm$",
    "−": "$-$",
    "–": "--",
    "Δ": "$\\Delta$",
    "λ": "$\\lambda$",
    "γ": "$\\gamma$",
    "β": "$\\beta$",
}

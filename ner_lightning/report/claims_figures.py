"""The figures of a claims file (``python -m ner_lightning.report --claims FILE --plots DIR``): a
forest plot of every claim's Δ and intervals coloured by verdict, and the curves its ``figures``
list asks for."""

from __future__ import annotations

from pathlib import Path

from ner_lightning.report.claims import Judged, claim_runs, verdict_kind

VERDICT_COLOURS = {
    "replicated": "tab:green",
    "not replicated": "tab:red",
    "inconclusive": "tab:gray",
    "smaller than reported": "tab:brown",
    "underpowered": "tab:orange",
    "vacuous": "tab:purple",
}


def forest_plot(judged: list[Judged], settings: dict, out: Path) -> list[Path]:
    """Every claim's mean Δ with its t-interval (thick) and bootstrap interval (thin), coloured by
    verdict; the claimed bound (0, the ≫ margin, the ≈ band) drawn on each row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from ner_lightning.report.plots import save

    def name(v: object) -> str:
        return settings["names"].get(str(v), str(v))

    fig, ax = plt.subplots(figsize=(7.5, 0.6 + 0.24 * len(judged)))
    for row, j in enumerate(judged):
        y, c, colour = len(judged) - 1 - row, j.claim, VERDICT_COLOURS[verdict_kind(j.verdict)]
        ax.plot([j.boot_low, j.boot_high], [y, y], color=colour, lw=0.8)
        ax.plot([j.t_low, j.t_high], [y, y], color=colour, lw=2.5, solid_capstyle="butt")
        ax.plot(j.mean, y, "o", color=colour, ms=3.5)
        margin = float(c.get("margin") or 0.0)
        if c["relation"] == ">>":
            ax.plot(margin, y, "|", color="black", ms=7)
        elif c["relation"] == "≈":
            ax.plot([-margin, margin], [y, y], "|", color="black", ms=7)
    ax.axvline(0, color="black", lw=0.6)
    ax.set_yticks(
        range(len(judged)),
        [f"{j.claim['id']}: {name(j.claim['method'])} − {name(j.claim['baseline'])}" for j in reversed(judged)],
        fontsize=6,
    )
    ax.set_ylim(-0.7, len(judged) - 0.3)
    ax.set_xlabel("paired difference Δ (method − baseline) over partitions")
    level = round(100 * (1 - settings["alpha"]))
    handles = [Line2D([], [], color=col, lw=2.5, label=v) for v, col in VERDICT_COLOURS.items()]
    handles += [Line2D([], [], color="black", marker="|", ls="", ms=7, label="claimed margin (≫ / ≈)")]
    ax.legend(handles=handles, fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(
        f"claims (each under its paper's scorer): mean Δ, paired t {level}% CI (thick), bootstrap {level}% CI (thin)",
        fontsize=8,
    )
    ax.grid(axis="x", alpha=0.3)
    return save(fig, Path(out), "claims_forest")


def figure(spec: dict, settings: dict, root: Path, out: Path) -> list[Path]:
    """A curve of the claims file's ``figures`` list: runs (glob patterns), ``where``, the method
    key, the x key (optionally placed at the mean of ``x_at``, labelled ``x_label``), the metric and
    the paper's reported values as references. The x axis is logarithmic."""
    from ner_lightning.report.plots import metric_vs

    runs = claim_runs(spec, root)
    return metric_vs(
        runs,
        spec["key"],
        spec["x"],
        [spec["metric"]],
        Path(out),
        spec["name"],
        settings["resamples"],
        settings["seed"],
        True,
        settings["names"],
        spec.get("references"),
        spec.get("reference_label", "paper"),
        spec.get("x_at"),
        spec.get("x_label"),
    )

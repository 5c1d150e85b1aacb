"""Figures of a sweep (matplotlib, PNG + SVG), named after what they show. ``render`` draws
every figure the sweep's axes allow:

* ``<metric>_vs_size``: the metric against training-set size (log x), mean and 95 % bootstrap
  band per method (AUC-2T paper Fig. 4 style) — when ``size`` varies;
* ``f1_vs_<key>``: dev and test metric against any other swept numeric key (λ, entity share,
  learning rate …; log x when it spans a decade; AUC-2T Fig. 3 style);
* ``per_type_f1_size<N>``: per-type test F1 bars per method;
* ``paired_diff_vs_<baseline>``: method − baseline per partition (dots) and its mean, per size;
* ``tuning_value_vs_trial``: an Optuna search's objective (mean dev score over the tuning
  partitions) per trial and the best so far.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ner_lightning.report.runs import group, labels, lookup, sort_key  # noqa: E402
from ner_lightning.report.stats import Estimate, bootstrap_mean  # noqa: E402
from ner_lightning.report.tables import paired_values, values  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.typing import ColorType  # matplotlib 3.8+

FIXED = {"size", "partition", "seed", "init_seed", "loss", "model", "dataset", "experiment", "hydra.sweep.dir"}


def save(fig, out: Path, name: str) -> list[Path]:
    """PNG and SVG, byte for byte the same for the same runs (no date, fixed SVG ids)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.svg"]
    with plt.rc_context({"svg.hashsalt": name}):
        fig.savefig(paths[0], dpi=150, bbox_inches="tight", metadata={"Software": None})
        fig.savefig(paths[1], bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    return paths


def _numeric(xs) -> bool:
    try:
        [float(x) for x in xs]
        return True
    except (TypeError, ValueError):
        return False


def _label(metric: str) -> str:
    return metric.replace("test.", "test ").replace("dev.", "dev ").replace(".", " ")


def _points(rs, x_key, x_at, metric, resamples, seed) -> list[tuple[float, Estimate]]:
    """(x, bootstrap estimate of ``metric``) per value of ``x_key``. With ``x_at``, every value of
    ``x_key`` (unset included) is placed at the mean of ``x_at`` over its runs, e.g. the measured
    entity-token share of the nominal shares 1 %, 2 % … and of the original distribution."""
    pts = []
    for (x,), cell in group([r for r in rs if x_at or lookup(r, x_key) is not None], [x_key]).items():
        e = bootstrap_mean(values(cell, metric), resamples, seed)
        if e.n:
            pts.append((statistics.fmean(values(cell, x_at)) if x_at else float(x), e))
    return sorted(pts, key=lambda p: p[0])


def metric_vs(
    runs,
    method_key,
    x_key,
    metrics,
    out,
    name,
    resamples,
    seed,
    log_x,
    names: dict | None = None,
    references: dict | None = None,
    reference_label: str = "paper",
    x_at: str | None = None,
    x_label: str | None = None,
) -> list[Path]:
    """One line + 95 % band per (method, metric) against ``x_key`` (placed at the mean of ``x_at``
    when given, see :func:`_points`); method names from ``names``; a paper's reported values
    (``references``: method -> {x: value}) as hollow markers in the method's colour."""
    names, references = names or {}, references or {}
    fig, ax = plt.subplots(figsize=(6, 4))
    ticks: set[float] = set()
    for i, metric in enumerate(metrics):
        style = ("-", "--", ":")[i % 3]
        for method, rs in group(runs, [method_key]).items():
            pts = _points(rs, x_key, x_at, metric, resamples, seed)
            if not pts:
                continue
            xs = [p[0] for p in pts]
            ticks.update(float(f"{x:.3g}") for x in xs)  # measured positions differ in the 4th digit
            shown_name = names.get(method[0], method[0])
            (line,) = ax.plot(
                xs,
                [p[1].mean for p in pts],
                style,
                marker="o",
                label=f"{shown_name} ({_label(metric)})" if len(metrics) > 1 else shown_name,
            )
            lows = [p[1].low if p[1].n > 1 else p[1].mean for p in pts]
            highs = [p[1].high if p[1].n > 1 else p[1].mean for p in pts]
            ax.fill_between(xs, lows, highs, color=line.get_color(), alpha=0.15)
            ref = {float(k): float(v) for k, v in (references.get(method[0]) or {}).items()}
            ticks.update(ref)
            _reference_markers(ax, ref, line.get_color())
    if references:
        ax.plot([], [], ls=":", marker="o", mfc="none", color="gray", label=f"{reference_label} (hollow)")
    if log_x:
        _log_x_ticks(ax, ticks)
    ax.set_xlabel(x_label or x_key)
    ax.set_ylabel(_label(metrics[-1]) if len(metrics) == 1 else "F1")
    ax.set_title(
        f"{', '.join(map(_label, metrics))} vs {x_label or x_key} (mean, 95% bootstrap CI over partitions)", fontsize=9
    )
    ax.grid(alpha=0.3)
    if references:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(fontsize=7)
    return save(fig, out, name)


def _reference_markers(ax, ref: dict[float, float], color: ColorType) -> None:
    """A paper's reported values ``{x: value}`` as hollow markers on a dotted line."""
    if ref:
        xs = sorted(ref)
        ax.plot(xs, [ref[x] for x in xs], ls=":", marker="o", mfc="none", color=color, lw=0.8)


def _log_x_ticks(ax, ticks: set[float]) -> None:
    """A log x axis labelled at the measured positions, one label where rows sit a hair apart."""
    ax.set_xscale("log")
    ordered = sorted(ticks)
    shown = [t for i, t in enumerate(ordered) if i == 0 or t > 1.05 * ordered[i - 1]]
    ax.set_xticks(shown, [f"{t:g}" for t in shown])
    ax.minorticks_off()


def per_type_bars(runs, method_key, size, out) -> list[Path]:
    rs = [r for r, v in zip(runs, labels(runs, "size"), strict=True) if v == size]
    types = sorted({t for r in rs for t in (lookup(r, "test.per_type") or {})})
    methods = list(group(rs, [method_key]))
    if not types or not methods:
        return []
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(types) * max(1, len(methods)) / 3), 4))
    width = 0.8 / len(methods)
    for i, (method,) in enumerate(methods):
        cell = [r for r, v in zip(rs, labels(rs, method_key), strict=True) if v == method]
        means = [statistics.fmean(v) if (v := values(cell, f"test.per_type.{t}.f1")) else float("nan") for t in types]
        ax.bar([j + i * width for j in range(len(types))], means, width, label=method)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(types))], types)
    ax.set_ylabel("test F1 (strict), mean over partitions")
    ax.set_title(f"per-type test F1, size {size}", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    return save(fig, out, f"per_type_f1_size{size}")


def paired_differences(runs, method_key, metric, baseline, out) -> list[Path]:
    sizes = [k[0] for k in group(runs, ["size"])]
    methods = [m for (m,) in group(runs, [method_key]) if m != baseline]
    if not methods:
        return []
    fig, axes = plt.subplots(1, len(sizes), figsize=(3.2 * len(sizes) + 1, 3.8), squeeze=False, sharey=True)
    for ax, size in zip(axes[0], sizes, strict=True):
        at = [r for r, v in zip(runs, labels(runs, "size"), strict=True) if v == size]
        base = [r for r, v in zip(at, labels(at, method_key), strict=True) if v == baseline]
        for i, m in enumerate(methods):
            x, y = paired_values([r for r, v in zip(at, labels(at, method_key), strict=True) if v == m], base, metric)
            d = [a - b for a, b in zip(x, y, strict=True)]
            ax.scatter([i] * len(d), d, s=18, alpha=0.7)
            if d:
                ax.hlines(sum(d) / len(d), i - 0.3, i + 0.3, color="k")
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xticks(range(len(methods)), methods, rotation=45, ha="right", fontsize=8)
        ax.set_title(f"size {size}", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel(f"{_label(metric)}: method − {baseline}")
    fig.suptitle(f"paired differences per partition (dots) and their mean (bar) vs {baseline}", fontsize=9)
    return save(fig, out, f"paired_diff_vs_{baseline}")


def trials_plot(trials: list[dict], out: Path) -> list[Path]:
    fig, ax = plt.subplots(figsize=(6, 3.8))
    xs, ys = [t["trial"] for t in trials], [t["mean"] for t in trials]
    ax.plot(xs, ys, "o", label="trial")
    ax.step(xs, [max(ys[: i + 1]) for i in range(len(ys))], where="post", label="best so far")
    ax.set_xlabel("trial")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_ylabel(f"mean dev {trials[0]['monitor']} over partitions {list(trials[0]['partitions'])}")
    ax.set_title("tuning objective per trial", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, out, "tuning_value_vs_trial")


def swept_keys(runs) -> list[str]:
    """Override keys other than the grid's fixed axes whose values vary and are numeric."""
    seen: dict[str, set] = {}
    for r in runs:
        for o in r.get("overrides", []):
            k, _, v = o.partition("=")
            seen.setdefault(k.lstrip("+"), set()).add(v)
    return [k for k, vs in seen.items() if k not in FIXED and len(vs) > 1 and _numeric(vs)]


def render(
    runs,
    out: Path,
    method_key: str,
    metric: str,
    baseline: str | None,
    resamples: int,
    seed: int,
    trials: list[dict] | None = None,
) -> list[Path]:
    written = trials_plot(trials, out) if trials else []
    sizes = sorted(set(labels(runs, "size")), key=lambda s: sort_key((s,)))
    name = metric.replace(".", "_")
    if len(sizes) > 1 and _numeric(sizes):
        written += metric_vs(runs, method_key, "size", [metric], out, f"{name}_vs_size", resamples, seed, log_x=True)
    for key in swept_keys(runs):
        xs = [float(lookup(r, key)) for r in runs if lookup(r, key) is not None]
        log_x = min(xs) > 0 and max(xs) / min(xs) >= 10
        metrics = [metric.replace("test.", "dev.", 1), metric] if metric.startswith("test.") else [metric]
        lines = method_key if method_key != key else "loss"  # one line per method, never per value of the x axis
        written += metric_vs(runs, lines, key, metrics, out, f"f1_vs_{key.replace('.', '_')}", resamples, seed, log_x)
    for size in sizes:
        written += per_type_bars(runs, method_key, size, out)
    if baseline:
        written += paired_differences(runs, method_key, metric, baseline, out)
    return written

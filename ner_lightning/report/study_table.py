"""A study's record as Markdown (``ner-lightning study FILE``, ``--show``): the verdicts, the look
each was decided at and the plan; on replay, the study-wide error, the rule's check, the as-run
verdicts when they were judged on other metrics than the registered ones, and the deviation note."""

from __future__ import annotations

import math
from pathlib import Path


def _plan_line(record: dict) -> str:
    plan = record["plan"]
    rule = (
        "t-exact boundaries (simulated null studies)"
        if plan.get("boundaries") == "t_simulated"
        else "z-nominal boundaries"
    )
    split = plan.get("alpha_split")
    alpha = f"α = {plan['alpha']}" if not split else "α per family " + ", ".join(f"{k} {v:g}" for k, v in split.items())
    return f"study of {record['claims_file']}: " + (
        f"sequential, looks at {plan['stages']} partitions, {plan['spending']} spending of {alpha} "
        f"(Bonferroni over each family's 2m directions), {rule}"
        if plan["sequential"]
        else f"fixed design, {plan['partitions']} partitions, α = {plan['alpha']} "
        "(Holm over each family's 2m directions)"
    )


def _sd(s: dict) -> str:
    if "sd" not in s:
        return "—"
    return f"{s['sd']:.4f}" + (f" ({s['planning_sd']:g})" if s.get("planning_sd") is not None else "")


def _robust(s: dict) -> str:
    r = s.get("robust")
    if not r:
        return "—"
    return f"{r['p']['claim']:.4g} / {r['p']['reverse']:.4g}" + ("" if r["registered"] else " (exploratory)")


def table(record: dict) -> str:
    """The study's verdicts, the look each was decided at and the plan, as Markdown."""
    plan = record["plan"]
    rows = list(record["verdicts"].items())
    last = record["looks"][-1] if record["looks"] else {"claims": {}}
    rows += [
        (
            cid,
            {
                "verdict": f"open: next look at {plan['stages'][last['look']]} partitions",
                "look": last["look"],
                "partitions": last["partitions"],
            },
        )
        for cid in last["claims"]
        if cid not in record["verdicts"]
    ]
    stats = [record["looks"][v["look"] - 1]["claims"][cid] for cid, v in rows]
    robust = any("robust" in s for s in stats)
    lines = [
        _plan_line(record),
        *([record["registration"]] if record.get("registration") else []),
        "",
        "| claim | verdict | look (partitions) | n (× seeds) | mean Δ | p | p reverse | level | α spent | "
        "interval at the level | SD (planned) |" + (" Wilcoxon p / reverse |" if robust else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if robust else ""),
    ]
    for (cid, v), s in zip(rows, stats, strict=True):
        seeds = s["seeds"][1]
        interval = s.get("interval_at_level")
        lines.append(
            f"| {cid} | {v['verdict']} | {v['look']} ({v['partitions']}) | {s['n']}"
            + (f" × {seeds}" if seeds > 1 else "")
            + f" | {s['mean']:+.4f} | {s['p']:.4g} | "
            f"{s['p_reverse']:.4g} | "
            + (
                f"{s['level']:.4g} | {s['alpha_spent']:.4g} |"
                if "level" in s
                else f"Holm {s['p_holm']:.4g} | {plan['alpha']} |"
            )
            + (f" [{interval[0]:+.4f}, {interval[1]:+.4f}] |" if interval else " — |")
            + f" {_sd(s)} |"
            + (f" {_robust(s)} |" if robust else "")
        )
    return "\n".join(lines)


def show(record: dict) -> str:
    """A replayed study (``study.replay_study``): the table as registered, then what else the
    replay found."""
    out = [table(record)]
    error = record.get("study_wide_error")
    if error:
        each = ", ".join(f"{k} {v:g}" for k, v in error["families"].items())
        if len(error["families"]) == 1:
            out.append(f"\nFamily-wise error of the design: {each} (one family).")
        else:
            out.append(
                f"\nStudy-wide family-wise error of the design: each family {each}; across the "
                f"{len(error['families'])} families at most {error['bound']:.4f} (Bonferroni), "
                f"{error['independent']:.4f} if they are independent."
            )
    if record.get("rule"):
        out.append(f"Rule: {record['rule']}.")
    if record.get("as_run"):
        out.append(
            "\nAs run (each claim's metric as written, strict F1; superseded by the table above):\n\n"
            + table({**record["as_run"], "registration": None})
        )
    if record.get("deviations"):
        out.append(f"\nDeviation: {record['deviations'].strip()}")
    if record.get("diagnostics"):
        out.append("\n" + diagnostics(record["diagnostics"]))
    return "\n".join(out)


def _interval(pair) -> str:
    return f"[{pair[0]:+.4f}, {pair[1]:+.4f}]" if pair else "—"


def _p(p: float, se: float) -> str:
    return f"{p:.3g}" + (f" ± {se:.1g}" if se else "")


def _estimates(cid: str, d: dict) -> str:
    naive, adj = d["naive"], d["adjusted"]
    if adj:
        cover = ("" if adj.get("coverage_exact") else "≈ ") + f"{100 * adj['coverage']:g} %"
        scale = f"(Δ − {adj['bound']:g})/σ" if adj["bound"] else "Δ/σ"
        staged = (
            f"{_interval(adj['repeated_interval'])} ({cover}) | {scale} {adj['theta']:+.3f} "
            f"{_interval3(adj['theta_interval'])} | Δ ≤ {adj['bound']:g}: {_p(adj['p'], adj['p_se'])} / "
            f"{_p(adj['p_reverse'], adj['p_se'])} ({adj['method']}) vs α per direction {d['alpha_d']:g}"
        )
    else:
        staged = "— (a two-sided claim, a fixed design or no spread) | — | —"
    w = d["wilcoxon"]
    reach = f"1/2^{d['n']} = {w['min_p']:.3g}" + (
        "" if w["can_reach"] else f" > the look's level {w['level']:.3g}: could not have decided it"
    )
    inf = d["influence"]
    moved = (
        f"{inf['partition']} (Δ {inf['delta']:+.4f}); without it mean {inf['mean_without']:+.4f}, "
        f"SD {inf['sd_without']:.4f}, t {inf['t_without']:+.2f}, p {inf['p_without']:.3g} / reverse "
        f"{inf['p_reverse_without']:.3g}"
        if inf
        else "—"
    )
    return (
        f"| {cid} | {d['look']} ({d['n']}) | {d['p']:.3g} / {d['p_reverse']:.3g} vs level {d['level']:.3g} | "
        f"{naive['mean']:+.4f} {_interval(naive['interval'])} | {staged} | "
        f"{reach} | {moved} | {_interval(inf.get('loo_range'))} | {', '.join(d['resumed']) or '—'} |"
    )


def _interval3(pair) -> str:
    return f"[{pair[0]:+.3f}, {pair[1]:+.3f}]"


def _spans(method: str, sums: dict) -> str:
    only, right = sums.get("lenient_only"), sums.get("lenient_only_correct")
    text = f"{method} {sums['strict']:,} / {sums['lenient']:,} ({100 * sums['share']:.1f} %"
    if only is not None and right is not None and not math.isnan(right):
        text += f"; {only:,} lenient-only, {100 * right:.1f} % of them correct"
    return text + ")"


def diagnostics(diag: dict) -> str:
    """The post-hoc block (``report.study_diagnostics``): estimates after the stop, the Wilcoxon
    test's reach, influence, resumed cells, and the scorer's view of each method's spans."""
    lines = [
        "Post hoc, beside the registered rule (no verdict depends on it; "
        "`ner_lightning/report/study_diagnostics.py`). Each claim's registered p is read against its "
        "look's level. After the stop: the repeated confidence interval of the stopping look on the Δ "
        "scale, which holds Δ with at least the coverage shown (1 − 2α per direction, the claim's "
        "registered α) whatever made the study stop; the stage-wise median-unbiased estimate of "
        "(Δ − b)/σ (b the claim's margin, else 0) with its interval at the same coverage, exact on that "
        "scale; and the stage-wise p of Δ ≤ b and of the reverse (exact at the first look, else "
        "simulated ± its Monte-Carlo SE), which rejects exactly when it is at most the direction's α. "
        "The naive t-interval ignores that the data chose the look:",
        "",
        "| claim | stopped at look (n) | registered p / reverse vs the look's level | naive mean Δ "
        "[95 % t-interval] | repeated CI on Δ (coverage) | stage-wise median-unbiased estimate "
        "[interval] | stage-wise p / reverse | Wilcoxon's smallest one-sided p at n (descriptive) | "
        "partition whose removal moves the mean most | leave-one-out means | resumed cells |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *(_estimates(cid, d) for cid, d in diag.items()),
        "",
        "Predicted test spans that only the lenient scorer counts (they start with I- or change type "
        "inside a span; strict IOB2 drops them), summed over each claim's judged cells, and how many "
        "of them are correct (lenient − strict correct spans). Lenient F1 counts them, strict F1 does "
        "not: where few of them are correct the lenient scorer adds mostly false positives to that "
        "method.",
        "",
        "| claim | predicted spans strict / lenient (share only the lenient scorer counts; how many of "
        "those are correct), per method |",
        "|---|---|",
    ]
    for cid, d in diag.items():
        shares = "; ".join(_spans(method, sums) for method, sums in d["scorer"].items())
        lines.append(f"| {cid} | {shares or '—'} |")
    return "\n".join(lines)


def update_block(doc: Path, claims_file: str, text: str) -> None:
    """Replace the body of ``doc``'s ``<!-- study table: claims_file -->`` block with ``text``."""
    page = Path(doc).read_text()
    opening = f"<!-- study table: {claims_file} -->"
    if opening not in page:
        raise SystemExit(f"{doc}: no '{opening}' block to update")
    start = page.index("\n", page.index(opening)) + 1
    end = page.index("<!-- end study table -->", start)
    Path(doc).write_text(page[:start] + text.strip() + "\n" + page[end:])

"""A study's record as Markdown (``ner-lightning study FILE``, ``--show``): the verdicts, the look
each was decided at and the plan; on replay, the study-wide error, the rule's check, the as-run
verdicts when they were judged on other metrics than the registered ones, and the deviation note."""

from __future__ import annotations

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


def _estimates(cid: str, d: dict) -> str:
    naive, adj = d["naive"], d["adjusted"]
    staged = (
        f"{adj['estimate']:+.4f} {_interval(adj['interval'])} | {adj['p']:.3g} / {adj['p_reverse']:.3g}"
        if adj
        else "— (a two-sided claim, a fixed design or no spread) | —"
    )
    w = d["wilcoxon"]
    reach = f"1/2^{d['n']} = {w['min_p']:.3g}" + (
        "" if w["can_reach"] else f" > level {w['level']:.3g}: cannot reach the level"
    )
    inf = d["influence"]
    moved = (
        f"{inf['partition']} (Δ {inf['delta']:+.4f}; mean without {inf['mean_without']:+.4f}, "
        f"SD {inf['sd_without']:.4f})"
        if inf
        else "—"
    )
    return (
        f"| {cid} | {d['look']} ({d['n']}) | {naive['mean']:+.4f} {_interval(naive['interval'])} | {staged} | "
        f"{reach} | {moved} | {_interval(inf.get('loo_range'))} | {', '.join(d['resumed']) or '—'} |"
    )


def diagnostics(diag: dict) -> str:
    """The post-hoc block (``report.study_diagnostics``): estimates after the stop, the Wilcoxon
    test's reach, influence, resumed cells, and the scorer's view of each method's spans."""
    lines = [
        "Post hoc, beside the registered rule (no verdict depends on it; "
        "`ner_lightning/report/study_diagnostics.py`). The stage-wise estimate and interval are exact for "
        "Δ/σ and shown × the stopping look's SD; at 5 partitions that interval is wider than the naive "
        "t-interval, which ignores that the look was chosen by the data:",
        "",
        "| claim | stopped at look (n) | naive mean Δ [95 % t-interval] | stage-wise median-unbiased Δ "
        "[95 % interval] | stage-wise p / reverse | Wilcoxon's smallest one-sided p at n (descriptive, "
        "not a sequential test) | partition whose removal moves the mean most | leave-one-out means | "
        "resumed cells |",
        "|---|---|---|---|---|---|---|---|---|",
        *(_estimates(cid, d) for cid, d in diag.items()),
        "",
        "Predicted test spans that only the lenient scorer counts (they start with I- or change type "
        "inside a span; strict IOB2 drops them), summed over each claim's judged cells. Lenient F1 "
        "counts them as spans, strict F1 does not: a method with a larger share scores relatively "
        "better under the lenient scorer whenever such spans match gold ones, and worse when they "
        "are spurious.",
        "",
        "| claim | predicted spans strict / lenient, and the share only the lenient scorer counts, per method |",
        "|---|---|",
    ]
    for cid, d in diag.items():
        shares = "; ".join(
            f"{method} {sums['strict']:,} / {sums['lenient']:,} ({100 * sums['share']:.1f} %)"
            for method, sums in d["scorer"].items()
        )
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

"""Claims as data: the verdict rule against scipy and by hand, on hand-made results."""
import json

import numpy as np
import pytest
import yaml
from scipy import stats

from ner_lightning.report.__main__ import main
from ner_lightning.report.claims import judge_all, symmetric_verdicts
from ner_lightning.report.stats import p_against, t_test
from ner_lightning.report.stats import detectable_effect, partitions_needed

D = np.array([0.031, 0.012, 0.048, -0.004, 0.027, 0.019])


def test_p_values_and_interval_are_scipys_paired_t_and_tost():
    p, low, high = t_test(D, ">", 0.0, 0.05)
    assert p == pytest.approx(stats.ttest_1samp(D, 0.0, alternative="greater").pvalue)
    ci = stats.ttest_1samp(D, 0.0).confidence_interval(0.95)
    assert (low, high) == pytest.approx((ci.low, ci.high))
    p, _, _ = t_test(D, ">>", 0.01, 0.05)
    assert p == pytest.approx(stats.ttest_1samp(D, 0.01, alternative="greater").pvalue)
    p, _, _ = t_test(D, "≈", 0.05, 0.05)
    tost = max(stats.ttest_1samp(D, -0.05, alternative="greater").pvalue,
               stats.ttest_1samp(D, 0.05, alternative="less").pvalue)
    assert p == pytest.approx(tost)


def test_the_reverse_p_values_are_scipys_one_sided_tests_the_other_way():
    assert p_against(D, ">", 0.0) == pytest.approx(stats.ttest_1samp(D, 0.0, alternative="less").pvalue)
    assert p_against(D, ">>", 0.01) == pytest.approx(stats.ttest_1samp(D, 0.01, alternative="less").pvalue)
    outside = 2 * min(stats.ttest_1samp(D, 0.01, alternative="greater").pvalue,
                      stats.ttest_1samp(D, -0.01, alternative="less").pvalue)
    assert p_against(D, "≈", 0.01) == pytest.approx(min(1.0, outside))


def test_symmetric_verdicts_adjust_both_directions_within_each_family_by_hand():
    # family A: 2 claims -> 4 p-values; Holm multipliers 4, 3, 2, 1 in order of size
    p_for, p_rev = [0.004, 0.60], [0.99, 0.02]
    # A: sorted 0.004 (x4 = 0.016), 0.02 (x3 = 0.06), 0.60, 0.99 -> claim 1 replicated; claim 2's
    # reverse 0.06 >= 0.05: inconclusive (unadjusted, 0.02 would have said "not replicated")
    assert symmetric_verdicts(p_for, p_rev, ["A", "A"], 0.05) == ["replicated", "inconclusive"]
    # as two families of one claim each: multipliers 2, 1 -> 0.008 and 0.04: both decided
    assert symmetric_verdicts(p_for, p_rev, ["A", "B"], 0.05) == ["replicated", "not replicated"]


def test_the_detectable_effect_has_80_percent_power_at_the_strictest_holm_level():
    """n = 10, SD 0.024, a family of 130 claims (260 one-sided tests): the power of the one-sided
    t-test at that true effect is 0.8 (noncentral t), checked by simulation too; the textbook
    approximation (t quantiles added) is smaller, as it overstates power at 9 degrees of freedom."""
    n, sd, tests = 10, 0.024, 260
    mde = detectable_effect(sd, n, 0.05, tests)
    critical = stats.t.ppf(1 - 0.05 / tests, 9)
    assert stats.nct.sf(critical, 9, mde / (sd / np.sqrt(n))) == pytest.approx(0.8, abs=1e-6)
    d = np.random.default_rng(1).normal(mde, sd, size=(20000, n))
    t = d.mean(1) / (d.std(1, ddof=1) / np.sqrt(n))
    assert (t > critical).mean() == pytest.approx(0.8, abs=0.01)
    assert mde > (critical + stats.t.ppf(0.8, 9)) * sd / np.sqrt(n)
    assert detectable_effect(sd, n, 0.05, 2) < mde < detectable_effect(sd, 5, 0.05, tests)


def test_symmetric_rule_keeps_each_kind_of_false_verdict_within_alpha_by_simulation():
    """2,000 simulated studies of 10 ">" claims, n = 10 partitions, SD 0.024 (the median SD of
    the paired differences), every true Δ = 0 — the boundary of both hypotheses, so any verdict
    is false. Family-wise, false "replicated" and false "not replicated" each stay within α (up to
    simulation error); the old rule's unadjusted "not replicated" does not."""
    rng = np.random.default_rng(0)
    alpha, studies, claims = 0.05, 2000, 10
    false = {"replicated": 0, "not replicated": 0}
    old_false_not = 0
    for _ in range(studies):
        d = rng.normal(0.0, 0.024, size=(claims, 10))
        tests = [t_test(row, ">", 0.0, alpha) for row in d]
        verdicts = symmetric_verdicts([t[0] for t in tests], [p_against(row, ">", 0.0) for row in d],
                                      ["paper"] * claims, alpha)
        for kind in false:
            false[kind] += kind in verdicts
        old_false_not += any(high <= 0 for _, _, high in tests)  # the old rule: 95 % interval below 0
    bound = alpha + 3 * np.sqrt(alpha * (1 - alpha) / studies)
    assert false["replicated"] / studies <= bound and false["not replicated"] / studies <= bound
    assert old_false_not / studies > 0.15  # ~1 - 0.975^10 = 22 %


def _write(root, name, loss, partition, f1, resumed=False, scheme="untyped", lenient=None, init_seed=42):
    """A results.json; ``lenient``: its lenient-scoring F1 (default: the strict one)."""
    d = root / name
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps({
        "overrides": [f"loss={loss}", "size=20", f"partition={partition}", f"init_seed={init_seed}"],
        "config": {"size": 20, "partition": partition, "seed": 42, "init_seed": init_seed, "dataset": {"name": "toy"},
                   "data": {"label_scheme": scheme}},
        "partition": {"sha256": f"p{partition}", "partition": partition}, "compute": {"init_seed": init_seed},
        "test": {"micro": {"f1": f1}, "lenient": {"micro": {"f1": f1 if lenient is None else lenient}}},
        "wall_time_s": 1.0, "resumed_from": "last.ckpt" if resumed else None}))


def test_verdicts_follow_the_rule_and_holm_runs_over_the_whole_file(tmp_path, capsys):
    runs = tmp_path / "runs"
    gains = {"better": D + 0.02, "worse": -D - 0.02, "same": D / 10}
    for p in range(len(D)):
        _write(runs, f"ce{p}", "ce", p, 0.5, resumed=p == 0)
        for loss, gain in gains.items():  # lenient scoring reverses "better" (a sensitivity column)
            _write(runs, f"{loss}{p}", loss, p, 0.5 + gain[p], lenient=0.5 - gain[p] if loss == "better" else None)
    claim = {"paper": "P", "source": "Table 1", "runs": ["runs"], "key": "loss", "baseline": "ce",
             "metric": "test.micro.f1", "where": {"size": 20}}
    claims = [{**claim, "id": 1, "statement": "better > CE", "method": "better", "relation": ">"},
              {**claim, "id": 2, "statement": "worse > CE", "method": "worse", "relation": ">"},
              {**claim, "id": 3, "statement": "same ≈ CE", "method": "same", "relation": "≈", "margin": 0.01},
              {**claim, "id": 4, "statement": "better ≫ CE", "method": "better", "relation": ">>", "margin": 0.1}]
    path = tmp_path / "claims.yaml"
    figures = [{"name": "curve", "runs": ["runs"], "key": "loss", "x": "size", "metric": "test.micro.f1",
                "references": {"ce": {20: 0.3}}}]
    path.write_text(yaml.safe_dump({"alpha": 0.05, "resamples": 200, "claims": claims, "figures": figures},
                                   allow_unicode=True))
    _, judged = judge_all(path)
    # Holm (1979) by hand over the family's 2m directions (each claim's p and its reverse's): the
    # k-th smallest of 2m times (2m - k + 1), running max; a claim's adjusted p is its own direction's
    ps = [p for j in judged for p in (j.p, j.p_reverse)]
    order, running, by_hand = sorted(range(len(ps)), key=ps.__getitem__), 0.0, [0.0] * len(ps)
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        by_hand[i] = running
    assert [j.p_holm for j in judged] == pytest.approx(by_hand[::2])
    assert [j.verdict for j in judged] == ["replicated", "not replicated", "replicated", "not replicated"]
    assert judged[0].mean == pytest.approx(float(np.mean(D + 0.02))) and judged[0].n == len(D)
    assert judged[0].resumed == ["runs/ce0"]
    main(["--claims", str(path)])
    out = capsys.readouterr().out
    assert "| 1 | P | Table 1 | better > CE | better − ce (test.micro.f1, >) | 6 |" in out
    assert "| replicated |" in out and "1 of the runs read resumed from a checkpoint" in out
    # claim 1: replicated in family P (strict: P states no scorer), its detectable Δ, no paper Δ
    # (and so no source), then lenient scoring, where "better" is worse: not replicated; one family
    # of all: replicated
    row = next(line for line in out.splitlines() if line.startswith("| 1 |")).split(" | ")
    assert row[9:] == ["replicated", "exploratory", "P", "strict", row[13], "—", "—", "—", "not replicated",
                       "replicated |"]
    assert float(row[13]) > 0
    assert [j.verdict for j in judge_all(path, "lenient")[1]][0] == "not replicated"
    _, without = judge_all(path, drop_resumed=True)  # partition 0's baseline resumed: left out
    assert [j.n for j in without] == [len(D) - 1] * 4
    changed = [j.claim["id"] for j, w in zip(judged, without) if j.verdict != w.verdict]
    assert ("no verdict changes" in out) == (not changed)
    # the paper's own scorer is the primary one: P cites a lenient scorer
    data = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**data, "papers": {"P": {"scorer": "lenient"}}}, allow_unicode=True))
    assert judge_all(path)[1][0].verdict == "not replicated"
    assert judge_all(path, "other")[1][0].verdict == "replicated"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    main(["--claims", str(path), "--format", "latex", "--plots", str(tmp_path / "figs")])
    assert "\\toprule" in capsys.readouterr().out
    for name in ("claims_forest", "curve"):
        assert (tmp_path / "figs" / f"{name}.png").is_file() and (tmp_path / "figs" / f"{name}.svg").is_file()


def test_seeds_are_averaged_within_each_partition_and_partitions_are_the_replicates(tmp_path):
    """Two initialisation seeds per partition: Δ of a partition is the mean of its two paired
    differences, n counts partitions (the table says "6 × 2"), and the t-test is scipy's on those means."""
    runs = tmp_path / "runs"
    noise = np.array([0.01, -0.02, 0.015, 0.0, -0.01, 0.02])
    for p in range(len(D)):
        for seed, sign in ((42, 1), (43, -1)):
            _write(runs, f"ce{p}_{seed}", "ce", p, 0.5, init_seed=seed)
            _write(runs, f"m{p}_{seed}", "m", p, 0.5 + D[p] + sign * noise[p], init_seed=seed)
    claim = {"id": 1, "paper": "P", "source": "S", "statement": "m > CE", "runs": ["runs"], "key": "loss",
             "method": "m", "baseline": "ce", "metric": "test.micro.f1", "relation": ">"}
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({"resamples": 200, "claims": [claim]}, allow_unicode=True))
    (j,) = judge_all(path)[1]
    assert (j.n, j.seeds) == (len(D), (2, 2)) and j.mean == pytest.approx(float(np.mean(D)))
    assert j.p == pytest.approx(stats.ttest_1samp(D, 0.0, alternative="greater").pvalue)
    from ner_lightning.report.claims_table import claims_table

    assert "| 6 × 2 |" in claims_table(path)


def test_only_prints_some_rows_judged_with_the_whole_family_and_update_rewrites_a_documents_tables(tmp_path, capsys):
    """--only keeps the named claims' rows exactly as in the full table (their family's Holm
    adjustment unchanged); --update rewrites each block of that claims file, leaves another
    file's block alone, and refuses a block that never ends."""
    from ner_lightning.report.claim_spec import selected
    from ner_lightning.report.claims_table import claims_table, update_tables

    runs = tmp_path / "runs"
    for p in range(len(D)):
        _write(runs, f"ce{p}", "ce", p, 0.5)
        _write(runs, f"m{p}", "m", p, 0.5 + D[p] + 0.02)
        _write(runs, f"w{p}", "w", p, 0.5 - D[p] - 0.02)
    claim = {"paper": "P", "source": "S", "runs": ["runs"], "key": "loss", "baseline": "ce",
             "metric": "test.micro.f1", "relation": ">"}
    claims = [{**claim, "id": "1a (x)", "statement": "m > CE", "method": "m"},
              {**claim, "id": "1b (x)", "statement": "w > CE", "method": "w"},
              {**claim, "id": "2 (x)", "statement": "m > CE again", "method": "m"}]
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({"resamples": 200, "claims": claims}, allow_unicode=True))
    assert [selected(c["id"], ["1"]) for c in claims] == [True, True, False]
    assert [selected(c["id"], ["1b", "2"]) for c in claims] == [False, True, True]
    full = claims_table(path).split("\n\n")[0].splitlines()
    main(["--claims", str(path), "--only", "2,1b"])
    only = capsys.readouterr().out.strip().splitlines()
    assert only == full[:2] + [full[3], full[4]]  # header, then rows 1b and 2 as the full table has them
    with pytest.raises(SystemExit, match="no claim 9"):
        main(["--claims", str(path), "--only", "9"])
    doc = tmp_path / "page.md"
    stale = "| stale |"
    doc.write_text(f"# Page\n<!-- claims table: claims.yaml -->\n{stale}\n<!-- end claims table -->\ntext\n"
                   f"<!-- claims table: claims.yaml only=2 -->\n<!-- end claims table -->\n"
                   f"<!-- claims table: other.yaml -->\n{stale}\n<!-- end claims table -->\n")
    assert update_tables(doc, path) == 2
    text = doc.read_text()
    assert f"<!-- claims table: claims.yaml -->\n{claims_table(path)}\n<!-- end claims table -->\ntext\n" in text
    assert f"only=2 -->\n{claims_table(path, only=['2'])}\n<!-- end claims table -->" in text
    assert text.count(stale) == 1 and text.startswith("# Page\n")  # other.yaml's block is left alone
    doc.write_text("<!-- claims table: claims.yaml only=2 -->\n| rows |\n")
    with pytest.raises(SystemExit, match="1 claims tables of claims.yaml open but 0 close"):
        update_tables(doc, path)


def test_a_paper_effect_below_the_detectable_one_is_underpowered_and_a_vacuous_claim_is_left_out(tmp_path):
    """An inconclusive claim whose paper Δ lies below the detectable Δ is underpowered; with a
    paper Δ above it, it stays inconclusive; a vacuous claim gets no verdict and leaves its family's
    adjustment (the other claim's Holm multiplier is then 2, not 4)."""
    runs = tmp_path / "runs"
    noisy = np.array([0.05, -0.04, 0.03, -0.02, 0.01, -0.03])
    for p, d in enumerate(noisy):
        _write(runs, f"ce{p}", "ce", p, 0.5)
        _write(runs, f"m{p}", "m", p, 0.5 + d)
    base = {"id": 1, "paper": "P", "source": "S", "statement": "m > CE", "runs": ["runs"], "key": "loss",
            "method": "m", "baseline": "ce", "metric": "test.micro.f1", "relation": ">"}
    path = tmp_path / "claims.yaml"
    def with_delta(delta: float, **source) -> dict:
        return {**base, "paper_delta": delta, "paper_delta_from": {
            "where": "Table 1", "method": 0.5 + delta, "baseline": 0.5, "train_sentences": 6, "metric": "F1",
            "scorer": "strict", **source}}

    path.write_text(yaml.safe_dump({"resamples": 200, "claims": [with_delta(0.005)]}, allow_unicode=True))
    (j,) = judge_all(path)[1]
    assert j.verdict == "underpowered; the opposite direction not excluded" and j.detectable > 0.005
    path.write_text(yaml.safe_dump({"resamples": 200, "claims": [with_delta(0.5)]}, allow_unicode=True))
    (j,) = judge_all(path)[1]
    assert j.t_high < 0.5 and j.verdict == "smaller than reported; the opposite direction not excluded"
    path.write_text(yaml.safe_dump({"resamples": 200, "claims": [with_delta(0.5, comparable=False, why="pooled")]},
                                   allow_unicode=True))
    assert judge_all(path)[1][0].verdict == "inconclusive (no comparable paper Δ)"
    path.write_text(yaml.safe_dump({"resamples": 200, "claims": [{**with_delta(0.5), "paper_delta_from": "Table 1"}]},
                                   allow_unicode=True))
    assert judge_all(path)[1][0].verdict == "inconclusive (no comparable paper Δ)"  # a source not itemised
    path.write_text(yaml.safe_dump({"resamples": 200, "claims": [with_delta(-0.2)]}, allow_unicode=True))
    assert judge_all(path)[1][0].verdict == "inconclusive"  # the paper's Δ is not beyond the claim's bound
    wrong = with_delta(0.5)
    wrong["paper_delta_from"]["baseline"] = 0.4
    path.write_text(yaml.safe_dump({"resamples": 200, "claims": [wrong]}, allow_unicode=True))
    with pytest.raises(SystemExit, match=r"method − baseline = \+0.6000, but paper_delta is 0.5"):
        judge_all(path)
    path.write_text(yaml.safe_dump({"resamples": 200, "claims": [with_delta(0.5, comparable=False)]}, allow_unicode=True))
    with pytest.raises(SystemExit, match="comparable: false needs `where` and `why`"):
        judge_all(path)
    vacuous = {**base, "id": 2, "vacuous": "the baseline predicts nothing"}
    path.write_text(yaml.safe_dump({"resamples": 200, "claims": [base, vacuous]}, allow_unicode=True))
    one, empty = judge_all(path)[1]
    assert empty.verdict == "vacuous"
    assert one.p_holm == pytest.approx(min(1.0, 2 * min(one.p, one.p_reverse)) if one.p < one.p_reverse
                                       else max(min(1.0, 2 * one.p_reverse), one.p))


SOURCE = {"where": "Table 1", "train_sentences": 50, "metric": "F1", "scorer": "strict"}


def test_an_undecided_claim_is_underpowered_only_while_its_interval_holds_the_papers_delta():
    """By hand: the interval below the paper's Δ is "smaller than reported"; holding it,
    "underpowered" only when the design could not detect it; wholly above it, nothing to add; each
    says whether the interval excludes 0; a Δ the paper does not report for the setting, neither."""
    from ner_lightning.report.claims import undecided_verdict

    claim = {"relation": ">", "paper_delta": 0.01, "paper_delta_from": {**SOURCE, "method": 0.51, "baseline": 0.5}}
    assert undecided_verdict(claim, -0.02, 0.005, 0.03) == "smaller than reported; the opposite direction not excluded"
    assert undecided_verdict(claim, 0.001, 0.005, 0.03) == "smaller than reported; 0 excluded"
    assert undecided_verdict(claim, -0.02, 0.015, 0.03) == "underpowered; the opposite direction not excluded"
    assert undecided_verdict(claim, -0.02, 0.015, 0.008) == ""  # the design detects 0.01: inconclusive
    assert undecided_verdict(claim, 0.012, 0.04, 0.03) == ""  # the interval lies above the paper's Δ
    wide = {"relation": ">>", "margin": 0.05, "paper_delta": 0.4,
            "paper_delta_from": {**SOURCE, "method": 0.8, "baseline": 0.4}}
    assert undecided_verdict(wide, 0.01, 0.2, 0.5) == "smaller than reported; 0 excluded"  # above 0, not the margin
    assert undecided_verdict({"relation": ">"}, -0.1, 0.2, 0.5) == ""  # no paper Δ
    equal = {"relation": "≈", "margin": 0.02, "paper_delta": 0.01,
             "paper_delta_from": {**SOURCE, "method": 0.51, "baseline": 0.5}}
    assert undecided_verdict(equal, -0.05, 0.005, 0.03) == ""
    pooled = {**claim, "paper_delta_from": {"where": "§5", "comparable": False, "why": "pooled over sizes"}}
    assert undecided_verdict(pooled, -0.02, 0.005, 0.03) == "inconclusive (no comparable paper Δ)"


def test_the_label_interval_is_at_the_level_each_direction_spends():
    """By hand, Δ = (0.01, 0.03, 0.02, 0.04): mean 0.025, sd 0.012910, n 4; at 0.025 a side the
    95 % t-interval (t 3.18245): 0.025 ± 0.020543; at 0.0025 a side (t 7.45332): ± 0.048111."""
    from ner_lightning.report.claims import Judged, interval_at

    j = Judged({}, 4, 0.025, 0, 0, 0, 0, 0, 0, 0.0129099445)
    assert interval_at(j, 0.025) == pytest.approx((0.025 - 0.0205428, 0.025 + 0.0205428), abs=1e-6)
    assert interval_at(j, 0.0025) == pytest.approx((0.025 - 0.0481110, 0.025 + 0.0481110), abs=1e-6)


def test_partitions_needed_is_the_first_n_whose_detectable_effect_reaches_the_papers():
    for distance, sd, tests in ((0.02, 0.024, 8), (0.005, 0.024, 40), (0.1, 0.03, 2)):
        n = partitions_needed(distance, sd, 0.05, tests)
        assert detectable_effect(sd, n, 0.05, tests) <= distance < detectable_effect(sd, n - 1, 0.05, tests)
    assert partitions_needed(-0.01, 0.02, 0.05, 2) is None and partitions_needed(0.01, 0.0, 0.05, 2) == 2


def test_an_interval_across_zero_is_inconclusive_and_unpaired_settings_are_refused(tmp_path):
    runs = tmp_path / "runs"
    noisy = np.array([0.05, -0.04, 0.03, -0.02])
    for p, d in enumerate(noisy):
        _write(runs, f"ce{p}", "ce", p, 0.5)
        _write(runs, f"m{p}", "m", p, 0.5 + d)
        _write(runs, f"typed{p}", "typed", p, 0.5 + d, scheme="typed")
    base = {"id": 1, "paper": "P", "source": "S", "statement": "m > CE", "runs": ["runs"], "key": "loss",
            "baseline": "ce", "metric": "test.micro.f1", "relation": ">"}
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({"claims": [{**base, "method": "m"}]}, allow_unicode=True))
    assert judge_all(path)[1][0].verdict == "inconclusive"
    path.write_text(yaml.safe_dump({"claims": [{**base, "method": "typed"}]}, allow_unicode=True))
    with pytest.raises(SystemExit, match="data.label_scheme is typed vs untyped"):
        judge_all(path)
    path.write_text(yaml.safe_dump({"claims": [{**base, "method": "m", "relation": "≈"}]}, allow_unicode=True))
    with pytest.raises(SystemExit, match="needs a positive margin"):
        judge_all(path)


@pytest.mark.slow  # 10,000 bootstrap resamples per claim over the committed run stores
@pytest.mark.parametrize(
    "doc, claims, full",
    [("replication.md", "claims.yaml", True), ("replication_archive.md", "claims.yaml", False),
     ("claims.md", "claims_budget.yaml", True)],
)
def test_the_committed_claims_table_is_the_commands_output(doc, claims, full):
    """Each committed claims table is exactly what --claims prints for the committed runs
    (replication.md's whole family, its archive's sections' --only rows; claims.md's budget check)."""
    from ner_lightning.config import REPO_ROOT
    from ner_lightning.report.claim_spec import selected
    from ner_lightning.report.claims_table import claims_table, table_blocks

    text = (REPO_ROOT / "docs" / "results" / doc).read_text()
    blocks = table_blocks(text, claims)
    assert blocks and (blocks[0][0] is None) == full, f"{doc}: a full claims table of {claims} {'missing' if full else 'too many'}"
    table = claims_table(REPO_ROOT / "docs" / "results" / claims)
    lines = table.split("\n\n")[0].splitlines()
    head, rows = lines[:2], lines[2:]
    for only, committed in blocks:  # a section's rows (--only) are the full table's rows
        if only is None:
            assert committed == table
        else:
            assert committed.splitlines() == head + [r for r in rows if selected(r.split(" | ")[0][2:], only)]


def test_an_interaction_is_the_difference_of_the_paired_differences(tmp_path):
    """Δ = (m − ce with regime) − (m − ce without), per partition, by hand."""
    runs = tmp_path / "runs"
    gain = {"default": np.array([0.02, 0.03, 0.01, 0.04]), "sCRD": np.array([0.05, 0.01, 0.02, 0.08])}
    for data, g in gain.items():
        for p in range(4):
            for loss, f1 in (("ce", 0.5), ("m", 0.5 + g[p])):
                d = runs / f"{data}-{loss}{p}"
                d.mkdir(parents=True)
                (d / "results.json").write_text(json.dumps({
                    "overrides": [f"loss={loss}", f"data={data}"], "grid": {"data": data},
                    "config": {"size": 20, "partition": p, "seed": 42, "dataset": {"name": "toy"}},
                    "partition": {"sha256": f"p{p}", "partition": p}, "compute": {"init_seed": 42},
                    "test": {"micro": {"f1": f1}}, "wall_time_s": 1.0}))
    claim = {"id": 11, "paper": "P", "source": "S", "statement": "no interaction", "runs": ["runs"], "key": "loss",
             "method": "m", "baseline": "ce", "metric": "test.micro.f1", "relation": "≈", "margin": 0.05,
             "interaction": {"key": "data", "with": "sCRD", "without": "default"}}
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({"claims": [claim]}, allow_unicode=True))
    (j,) = judge_all(path)[1]
    expected = gain["sCRD"] - gain["default"]
    assert j.n == 4 and j.mean == pytest.approx(float(expected.mean()))
    tost = max(stats.ttest_1samp(expected, -0.05, alternative="greater").pvalue,  # TOST: both one-sided
               stats.ttest_1samp(expected, 0.05, alternative="less").pvalue)   # tests, the larger p
    assert j.p == pytest.approx(tost)


def test_a_curve_can_place_each_setting_at_its_measured_mean(tmp_path):
    from ner_lightning.report.plots import _points

    runs = []
    for share, measured in ((0.01, (0.0102, 0.0098)), (None, (0.170, 0.160))):
        for p, m in enumerate(measured):
            runs.append({"config": {"data": {"imbalance": {"entity_share": share}}},
                         "training_set": {"after": {"entity_token_share": m}}, "test": {"micro": {"f1": 0.5 + p / 10}}})
    placed = _points(runs, "data.imbalance.entity_share", "training_set.after.entity_token_share",
                     "test.micro.f1", 100, 0)
    assert [x for x, _ in placed] == pytest.approx([0.01, 0.165])  # the unset (original) share is kept, at its mean
    assert [e.mean for _, e in placed] == pytest.approx([0.55, 0.55])
    nominal = _points(runs, "data.imbalance.entity_share", None, "test.micro.f1", 100, 0)
    assert [x for x, _ in nominal] == [0.01]  # without a measured position, unset has no place on the axis


def test_single_aux_is_chosen_on_dev_and_a_macro_average_pairs_partitions(tmp_path):
    """SingleAux per corpus and partition = the auxiliary with the best dev score (never test);
    Δ per partition = mean over corpora of (stack − SingleAux), by hand."""
    runs = tmp_path / "runs"
    dev = {"x": [0.6, 0.4, 0.6, 0.4], "y": [0.5, 0.5, 0.5, 0.5]}  # dev picks x, y, x, y
    test = {"x": [0.50, 0.52, 0.54, 0.56], "y": [0.70, 0.40, 0.70, 0.40]}  # test would pick y, x, y, x
    stack = {"ncbi": [0.60, 0.45, 0.58, 0.50], "linnaeus": [0.30, 0.50, 0.66, 0.38]}

    def write(name, corpus, scheme, aux, p, f1, dev_f1):
        d = runs / name
        d.mkdir(parents=True)
        (d / "results.json").write_text(json.dumps({
            "grid": {"dataset": corpus, "multitask": scheme},
            "config": {"size": 200, "partition": p, "seed": 42, "aux": aux, "dataset": {"name": corpus}},
            "partition": {"sha256": f"{corpus}{p}", "partition": p}, "compute": {"init_seed": 42},
            "dev_monitor": dev_f1, "test": {"micro": {"f1": f1}}, "wall_time_s": 1.0}))

    for corpus in stack:
        for p in range(4):
            for a in dev:
                write(f"{corpus}-aux-{a}{p}", corpus, "singleaux", [a], p, test[a][p], dev[a][p])
            write(f"{corpus}-stack{p}", corpus, "munch_stack", ["x", "y"], p, stack[corpus][p], 0.9)
    claim = {"id": 20, "paper": "P", "source": "Table 2", "statement": "Stack > SingleAux", "runs": ["runs"],
             "key": "multitask", "method": "munch_stack", "baseline": "singleaux", "metric": "test.micro.f1",
             "relation": ">", "select_on_dev": "aux", "average_over": "dataset"}
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({"claims": [claim, {**claim, "id": 21, "where": {"dataset": "ncbi"}}]}))
    chosen = np.array([test["x"][0], test["y"][1], test["x"][2], test["y"][3]])
    per_corpus = {c: np.array(v) - chosen for c, v in stack.items()}
    (both, ncbi) = judge_all(path)[1]
    expected = (per_corpus["ncbi"] + per_corpus["linnaeus"]) / 2
    assert both.n == 4 and both.mean == pytest.approx(float(expected.mean()))
    assert both.p == pytest.approx(stats.ttest_1samp(expected, 0.0, alternative="greater").pvalue)
    assert ncbi.mean == pytest.approx(float(per_corpus["ncbi"].mean()))
    (runs / "ncbi-aux-y3" / "results.json").unlink()  # a stopped sweep: partition 3 offers x only
    with pytest.raises(SystemExit, match="offers different aux values on different partitions"):
        judge_all(path)
    del claim["select_on_dev"]
    path.write_text(yaml.safe_dump({"claims": [claim]}))
    with pytest.raises(SystemExit, match="aux"):
        judge_all(path)


def test_the_robust_second_analysis_is_scipys_wilcoxon_signed_rank_test_in_each_direction():
    """Δ = (0.03, 0.01, 0.04, -0.01, 0.02): ranks of |Δ| 4, 1.5, 5, 1.5, 3 (ties share), W+ = 13.5;
    `>`: the claim's p is scipy's one-sided `greater` test of Δ, its reverse's the `less` one; `>>`:
    the same of Δ − margin."""
    from scipy import stats as sps

    from ner_lightning.report.claims import Judged, wilcoxon_p

    d = (0.03, 0.01, 0.04, -0.01, 0.02)
    j = Judged({"relation": ">"}, 5, 0.018, 0, 0, 0, 0, 0, 0, 0.019, deltas=d)
    assert wilcoxon_p(j) == (sps.wilcoxon(d, alternative="greater").pvalue, sps.wilcoxon(d, alternative="less").pvalue)
    assert sps.wilcoxon(d, alternative="greater").statistic == 13.5
    wide = Judged({"relation": ">>", "margin": 0.005}, 5, 0.018, 0, 0, 0, 0, 0, 0, 0.019, deltas=d)
    shifted = [x - 0.005 for x in d]
    assert wilcoxon_p(wide) == (sps.wilcoxon(shifted, alternative="greater").pvalue,
                                sps.wilcoxon(shifted, alternative="less").pvalue)

"""The post-hoc block's numbers against hand computation (ner_lightning/report/study_diagnostics.py):
leave-one-out influence with its t and p, the registered α per direction, the lenient-only spans
and how many are correct."""
import math

import pytest
from scipy import stats

from ner_lightning.report.study_diagnostics import direction_alpha, influence


def test_influence_is_the_leave_one_out_mean_sd_t_and_p_computed_by_hand():
    deltas = {"200": 0.010, "201": 0.012, "202": 0.008, "203": -0.060, "204": 0.011}
    got = influence(deltas, bound=0.0)
    assert got["partition"] == "203" and got["delta"] == -0.060
    rest = [0.010, 0.012, 0.008, 0.011]
    mean = sum(rest) / 4
    sd = math.sqrt(sum((v - mean) ** 2 for v in rest) / 3)
    t = mean / (sd / 2)
    assert got["mean_without"] == pytest.approx(0.01025) and got["sd_without"] == pytest.approx(sd)
    assert got["t_without"] == pytest.approx(t) and got["p_without"] == pytest.approx(stats.t.sf(t, 3))
    assert got["p_reverse_without"] == pytest.approx(stats.t.cdf(t, 3))
    loo = [(sum(deltas.values()) - v) / 4 for v in deltas.values()]
    assert got["loo_range"] == pytest.approx([min(loo), max(loo)]) and max(loo) == pytest.approx(0.01025)
    with_margin = influence(deltas, bound=0.05)
    assert with_margin["t_without"] == pytest.approx((mean - 0.05) / (sd / 2))


def test_the_registered_alpha_per_direction_is_the_familys_over_its_two_m_directions():
    claims = [{"paper": "MoM", "relation": ">"}, {"paper": "MoM", "relation": ">"}, {"paper": "AUC-2T", "relation": ">>"}]
    plan = {"alpha": 0.05}
    assert direction_alpha(plan, claims, claims[0]) == pytest.approx(0.0125)
    assert direction_alpha(plan, claims, claims[2]) == pytest.approx(0.025)
    assert direction_alpha({"alpha": 0.05, "alpha_split": {"MoM": 0.02}}, claims, claims[0]) == pytest.approx(0.005)


def test_the_committed_study_block_says_what_a_reviewer_recomputed(monkeypatch):
    """The confirmatory study's post-hoc numbers as an independent re-analysis of its 120 cells
    gives them: C1's exact stage-wise p of the margin equals the t-test's, C4 without partition 208
    has the reverse p 0.0014, OVA-AUC's 62,365 lenient-only spans are 9.7 % correct, CE's 12,116
    27.4 %; the repeated intervals are the main table's intervals at the level."""
    from pathlib import Path

    from ner_lightning.study.runner import run_study

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(root)
    record = run_study(Path("docs/results/study_confirmatory.yaml"),
                       folder=Path("docs/results/runs/study_confirmatory"), replay=True)
    d = record["diagnostics"]
    c1 = d["C1 AUC-2T"]["adjusted"]
    first = record["looks"][0]["claims"]["C1 AUC-2T"]
    assert c1["method"] == "exact" and c1["p_reverse"] == pytest.approx(first["p_reverse"], rel=1e-9)
    assert c1["repeated_interval"] == pytest.approx(first["interval_at_level"], abs=1e-9)
    assert c1["coverage"] == pytest.approx(0.95) and d["C4 MoM vs CE"]["adjusted"]["coverage"] == pytest.approx(0.975)
    c4 = d["C4 MoM vs CE"]["influence"]
    assert c4["partition"] == "208" and c4["p_reverse_without"] == pytest.approx(0.0014, abs=5e-5)
    ova, ce = d["C2 OVA-AUC"]["scorer"]["ova_auc"], d["C2 OVA-AUC"]["scorer"]["ce"]
    assert ova["lenient_only"] == 62_365 and ova["lenient_only_correct"] == pytest.approx(0.097, abs=5e-4)
    assert ce["lenient_only"] == 12_116 and ce["lenient_only_correct"] == pytest.approx(0.274, abs=5e-4)

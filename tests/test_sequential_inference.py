"""Estimates after a group-sequential stop (ner_lightning/report/sequential_inference.py): the
fixed-sample case against scipy's noncentral t, the stage-wise p and interval's coverage, and the
median-unbiasedness of the estimate over 10⁵ simulated studies of the confirmatory study's design."""
import math

import numpy as np
import pytest
from scipy import stats

from ner_lightning.report.sequential_inference import (
    Design,
    NullDraws,
    adjusted,
    outcomes,
    repeated_interval,
    tail,
    tail_many,
)

# The confirmatory study's design (docs/results/replication.md): looks at 5, 10, 15, 20
# partitions, Pocock-type spending of 0.025 per direction, t-exact boundaries.
STAGES = (5, 10, 15, 20)
CRITICAL = (3.8774, 2.9575, 2.7263, 2.6200)
POCOCK = Design(STAGES, tuple(float(stats.t.sf(c, n - 1)) for c, n in zip(CRITICAL, STAGES)))


@pytest.mark.parametrize("bound", [0.0, 0.05])
def test_one_look_gives_scipys_noncentral_t_estimate_and_the_t_tests_p_of_the_margin(bound):
    """With one look nothing earlier could stop: F(θ) = P(T ≥ t*) under a noncentral t, in closed
    form, so θ̂ = (Δ̂ − b)/σ and its interval are where scipy's noncentral t puts them (its median
    and quantiles at t*), and p is the t-test's of Δ ≤ b — the margin b, not 0."""
    design = Design((8,), (0.025,))
    mean, sd, n = 0.3, 0.5, 8
    got = adjusted(design, 0, mean, sd, bound=bound)
    t_obs = (mean - bound) / (sd / math.sqrt(n))
    assert got["method"] == "exact" and got["p_se"] == 0
    assert stats.nct.median(n - 1, got["theta"] * math.sqrt(n)) == pytest.approx(t_obs, abs=1e-6)
    assert stats.nct.ppf(0.975, n - 1, got["theta_interval"][0] * math.sqrt(n)) == pytest.approx(t_obs, abs=1e-6)
    assert stats.nct.ppf(0.025, n - 1, got["theta_interval"][1] * math.sqrt(n)) == pytest.approx(t_obs, abs=1e-6)
    assert got["p"] == pytest.approx(stats.t.sf(t_obs, n - 1), rel=1e-9)
    if bound:  # the margin matters: the p of Δ ≤ 0 is another number
        assert got["p"] - stats.t.sf(mean / (sd / math.sqrt(n)), n - 1) > 0.03  # 0.100 against 0.067
    # the repeated interval does not depend on b: mean ± c · sd / √n
    c = stats.t.ppf(1 - 0.025, n - 1)
    assert got["repeated_interval"] == pytest.approx([mean - c * sd / math.sqrt(n), mean + c * sd / math.sqrt(n)])


def test_a_simulated_p_comes_with_its_monte_carlo_standard_error():
    draws = NullDraws(STAGES, 50_000, seed=5)
    got = adjusted(POCOCK, 1, 0.5, 0.5, draws=draws, final=False)
    assert got["method"].startswith("simulated") and got["p_se"] == pytest.approx(
        math.sqrt(got["p"] * (1 - got["p"]) / 50_000))


@pytest.mark.parametrize("delta, sigma, bound", [(-0.053, 0.029, 0.05), (0.03, 0.03, 0.05), (0.0, 1.0, 0.0),
                                                 (0.6, 1.0, 0.0)])
def test_the_repeated_interval_of_the_stopping_look_covers_delta_as_claimed(delta, sigma, bound):
    """Studies of the confirmatory design on normal differences (Δ, σ), stopped by the claim's
    t test against its bound b: the Δ-scale interval the module reports at the stopping look holds
    Δ in at least 1 − 2α_d = 95 % of them (3 SE tolerance), and the intervals of all four looks
    together hold it in 95 % within 3 SE (the boundaries are exact for the t statistic) — where the
    plug-in θ interval × SD centred on b of the old page covered far more (2.2× as wide at C1)."""
    studies, rng = 20_000, np.random.default_rng(hash((delta, sigma, bound)) % 2**32)
    x = rng.normal(delta, sigma, (studies, STAGES[-1]))
    n = np.asarray(STAGES)
    means = np.stack([x[:, :k].mean(1) for k in STAGES], 1)
    sds = np.stack([x[:, :k].std(1, ddof=1) for k in STAGES], 1)
    look, _ = outcomes((means - bound) / (sds / np.sqrt(n)), POCOCK.critical)
    covered = 0
    for i in range(studies):
        k = int(look[i])
        low, high = repeated_interval(POCOCK, k, float(means[i, k]), float(sds[i, k]))
        covered += low <= delta <= high
    se = math.sqrt(0.95 * 0.05 / studies)
    assert covered / studies >= 0.95 - 3 * se
    together = np.all(np.abs((means - delta) / (sds / np.sqrt(n))) < POCOCK.critical, axis=1).mean()
    assert abs(together - 0.95) < 3 * se + 0.002  # + the boundaries' own simulation error


def test_a_stop_in_the_reverse_direction_reads_as_such():
    """A claim that crossed the reverse boundary at the second look: its estimate and interval lie
    below 0, the stage-wise p of the claim's direction is near 1 and its reverse's within the
    direction's α (0.025: it adds what the first look could have spent)."""
    draws = NullDraws(STAGES, 200_000, seed=4)
    got = adjusted(POCOCK, 1, -0.5, 0.5, draws=draws, final=False)
    assert got["theta_interval"][0] < got["theta"] < got["theta_interval"][1] < 0
    assert got["p"] > 0.98 and POCOCK.levels[1] < got["p_reverse"] < 0.025


def test_the_many_outcomes_form_is_the_single_one():
    draws = NullDraws(STAGES, 50_000, seed=2)
    looks, t_obs = np.array([0, 1, 2, 3, 3, 1]), np.array([4.1, 3.0, -2.8, 1.0, -0.5, -3.1])
    many = tail_many(0.4, POCOCK, draws, looks, t_obs)
    for i, (k, t) in enumerate(zip(looks, t_obs)):
        assert many[i] == pytest.approx(tail(0.4, POCOCK, draws, int(k), float(t)), abs=1e-12)
    assert tail(0.4, POCOCK, draws, 0, 4.1) < tail(0.4, POCOCK, draws, 3, 1.0) < tail(0.4, POCOCK, draws, 1, -3.1)


@pytest.mark.parametrize("theta", [0.0, 0.5, 0.9])
def test_the_stagewise_estimate_is_median_unbiased_over_simulated_studies(theta):
    """10⁵ studies of the Pocock design at a known θ (Δ = θ, σ = 1): the estimate θ̂ of each lies at
    or below θ exactly when F(θ) ≥ ½ for its outcome (F increases in θ), so the share of studies
    with F(θ) ≥ ½ is P(θ̂ ≤ θ), which is ½ within Monte-Carlo error (3 SE) when θ̂ is median-
    unbiased. The naive mean of the same studies is not (its median is off by more than 10 SE at
    θ > 0: stopping early keeps the studies whose first differences ran high)."""
    studies = NullDraws(STAGES, 100_000, seed=11)
    look, t_stop = outcomes(studies.t(theta), POCOCK.critical)
    reference = NullDraws(STAGES, 400_000, seed=12)
    share = float(np.mean(tail_many(theta, POCOCK, reference, look, t_stop) >= 0.5))
    se = 0.5 / math.sqrt(len(look))
    assert abs(share - 0.5) < 3 * se + 0.002  # + the reference simulation's own error
    naive = studies.u(theta)[np.arange(len(look)), look]
    if theta > 0:
        assert abs(float(np.mean(naive <= theta)) - 0.5) > 10 * se


def test_the_estimates_of_a_few_studies_solve_their_equation():
    """θ̂ from bisection: F(θ̂) = ½ within the draws' resolution, and the interval holds it."""
    draws = NullDraws(STAGES, 100_000, seed=3)
    for look, mean, sd in ((0, 0.9, 0.4), (1, 0.5, 0.5), (3, 0.1, 0.6), (1, -0.5, 0.5)):
        got = adjusted(POCOCK, look, mean, sd, draws=draws, final=look == 3)
        t_obs = mean / (sd / math.sqrt(STAGES[look]))
        assert tail(got["theta"], POCOCK, draws, look, t_obs) == pytest.approx(0.5, abs=0.003)
        assert got["theta_interval"][0] < got["theta"] < got["theta_interval"][1]

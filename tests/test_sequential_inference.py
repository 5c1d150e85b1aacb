"""Estimates after a group-sequential stop (ner_lightning/report/sequential_inference.py): the
fixed-sample case against scipy's noncentral t, the stage-wise p and interval's coverage, and the
median-unbiasedness of the estimate over 10⁵ simulated studies of the confirmatory study's design."""
import math

import numpy as np
import pytest
from scipy import optimize, stats

from ner_lightning.report.sequential_inference import Design, NullDraws, adjusted, outcomes, tail, tail_many

# The confirmatory study's design (docs/results/replication.md): looks at 5, 10, 15, 20
# partitions, Pocock-type spending of 0.025 per direction, t-exact boundaries.
STAGES = (5, 10, 15, 20)
CRITICAL = (3.8774, 2.9575, 2.7263, 2.6200)
POCOCK = Design(STAGES, tuple(float(stats.t.sf(c, n - 1)) for c, n in zip(CRITICAL, STAGES)))


def test_one_look_gives_the_noncentral_t_estimate_and_the_t_tests_p():
    """With one look nothing earlier could stop: F(θ) = P(T ≥ t*) under a noncentral t, so the
    estimate and interval are where scipy's noncentral t puts them and p is the t-test's."""
    design = Design((8,), (0.025,))
    mean, sd, n = 0.3, 0.5, 8
    got = adjusted(design, 0, mean, sd, draws=NullDraws((8,), 400_000, seed=1))
    t_obs = mean / (sd / math.sqrt(n))

    def theta_at(q: float) -> float:
        return optimize.brentq(lambda th: stats.nct.sf(t_obs, n - 1, th * math.sqrt(n)) - q, -5, 5)

    assert got["estimate"] == pytest.approx(theta_at(0.5) * sd, abs=0.004)
    assert got["interval"][0] == pytest.approx(theta_at(0.025) * sd, abs=0.008)
    assert got["interval"][1] == pytest.approx(theta_at(0.975) * sd, abs=0.008)
    assert got["p"] == pytest.approx(stats.t.sf(t_obs, n - 1), abs=0.002)


def test_a_stop_in_the_reverse_direction_reads_as_such():
    """A claim that crossed the reverse boundary at the second look: its estimate and interval lie
    below 0, the stage-wise p of the claim's direction is near 1 and its reverse's within the
    direction's α (0.025: it adds what the first look could have spent)."""
    draws = NullDraws(STAGES, 200_000, seed=4)
    got = adjusted(POCOCK, 1, -0.5, 0.5, draws=draws, final=False)
    assert got["interval"][0] < got["estimate"] < got["interval"][1] < 0
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
        assert tail(got["estimate"] / sd, POCOCK, draws, look, t_obs) == pytest.approx(0.5, abs=0.003)
        assert got["interval"][0] < got["estimate"] < got["interval"][1]

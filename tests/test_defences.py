"""The defences the attack is measured against: what each releases agrees with the public model the
attacker scores it by, and the evaluation's helpers behave as documented."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.attack import Defence, observation_probabilities, yes_probabilities
from mbeacon.attack.run import adaptive_stop, released_answers, utility
from mbeacon.attack.tracker_eval import DefenceStreams
from mbeacon.privacy.online_pmw import online_pmw
from mbeacon.privacy.svt2_margin import SVT2MarginParams, svt2_margin_batch
from mbeacon.privacy.svt2_noisy import SVT2NoisyParams, svt2_noisy_batch

RANDOMISED = [
    Defence("svt2-single", epsilon=3.0, c=2, threshold=1),
    Defence("svt2-redraw", epsilon=10.0, c=3, threshold=5),
    Defence("noisy-count", epsilon=20.0, threshold=2, query_cap=10),
    Defence("flip", flip=0.4, threshold=1),
    Defence("svt2-margin", epsilon=10.0, c=3, threshold=5, margin=3.0),
    Defence("svt2-noisy", epsilon=10.0, c=3, threshold=5, margin=2.0, release_share=0.4),
    Defence("online-pmw", epsilon=10.0, c=3, threshold=5, margin=2.0, n=60),
    Defence("cohort-pmw", epsilon=10.0, c=3, threshold=5, margin=2.0, n=60, quota=2),
]


@pytest.mark.parametrize("defence", RANDOMISED, ids=lambda d: d.label)
def test_release_frequencies_match_the_attackers_model(defence: Defence) -> None:
    """The first query of a stream, over 40,000 fresh runs, is 1 as often as the model says
    (the model is exact for a first query; tolerance 4.5 binomial sd)."""
    runs = 40_000
    rng = np.random.default_rng(7)
    for alpha, beta in [(0, 0.0), (1, 0.3), (3, 0.9), (6, 2.5), (12, 12.0), (40, 0.2)]:
        observations = defence.release(np.full((runs, 1), alpha), np.full((runs, 1), beta), rng)
        seen = float(np.mean(observations[:, 0] == 1))
        model = float(defence.p_observe_one(np.array(alpha), np.array(beta)))
        sd = np.sqrt(max(model * (1 - model), 1e-4) / runs)
        assert abs(seen - model) <= 4.5 * sd + 1e-3, (alpha, beta, seen, model)


def test_exact_defences_release_the_true_answer_and_prior_only_the_prior() -> None:
    alpha = np.array([[0, 1, 2, 5, 9]])
    beta = np.array([[3.0, 0.0, 7.0, 0.5, 2.0]])
    assert Defence("none").release(alpha, beta).tolist() == [[0, 1, 1, 1, 1]]
    assert Defence("suppression", threshold=3).release(alpha, beta).tolist() == [[0, 0, 0, 1, 1]]
    assert Defence("prior-only", threshold=2).release(alpha, beta).tolist() == [[1, 0, 1, 0, 1]]


def test_noisy_count_answers_at_most_its_query_cap() -> None:
    d = Defence("noisy-count", epsilon=1.0).with_cap(3)
    out = d.release(np.ones((4, 5), dtype=int), np.zeros((4, 5)), np.random.default_rng(0))
    assert np.all(out[:, 3:] == -1) and np.all(out[:, :3] >= 0)
    with pytest.raises(ValueError, match="query cap"):
        Defence("noisy-count", epsilon=1.0).release(np.ones((1, 1), dtype=int), np.zeros((1, 1)))


def test_svt2_stops_after_c_positives_and_its_flags_become_answers() -> None:
    d = Defence("svt2-single", epsilon=50.0, c=2)
    alpha = np.full((50, 30), 40)  # the data says yes, the prior says no: every query is a discovery
    beta = np.zeros((50, 30))
    flags = d.release(alpha, beta, np.random.default_rng(1))
    assert np.all((flags == 1).sum(axis=1) <= 2)
    answers = released_answers(d, flags, beta)
    assert np.all(answers[flags == 1] == 1) and np.all(answers[flags == 0] == 0)
    assert np.all(answers[flags == -1] == -1)


def test_the_marginal_over_counts_matches_the_closed_form() -> None:
    """flip with p = 0 is the unprotected beacon: the generic marginalisation over the count's
    distribution must then reproduce the closed-form binomial probabilities."""
    pi = np.array([[0.001, 0.01, 0.05], [0.2, 0.5, 0.9]])
    member, non = observation_probabilities(Defence("flip", flip=0.0), pi, 0.0, 60, 0.07, min_pi=0.0)
    closed_member, closed_non = yes_probabilities(pi, 60, 1, 0.07, min_pi=0.0)
    np.testing.assert_allclose(member, closed_member, atol=1e-8)
    np.testing.assert_allclose(non, closed_non, atol=1e-8)


def test_svt2_answers_carry_little_information_at_small_epsilon() -> None:
    pi = np.full((1, 4), 0.005)
    strict = observation_probabilities(Defence("svt2-single", epsilon=0.5, c=5), pi, 0.5, 100, 0.05)
    loose = observation_probabilities(Defence("svt2-single", epsilon=200.0, c=5), pi, 0.5, 100, 0.05)
    gap = lambda pair: float(np.abs(np.log(pair[0] / pair[1])).max())  # noqa: E731
    assert gap(strict) < 0.1 < gap(loose)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(st.floats(-5, 5), min_size=6, max_size=6), min_size=1, max_size=5),
    st.floats(0.5, 4.0),
)
def test_adaptive_stop_freezes_scores_once_decisive(steps, bound) -> None:
    scores = np.cumsum(np.array(steps), axis=1)
    frozen, asked = adaptive_stop(scores, bound)
    for row, frozen_row, n in zip(scores, frozen, asked, strict=True):
        decisive = np.flatnonzero(np.abs(row) >= bound)
        stop = decisive[0] if decisive.size else row.size - 1
        assert n == stop + 1
        np.testing.assert_array_equal(frozen_row[: stop + 1], row[: stop + 1])
        assert np.all(frozen_row[stop:] == row[stop])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"name": "nothing"}, "unknown defence"),
        ({"name": "none", "threshold": 2}, "suppression"),
        ({"name": "svt2-single", "c": 5}, "epsilon"),
        ({"name": "svt2-redraw", "epsilon": 1.0}, "c must be"),
        ({"name": "noisy-count", "epsilon": float("inf")}, "epsilon"),
        ({"name": "flip", "flip": 1.5}, "flip probability"),
        ({"name": "suppression", "threshold": 0}, "threshold"),
        ({"name": "online-pmw", "epsilon": 1.0, "c": 5, "quota": 2}, "quota applies to cohort-pmw"),
        ({"name": "cohort-pmw", "epsilon": 1.0, "c": 5, "quota": 6}, "quota applies to cohort-pmw"),
    ],
)
def test_bad_settings_are_refused_with_the_reason(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        Defence(**kwargs)


@pytest.mark.parametrize("defence", RANDOMISED, ids=lambda d: d.label)
def test_the_trackers_streams_answer_as_the_model_says(defence: Defence) -> None:
    """The tracker's per-account defence (one query per run at a time) answers a first query as
    often as :meth:`Defence.p_observe_one` says (tolerance 4.5 binomial sd)."""
    runs = 40_000
    rng = np.random.default_rng(11)
    for alpha, beta in [(0, 0.0), (3, 0.9), (6, 2.5), (12, 12.0), (40, 0.2)]:
        if defence.is_pmw:
            # a uniform prior; the query [0, beta/N] has the synthetic count beta (up to the floor)
            def uniform(rows, lo, hi):
                return np.clip(hi, 0, 1) - np.clip(lo, 0, 1)

            streams = DefenceStreams(defence.with_cap(10), runs, rng, uniform)
            zeros = np.zeros(runs, dtype=np.int64)
            release, _ = streams.answer_full(
                np.arange(runs),
                np.full(runs, alpha),
                np.full(runs, beta),
                zeros,
                zeros * 0.0,
                zeros + beta / 60,
            )
            seen_obs = release.answers
        else:
            streams = DefenceStreams(defence.with_cap(10), runs, rng)
            seen_obs = streams.answer(np.arange(runs), np.full(runs, alpha), np.full(runs, beta))
        seen = float(np.mean(seen_obs == 1))
        model = float(defence.p_observe_one(np.array(alpha), np.array(beta)))
        sd = np.sqrt(max(model * (1 - model), 1e-4) / runs)
        assert abs(seen - model) <= 4.5 * sd + 1e-3, (alpha, beta, seen, model)


def test_the_sanitisers_release_through_their_privacy_modules() -> None:
    """Each new defence is its privacy module's batch release with the setting's parameters: the
    same seed gives the same answers, and the parameters promise the setting's epsilon."""
    alpha = np.array([[0, 3, 8, 2, 30, 1, 9]] * 50)
    beta = np.array([0.5, 6.0, 1.0, 4.0, 29.0, 9.0, 2.0])
    margin = Defence("svt2-margin", epsilon=10.0, c=2, threshold=5, margin=4.0)
    p = margin.svt2_params
    assert isinstance(p, SVT2MarginParams) and (p.margin_above, p.margin_below) == (4.0, 4.0)
    assert p.epsilon == pytest.approx(10.0)
    expected = svt2_margin_batch(alpha, beta, p, rng=np.random.default_rng(3))
    assert np.array_equal(margin.release(alpha, beta, np.random.default_rng(3)), expected)

    noisy = Defence("svt2-noisy", epsilon=10.0, c=2, threshold=5, margin=1.0, release_share=0.25)
    q = noisy.svt2_params
    assert isinstance(q, SVT2NoisyParams) and q.epsilon3 == pytest.approx(2.5)
    assert q.epsilon == pytest.approx(10.0)
    expected = svt2_noisy_batch(alpha, beta, q, rng=np.random.default_rng(4)).answers
    assert np.array_equal(noisy.release(alpha, beta, np.random.default_rng(4)), expected)

    pmw = Defence("online-pmw", epsilon=10.0, c=2, threshold=5, margin=1.0).with_cohort(40)
    assert pmw.pmw_params.epsilon == pytest.approx(10.0) and pmw.pmw_params.n == 40
    with pytest.raises(ValueError, match="cohort size"):
        Defence("online-pmw", epsilon=10.0, c=2, threshold=5).release(alpha, beta)


def test_online_pmw_release_follows_the_step_loop_at_probes_of_their_own() -> None:
    """The evaluation's Online PMW (every query at a probe of its own, two bins from the prior) has
    the law of :func:`mbeacon.privacy.online_pmw.online_pmw` on such a stream: per-query yes rates
    agree within 4.5 binomial sd over 3,000 runs each."""
    defence = Defence("online-pmw", epsilon=4.0, c=2, threshold=5, margin=1.0).with_cohort(40)
    params = defence.pmw_params
    alpha = np.array([0, 3, 8, 2, 30, 6])
    beta = np.array([0.5, 6.0, 1.0, 4.0, 29.0, 9.0])
    runs = 3_000
    batch = defence.release(np.tile(alpha, (runs, 1)), np.tile(beta, (runs, 1)), np.random.default_rng(5))
    names = [f"p{i}" for i in range(alpha.size)]
    priors = {name: np.array([b / params.n, 1 - b / params.n]) for name, b in zip(names, beta, strict=True)}
    rng = np.random.default_rng(6)
    loop = np.array(
        [online_pmw(names, np.zeros(6), np.ones(6), alpha, priors, params, rng).answers for _ in range(runs)]
    )
    for column in range(alpha.size):
        for value in (1, -1):
            a, b = np.mean(batch[:, column] == value), np.mean(loop[:, column] == value)
            sd = np.sqrt(max(a * (1 - a), 1e-3) * 2 / runs)
            assert abs(a - b) <= 4.5 * sd, (column, value, a, b)


def test_the_exploration_workload_zooms_in_at_a_few_probes_and_online_pmw_learns_there() -> None:
    """Several ranges per DMP, bins holding the cohort's mean; counts and the prior's expectation
    agree with the workload's own histograms; Online PMW answers it from one histogram per probe."""
    from mbeacon.attack.scenario import BINS, RANGES_PER_PROBE, exploration_workload
    from mbeacon.store.priors import prior_from_matrix

    rng = np.random.default_rng(2)
    reference = rng.beta(2, 5, (30, 80))
    cohort = rng.beta(2, 5, (30, 40))
    cohort[:3] = rng.beta(8, 2, (3, 40))  # three DMPs
    prior = prior_from_matrix(np.array([f"cg{i}" for i in range(30)]), reference, name="r")
    w = exploration_workload(cohort, prior, np.arange(30), np.random.default_rng(0), probes=3)
    assert len(w) == 3 * RANGES_PER_PROBE and np.bincount(w.probe).tolist() == [RANGES_PER_PROBE] * 3
    assert np.all((w.lo >= 0) & (w.lo < w.hi) & (w.hi <= BINS))
    assert np.allclose(w.histograms.sum(axis=1), 1.0) and np.all(w.histograms > 0)
    dmps = np.argsort(-np.abs(cohort.mean(axis=1) - prior.mean), kind="stable")[:3]
    assert set(dmps) == {0, 1, 2}
    for i in range(len(w)):
        values = cohort[dmps[w.probe[i]]]
        inside = (values >= w.lo[i] / BINS) & ((values < w.hi[i] / BINS) | (w.hi[i] == BINS))
        assert w.alpha[i] == inside.sum()
        assert w.beta[i] == pytest.approx(40 * w.histograms[w.probe[i], w.lo[i] : w.hi[i]].sum())
    # with almost no noise Online PMW answers every exploration query right (it tests each one
    # against its probe's histogram and measures the count where the histogram is wrong)
    sharp = Defence("online-pmw", epsilon=3000.0, c=len(w), threshold=5).with_cohort(40)
    assert utility(sharp, w, 20, np.random.default_rng(1)) >= 0.99

"""The defences the attack is measured against: what each releases agrees with the public model the
attacker scores it by, and the evaluation's helpers behave as documented."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.attack import Defence, observation_probabilities, yes_probabilities
from mbeacon.attack.run import adaptive_stop, released_answers

RANDOMISED = [
    Defence("svt2-single", epsilon=3.0, c=2, threshold=1),
    Defence("svt2-redraw", epsilon=10.0, c=3, threshold=5),
    Defence("noisy-count", epsilon=20.0, threshold=2, query_cap=10),
    Defence("flip", flip=0.4, threshold=1),
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
    ],
)
def test_bad_settings_are_refused_with_the_reason(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        Defence(**kwargs)

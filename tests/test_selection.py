"""Tests for private selection (:mod:`mbeacon.privacy.research.selection`): the exponential mechanism,
report-noisy-max, top-k and Durfee and Rogers' unknown-domain top-k (their pay-what-you-get
accounting and the composition bounds are tested in test_accounting.py).

Selection frequencies are compared with exact probabilities by chi-square (or exact binomial) tests
with fixed seeds and a p-value floor of 1e-4: deterministic, and a correct mechanism would fail for
one seed in 10^4.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest
from _stats import pooled_chisquare
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from mbeacon.privacy.noise import discrete_laplace_pmf, discrete_laplace_sf
from mbeacon.privacy.research.selection import (
    TopKRelease,
    exponential_mechanism,
    exponential_mechanism_batch,
    report_noisy_max,
    report_noisy_max_batch,
    top_k,
    top_k_batch,
    unknown_domain_top_k,
    unknown_domain_top_k_restricted,
)

SEED = 1618033
P_FLOOR = 1e-4
HUGE_EPS = 1e12
RUNS = 50_000
SCORES = np.array([0.0, 1.0, 2.0, 3.0, 5.0, 5.0, -2.0])


def softmax(scores: np.ndarray, temperature_inv: float) -> np.ndarray:
    w = np.exp(temperature_inv * (scores - scores.max()))
    return w / w.sum()


def exact_report_noisy_max(scores: np.ndarray, scale_units: float) -> np.ndarray:
    """Exact P(report_noisy_max = i) for integer scores (in lattice units) and DLap(scale) noise,
    ties broken towards the lowest index: i wins with noise x iff every j < i has u_j + N_j < u_i + x
    and every j > i has u_j + N_j <= u_i + x."""
    u = np.asarray(scores, dtype=np.int64)
    r = math.ceil(50 * scale_units) + int(u.max() - u.min()) + 1
    x = np.arange(-r, r + 1)
    probs = np.zeros(u.size)
    for i in range(u.size):
        p = discrete_laplace_pmf(x, scale_units)
        for j in range(u.size):
            if j == i:
                continue
            m = u[i] + x - u[j]  # need N_j < m (j < i) or N_j <= m (j > i)
            p = p * (1.0 - discrete_laplace_sf(m if j < i else m + 1, scale_units))
        probs[i] = p.sum()
    assert probs.sum() == pytest.approx(1.0, abs=1e-9)
    return probs


def peeled_em_probabilities(scores: np.ndarray, temperature_inv: float, k: int) -> dict[tuple, float]:
    """P(ordered selection = s) for k exponential mechanisms peeled one after another."""
    out = {}
    for seq in itertools.permutations(range(len(scores)), k):
        remaining = list(range(len(scores)))
        prob = 1.0
        for item in seq:
            p = softmax(scores[remaining], temperature_inv)
            prob *= p[remaining.index(item)]
            remaining.remove(item)
        out[seq] = prob
    return out


# --- exponential mechanism -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("eps", "sensitivity", "monotonic"),
    [(1.0, 1.0, False), (1.0, 1.0, True), (0.4, 2.0, False), (3.0, 0.5, True)],
)
def test_exponential_mechanism_matches_softmax(eps: float, sensitivity: float, monotonic: bool) -> None:
    # P(i) = exp(eps u_i / (2D)) / sum (exp(eps u_i / D) when monotonic)
    probs = softmax(SCORES, eps / ((1 if monotonic else 2) * sensitivity))
    kwargs = {"sensitivity": sensitivity, "monotonic": monotonic}
    picks = exponential_mechanism_batch(SCORES, eps, runs=RUNS, rng=SEED, **kwargs)
    assert picks.shape == (RUNS,)
    assert pooled_chisquare(np.bincount(picks, minlength=SCORES.size), probs) > P_FLOOR
    gen = np.random.default_rng(SEED + 1)
    single = [exponential_mechanism(SCORES, eps, rng=gen, **kwargs) for _ in range(3000)]
    assert all(type(i) is int for i in single)
    assert pooled_chisquare(np.bincount(single, minlength=SCORES.size), probs) > P_FLOOR


def test_exponential_mechanism_test_has_power() -> None:
    # the monotonic scale (exp(eps u / D)) is clearly distinguishable from the general one
    picks = exponential_mechanism_batch(SCORES, 1.0, runs=RUNS, rng=SEED)
    assert pooled_chisquare(np.bincount(picks, minlength=SCORES.size), softmax(SCORES, 1.0)) < 1e-6


@pytest.mark.slow
def test_exponential_mechanism_matches_softmax_secure_large_sample() -> None:
    scores = np.linspace(0, 6, 13)
    probs = softmax(scores, 1.0 / 2)
    picks = exponential_mechanism_batch(scores, 1.0, runs=2_000_000)
    assert pooled_chisquare(np.bincount(picks, minlength=scores.size), probs) > 1e-6  # fresh randomness


@settings(max_examples=60, deadline=None)
@given(
    scores=st.lists(st.integers(-50, 50), min_size=1, max_size=20),
    eps=st.floats(0.01, 100.0),
    runs=st.integers(1, 20),
    seed=st.integers(0, 2**32 - 1),
)
def test_selection_returns_valid_indices(scores, eps, runs, seed) -> None:
    for batch in (exponential_mechanism_batch, report_noisy_max_batch):
        picks = batch(scores, eps, runs=runs, rng=seed)
        assert picks.shape == (runs,)
        assert np.issubdtype(picks.dtype, np.integer)
        assert np.all((picks >= 0) & (picks < len(scores)))
    for single in (exponential_mechanism, report_noisy_max):
        assert 0 <= single(scores, eps, rng=seed) < len(scores)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.lists(st.integers(-50, 50), min_size=4, max_size=4), min_size=1, max_size=6),
    seed=st.integers(0, 2**32 - 1),
)
def test_huge_epsilon_selects_the_argmax_per_row(rows, seed) -> None:
    scores = np.asarray(rows, dtype=float)
    expected = np.argmax(scores, axis=1)  # first maximum: report_noisy_max's documented tie rule
    np.testing.assert_array_equal(
        report_noisy_max_batch(scores, HUGE_EPS, runs=len(rows), rng=seed), expected
    )
    if all(np.sum(row == row.max()) == 1 for row in scores):  # Gumbel ties are broken by noise
        np.testing.assert_array_equal(
            exponential_mechanism_batch(scores, HUGE_EPS, runs=len(rows), rng=seed), expected
        )


# --- report noisy max ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("eps", "sensitivity", "monotonic"),
    [(1.0, 1.0, False), (1.0, 1.0, True), (0.5, 2.0, False), (2.0, 1.0, False)],
)
def test_report_noisy_max_matches_exact_distribution(eps: float, sensitivity: float, monotonic: bool) -> None:
    units = np.array([0, 2, 1, 5, 5, 3, -1])  # contains a tie at the maximum
    scores = units * sensitivity  # on the noise lattice, so comparisons are exact in units
    scale_units = (1 if monotonic else 2) / eps  # Lap(2D/eps) (Lap(D/eps) monotonic), in units of D
    probs = exact_report_noisy_max(units, scale_units)
    kwargs = {"sensitivity": sensitivity, "monotonic": monotonic}
    picks = report_noisy_max_batch(scores, eps, runs=RUNS, rng=SEED, **kwargs)
    assert pooled_chisquare(np.bincount(picks, minlength=units.size), probs) > P_FLOOR
    gen = np.random.default_rng(SEED + 2)
    single = [report_noisy_max(scores, eps, rng=gen, **kwargs) for _ in range(3000)]
    assert pooled_chisquare(np.bincount(single, minlength=units.size), probs) > P_FLOOR


def test_report_noisy_max_prefers_the_max() -> None:
    scores = np.array([0, 10, 3, 7, 9])
    counts = np.bincount(report_noisy_max_batch(scores, 1.0, runs=RUNS, rng=SEED), minlength=5)
    assert int(np.argmax(counts)) == 1
    # selection frequency increases with the score (the exact probabilities are far apart, each
    # count is Binomial with sd < 112 at 50k runs, and adjacent gaps exceed 1000)
    exact = exact_report_noisy_max(scores, 2.0)
    assert list(np.argsort(exact)) == list(np.argsort(scores))
    assert list(np.argsort(counts)) == list(np.argsort(scores))
    # lowest index wins exact ties: equal scores, the first is selected strictly more often
    tied = exact_report_noisy_max(np.array([4, 4]), 2.0)
    assert tied[0] > tied[1]


# --- top-k -----------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    scores=st.lists(st.integers(-50, 50), min_size=1, max_size=15),
    eps=st.floats(0.01, 100.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_top_k_returns_k_distinct_valid_indices(data, scores, eps, seed) -> None:
    k = data.draw(st.integers(1, len(scores)))
    chosen = top_k(scores, k, eps, rng=seed)
    assert chosen.shape == (k,)
    assert np.unique(chosen).size == k
    assert np.all((chosen >= 0) & (chosen < len(scores)))
    batch = top_k_batch(scores, k, eps, runs=5, rng=seed)
    assert batch.shape == (5, k)
    assert all(np.unique(row).size == k for row in batch)


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    scores=st.lists(st.integers(-1000, 1000), min_size=1, max_size=15, unique=True),
    seed=st.integers(0, 2**32 - 1),
)
def test_top_k_huge_epsilon_is_the_true_top_k_in_order(data, scores, seed) -> None:
    k = data.draw(st.integers(1, len(scores)))
    expected = list(np.argsort(-np.asarray(scores), kind="stable")[:k])
    assert list(top_k(scores, k, HUGE_EPS, rng=seed)) == expected
    assert [list(r) for r in top_k_batch(scores, k, HUGE_EPS, runs=3, rng=seed)] == [expected] * 3


@pytest.mark.parametrize(("k", "eps", "n_items"), [(2, 2.0, 6), (3, 3.0, 5)])
def test_top_k_has_the_peeled_exponential_mechanism_distribution(k: int, eps: float, n_items: int) -> None:
    """Durfee and Rogers, Lemma 4.2: the k largest Gumbel-perturbed scores, best first, are
    distributed as k exponential mechanisms at eps/k peeled in turn. The ordered tuples test both the
    set and the decreasing order (reversing the order gives a different distribution)."""
    scores = SCORES[:n_items]
    temp_inv = (eps / k) / 2
    probs = peeled_em_probabilities(scores, temp_inv, k)
    keys = list(probs)
    picks = top_k_batch(scores, k, eps, runs=RUNS, rng=SEED)
    counts = Counter(tuple(int(i) for i in row) for row in picks)
    observed = np.array([counts.get(key, 0) for key in keys])
    assert observed.sum() == RUNS
    assert pooled_chisquare(observed, np.array([probs[key] for key in keys])) > P_FLOOR
    # reversed order does not fit: the test sees the order
    reversed_obs = np.array([counts.get(key[::-1], 0) for key in keys])
    assert pooled_chisquare(reversed_obs, np.array([probs[key] for key in keys])) < 1e-6
    # the first element alone is the exponential mechanism at eps / k
    first = np.bincount(picks[:, 0], minlength=scores.size)
    assert pooled_chisquare(first, softmax(scores, temp_inv)) > P_FLOOR
    gen = np.random.default_rng(SEED + 3)
    single_first = [int(top_k(scores, k, eps, rng=gen)[0]) for _ in range(3000)]
    assert (
        pooled_chisquare(np.bincount(single_first, minlength=scores.size), softmax(scores, temp_inv))
        > P_FLOOR
    )


# --- argument validation ---------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [0.0, -1.0, math.nan, math.inf])
def test_selection_rejects_bad_epsilon(eps: float) -> None:
    for fn in (exponential_mechanism, report_noisy_max):
        with pytest.raises(ValueError):
            fn([1, 2, 3], eps, rng=1)
    with pytest.raises(ValueError):
        top_k([1, 2, 3], 2, eps, rng=1)


@pytest.mark.parametrize("scores", [[], [1.0, math.nan], [math.inf, 1.0], np.zeros((2, 2, 2))])
def test_selection_rejects_bad_scores(scores) -> None:
    for fn in (exponential_mechanism, report_noisy_max):
        with pytest.raises(ValueError):
            fn(scores, 1.0, rng=1)
    with pytest.raises(ValueError):
        top_k(scores, 1, 1.0, rng=1)


@pytest.mark.parametrize("k", [0, -1, 4])
def test_top_k_rejects_bad_k(k: int) -> None:
    with pytest.raises(ValueError):
        top_k([1, 2, 3], k, 1.0, rng=1)


# --- Durfee and Rogers: unknown-domain top-k -------------------------------------------------------

histograms = st.dictionaries(st.text("abcdefghij", min_size=1, max_size=3), st.integers(0, 200), max_size=30)


def _kbar_th_count(histogram: dict, kbar: int) -> float:
    counts = sorted(histogram.values(), reverse=True)
    return counts[min(kbar, len(counts)) - 1]


@settings(max_examples=100, deadline=None)
@given(
    histogram=histograms,
    k=st.integers(1, 10),
    kbar=st.integers(1, 15),
    eps=st.one_of(st.floats(0.05, 10.0), st.just(HUGE_EPS)),
    delta=st.floats(1e-9, 0.5),
    restricted=st.integers(1, 5),
    seed=st.integers(0, 2**32 - 1),
)
def test_unknown_domain_release_properties(histogram, k, kbar, eps, delta, restricted, seed) -> None:
    alg2 = unknown_domain_top_k(histogram, k, kbar, eps, delta, rng=seed)
    alg1 = unknown_domain_top_k_restricted(
        histogram, k, kbar, eps, delta, restricted_sensitivity=restricted, rng=seed
    )
    for release in (alg1, alg2):
        assert isinstance(release, TopKRelease)
        assert len(release) == len(release.items) <= min(k, kbar)
        assert len(set(release.items)) == len(release.items)
        if release.items:  # only items of the true top-kbar (any of them, when counts tie)
            cutoff = _kbar_th_count(histogram, kbar)
            assert all(histogram[item] >= cutoff for item in release.items)
    assert alg2.counts is None
    assert alg1.counts is not None and len(alg1.counts) == len(alg1.items)
    assert all(isinstance(c, float) for c in alg1.counts)
    assert list(alg1.counts) == sorted(alg1.counts, reverse=True)  # best first
    for item, count in zip(alg1.items, alg1.counts, strict=True):
        assert (count - histogram[item]) == pytest.approx(round(count - histogram[item]))  # lattice noise


def test_empty_histogram_releases_nothing() -> None:
    assert unknown_domain_top_k({}, 3, 5, 1.0, 1e-6, rng=1) == TopKRelease((), None)
    assert unknown_domain_top_k_restricted(
        {}, 3, 5, 1.0, 1e-6, restricted_sensitivity=2, rng=1
    ) == TopKRelease((), ())
    assert len(unknown_domain_top_k({}, 3, 5, 1.0, 1e-6)) == 0


def test_large_gap_releases_the_top_items_in_order() -> None:
    histogram = {"a": 10_000, "b": 9_000, "c": 8_000, "d": 5, "e": 3, "f": 3, "g": 0}
    # gaps of 1000 counts against noise of scale 1/eps = 1: a swap has probability < e^-900
    for seed in range(10):
        assert unknown_domain_top_k(histogram, 3, 5, 1.0, 1e-6, rng=seed).items == ("a", "b", "c")
        restricted = unknown_domain_top_k_restricted(
            histogram, 3, 5, 1.0, 1e-6, restricted_sensitivity=2, rng=seed
        )
        assert restricted.items == ("a", "b", "c")
        assert all(
            abs(n - histogram[i]) <= 60 for i, n in zip(restricted.items, restricted.counts, strict=True)
        )
    # k larger than what passes: d and e (counts 5, 3) are far below h_(kbar+1) + 1 + ln(kbar/delta)/eps
    assert unknown_domain_top_k(histogram, 6, 5, 1.0, 1e-6, rng=SEED).items == ("a", "b", "c")
    # items beyond the true top-kbar are never released, however large the gap
    assert unknown_domain_top_k(histogram, 3, 2, 1.0, 1e-6, rng=SEED).items == ("a", "b")


def test_huge_epsilon_threshold_is_one_above_the_next_count() -> None:
    """Without noise an item passes iff h_i > h_(kbar+1) + 1 (+ a vanishing ln(.)/eps)."""
    histogram = {"a": 10, "b": 8, "c": 7, "d": 6, "e": 6, "f": 1}
    # kbar = 4: h_(5) = 6, so a (10), b (8) pass; c (7 = 6 + 1) does not
    # (Algorithm 2 keeps Gumbel noise of scale 1/eps: delta = 1e-12 puts the boundary item c
    # ln(kbar/delta) = 29 noise scales below the threshold, so it passes with probability < 1e-12)
    assert unknown_domain_top_k(histogram, 5, 4, HUGE_EPS, 1e-12, rng=SEED).items == ("a", "b")
    restricted = unknown_domain_top_k_restricted(
        histogram, 5, 4, HUGE_EPS, 1e-3, restricted_sensitivity=3, rng=SEED
    )
    assert restricted.items == ("a", "b") and restricted.counts == (10.0, 8.0)
    # kbar = 1: h_(2) = 8, only a passes; kbar = 6 (whole domain): h_(7) = 0, all but f (1 = 0 + 1)
    assert unknown_domain_top_k(histogram, 5, 1, HUGE_EPS, 1e-12, rng=SEED).items == ("a",)
    everything = unknown_domain_top_k(histogram, 6, 6, HUGE_EPS, 1e-12, rng=SEED).items
    assert everything[:3] == ("a", "b", "c") and set(everything[3:]) == {"d", "e"}  # d, e tie at 6


def test_algorithm_2_boundary_item_passes_with_probability_delta_over_kbar() -> None:
    """An item with count h_(kbar+1) + 1 beats h_perp = h_(kbar+1) + 1 + ln(kbar/delta)/eps + G
    iff G_i - G_perp > ln(kbar/delta)/eps, a logistic(1/eps) tail: exactly delta / (delta + kbar),
    which is what keeps an item entering the top-kbar of a neighbour within delta. eps = 0.5 so a
    missing 1/eps in the offset would change the probability."""
    eps, delta, kbar, runs = 0.5, 0.3, 3, 6000
    histogram = {"x": 51, "y": 51, "z": 51, "w": 50, "v": 2}
    gen = np.random.default_rng(SEED)
    releases = [unknown_domain_top_k(histogram, kbar, kbar, eps, delta, rng=gen) for _ in range(runs)]
    p = delta / (delta + kbar)
    for item in ("x", "y", "z"):
        hits = sum(item in r.items for r in releases)
        assert stats.binomtest(hits, runs, p).pvalue > P_FLOOR
    assert not any("w" in r.items or "v" in r.items for r in releases)


def test_algorithm_1_boundary_item_passes_with_exact_lattice_probability() -> None:
    """Algorithm 1: an item at h_(kbar+1) + 1 beats the threshold iff L_i - L_perp > ln(Delta/delta)
    / eps with L ~ DLap(1/eps); the exact probability is a sum of discrete Laplace tails."""
    eps, delta, restricted, kbar, runs = 0.5, 0.2, 2, 3, 6000
    histogram = {"x": 51, "y": 51, "z": 51, "w": 50}
    offset = math.log(restricted / delta) / eps
    ys = np.arange(-200, 201)
    p = float(
        np.sum(discrete_laplace_pmf(ys, 1 / eps) * discrete_laplace_sf(np.floor(offset + ys) + 1, 1 / eps))
    )
    gen = np.random.default_rng(SEED)
    releases = [
        unknown_domain_top_k_restricted(
            histogram, kbar, kbar, eps, delta, restricted_sensitivity=restricted, rng=gen
        )
        for _ in range(runs)
    ]
    for item in ("x", "y", "z"):
        hits = sum(item in r.items for r in releases)
        assert stats.binomtest(hits, runs, p).pvalue > P_FLOOR


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kbar": 0},
        {"epsilon": 0.0},
        {"epsilon": -1.0},
        {"delta": 0.0},
        {"delta": 1.0},
        {"delta": -0.1},
        {"delta": 2.0},
        {"histogram": {"a": -1, "b": 3}},
        {"histogram": {"a": math.nan, "b": 3}},
        {"histogram": {"a": math.inf, "b": 3}},
    ],
)
def test_unknown_domain_rejects_bad_arguments(kwargs) -> None:
    args = {"histogram": {"a": 5, "b": 3, "c": 1}, "k": 2, "kbar": 2, "epsilon": 1.0, "delta": 1e-3} | kwargs
    with pytest.raises(ValueError):
        unknown_domain_top_k(**args, rng=1)
    with pytest.raises(ValueError):
        unknown_domain_top_k_restricted(**args, restricted_sensitivity=2, rng=1)


def test_restricted_sensitivity_must_be_positive() -> None:
    with pytest.raises(ValueError):
        unknown_domain_top_k_restricted({"a": 5}, 1, 1, 1.0, 1e-3, restricted_sensitivity=0, rng=1)


@pytest.mark.parametrize("k", [0, -1])
def test_unknown_domain_rejects_nonpositive_k(k: int) -> None:
    histogram = {str(i): 1000 for i in range(10)} | {"tail": 0}
    with pytest.raises(ValueError):
        unknown_domain_top_k(histogram, k, 10, 1.0, 1e-3, rng=1)
    with pytest.raises(ValueError):
        unknown_domain_top_k_restricted(histogram, k, 10, 1.0, 1e-3, restricted_sensitivity=1, rng=1)

"""Tests for the sparse vector family (:mod:`mbeacon.privacy.sparse_vector`) and the faulty SVT
fixtures (:mod:`mbeacon.privacy.audit.faulty`).

Distributional tests compare the mechanisms with their *exact* output distribution: for integer
answers and thresholds every comparison ``q + nu >= T + rho`` involves only lattice Laplace noise, so
the probability of a whole TOP/BOT pattern is a finite sum over the threshold noise of products of
exact discrete Laplace tail probabilities (:func:`exact_pattern_probabilities`). Those tests use fixed
seeds and a chi-square p-value floor of 1e-4: deterministic, and a correct mechanism would fail for
only one seed in 10^4. Properties use hypothesis.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from _stats import pooled_chisquare
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, stats

from mbeacon.privacy.audit import faulty
from mbeacon.privacy.noise import discrete_laplace_pmf, discrete_laplace_sf
from mbeacon.privacy.sparse_vector import (
    BOT,
    TOP,
    UNANSWERED,
    NumericAnswers,
    above_threshold,
    above_threshold_batch,
    generalized_svt,
    generalized_svt_allocate,
    generalized_svt_batch,
    numeric_sparse,
    numeric_sparse_batch,
    sparse,
    sparse_batch,
    sparse_sigma,
    svt_retraversal,
    svt_retraversal_batch,
)

SEED = 8675309
P_FLOOR = 1e-4  # fixed seeds: deterministic; a correct mechanism fails for 1 seed in 10^4
HUGE_EPS = 1e12  # every noise scale is ~1e-11 lattice units: the discrete Laplace draw is exactly 0
N_BATCH = 20_000
N_SINGLE = 2_000

# --- helpers ---------------------------------------------------------------------------------------


def all_patterns(k: int, c: int | None) -> list[tuple[int, ...]]:
    """Every flag pattern an SVT with cutoff ``c`` (None: never halts) can emit on ``k`` queries."""
    out: list[tuple[int, ...]] = []

    def extend(prefix: list[int], count: int) -> None:
        if len(prefix) == k:
            out.append(tuple(prefix))
        elif c is not None and count >= c:
            out.append(tuple(prefix + [UNANSWERED] * (k - len(prefix))))
        else:
            extend([*prefix, BOT], count)
            extend([*prefix, TOP], count + 1)

    extend([], 0)
    return out


def exact_pattern_probabilities(
    answers,
    thresholds,
    *,
    threshold_scale: float,
    query_scale: float | None,
    c: int | None,
    redraw: bool,
) -> dict[tuple[int, ...], float]:
    """Exact distribution of the flag pattern of the SVT loop on integer answers and thresholds.

    ``rho ~ DLap(threshold_scale)`` (re-drawn after every TOP when ``redraw``), ``nu_i ~
    DLap(query_scale)`` (none when None), TOP iff ``q_i + nu_i >= T_i + rho``, halt after ``c`` TOPs.
    Given rho the comparisons are independent, so a pattern's probability is a sum over rho of a
    product of exact tail probabilities (once per threshold segment when rho is re-drawn).
    """
    q = np.asarray(answers, dtype=np.int64)
    t = np.broadcast_to(np.asarray(thresholds, dtype=np.int64), q.shape)
    r = math.ceil(45 * threshold_scale) + 1  # mass beyond 45 scales is below e^-45
    rho = np.arange(-r, r + 1)
    weight = discrete_laplace_pmf(rho, threshold_scale)

    def p_top(i: int) -> np.ndarray:
        m = t[i] + rho - q[i]  # TOP iff nu >= m
        if query_scale is None:
            return (m <= 0).astype(np.float64)
        return discrete_laplace_sf(m, query_scale)

    tops = [p_top(i) for i in range(q.size)]
    probs = {}
    for pattern in all_patterns(q.size, c):
        prob = 1.0
        segment = np.ones_like(weight)
        for i, flag in enumerate(pattern):
            if flag == UNANSWERED:
                break
            segment = segment * (tops[i] if flag == TOP else 1.0 - tops[i])
            if flag == TOP and redraw:
                prob *= float(weight @ segment)
                segment = np.ones_like(weight)
        probs[pattern] = prob * float(weight @ segment)
    assert sum(probs.values()) == pytest.approx(1.0, abs=1e-9)
    return probs


def pattern_gof(flags: np.ndarray, probs: dict[tuple[int, ...], float]) -> float:
    """Chi-square p-value of the observed rows of ``flags`` against exact pattern probabilities."""
    counts = Counter(tuple(int(f) for f in row) for row in np.atleast_2d(flags))
    unexpected = set(counts) - set(probs)
    assert not unexpected, f"impossible patterns emitted: {sorted(unexpected)[:3]}"
    keys = list(probs)
    return pooled_chisquare(np.array([counts.get(p, 0) for p in keys]), np.array([probs[p] for p in keys]))


def _dlap_gof(samples: np.ndarray, scale: float) -> float:
    """Chi-square p-value of integer samples against DLap(scale), with the two exact tails as bins."""
    m = max(int(np.abs(samples).max()), 1)
    ks = np.arange(-m - 1, m + 2)
    probs = discrete_laplace_pmf(ks, scale)
    probs[0] = discrete_laplace_sf(m + 1, scale)  # tails: P(X <= -m-1) and P(X >= m+1)
    probs[-1] = probs[0]
    return pooled_chisquare(np.bincount(samples + m + 1, minlength=ks.size), probs)


def reference_svt(answers, thresholds, c: int | None) -> np.ndarray:
    """Noise-free SVT in plain Python: TOP iff q_i >= T_i, halt after c TOPs."""
    answers = list(answers)
    thresholds = list(np.broadcast_to(thresholds, (len(answers),)))
    flags, count = [], 0
    for q, t in zip(answers, thresholds, strict=True):
        if c is not None and count >= c:
            flags.append(UNANSWERED)
        elif q >= t:
            flags.append(TOP)
            count += 1
        else:
            flags.append(BOT)
    return np.asarray(flags, dtype=np.int8)


def assert_well_formed(flags: np.ndarray, c: int | None) -> None:
    """int8 flags in {-1, 0, 1}; at most c TOPs; UNANSWERED exactly after the c-th TOP."""
    flags = np.asarray(flags)
    assert flags.dtype == np.int8
    assert np.isin(flags, (TOP, BOT, UNANSWERED)).all()
    for row in np.atleast_2d(flags):
        tops = np.flatnonzero(row == TOP)
        if c is None:
            halted_after = row.size
        else:
            assert tops.size <= c
            halted_after = tops[-1] + 1 if tops.size == c else row.size
        expected_unanswered = np.arange(row.size) >= halted_after
        np.testing.assert_array_equal(row == UNANSWERED, expected_unanswered)


def assert_numeric_well_formed(result: NumericAnswers, c: int, sensitivity: float) -> None:
    assert isinstance(result, NumericAnswers)
    assert_well_formed(result.flags, c)
    assert result.values.shape == result.flags.shape
    finite = np.isfinite(result.values)
    np.testing.assert_array_equal(finite, result.flags == TOP)
    assert np.isnan(result.values[~finite]).all()
    units = result.values[finite] / sensitivity
    np.testing.assert_allclose(units, np.round(units), rtol=0, atol=1e-6)


# --- strategies ------------------------------------------------------------------------------------

answers_st = st.lists(st.integers(-30, 30), min_size=1, max_size=25)
eps_st = st.one_of(st.floats(0.01, 50.0), st.just(HUGE_EPS))
c_st = st.integers(1, 5)
seed_st = st.integers(0, 2**32 - 1)
sens_st = st.sampled_from([0.5, 1.0, 2.0])
PROPERTY = settings(max_examples=60, deadline=None)


# --- structural properties -------------------------------------------------------------------------


@PROPERTY
@given(answers=answers_st, threshold=st.integers(-20, 20), eps=eps_st, sens=sens_st, seed=seed_st)
def test_above_threshold_output_is_well_formed(answers, threshold, eps, sens, seed) -> None:
    q = np.asarray(answers) * sens
    flags = above_threshold(q, threshold * sens, eps, sensitivity=sens, rng=seed)
    assert flags.shape == (len(answers),)
    assert_well_formed(flags, 1)
    batch = above_threshold_batch(q, threshold * sens, eps, sensitivity=sens, runs=7, rng=seed)
    assert batch.shape == (7, len(answers))
    assert_well_formed(batch, 1)


@PROPERTY
@given(
    answers=answers_st,
    threshold=st.integers(-20, 20),
    eps=eps_st,
    c=c_st,
    delta=st.sampled_from([0.0, 1e-9, 0.1]),
    sens=sens_st,
    seed=seed_st,
)
def test_sparse_output_is_well_formed(answers, threshold, eps, c, delta, sens, seed) -> None:
    q = np.asarray(answers) * sens
    flags = sparse(q, threshold * sens, eps, c, delta=delta, sensitivity=sens, rng=seed)
    assert flags.shape == (len(answers),)
    assert_well_formed(flags, c)
    batch = sparse_batch(q, threshold * sens, eps, c, delta=delta, sensitivity=sens, runs=5, rng=seed)
    assert batch.shape == (5, len(answers))
    assert_well_formed(batch, c)


@PROPERTY
@given(
    answers=answers_st,
    threshold=st.integers(-20, 20),
    eps=eps_st,
    c=c_st,
    delta=st.sampled_from([0.0, 1e-6]),
    sens=sens_st,
    seed=seed_st,
)
def test_numeric_sparse_output_is_well_formed(answers, threshold, eps, c, delta, sens, seed) -> None:
    q = np.asarray(answers) * sens
    result = numeric_sparse(q, threshold * sens, eps, c, delta=delta, sensitivity=sens, rng=seed)
    assert result.flags.shape == (len(answers),)
    assert_numeric_well_formed(result, c, sens)
    batch = numeric_sparse_batch(q, threshold * sens, eps, c, delta=delta, sensitivity=sens, runs=5, rng=seed)
    assert batch.flags.shape == (5, len(answers))
    assert_numeric_well_formed(batch, c, sens)


@PROPERTY
@given(
    data=st.data(),
    answers=answers_st,
    eps=st.tuples(eps_st, eps_st, eps_st),
    c=c_st,
    monotonic=st.booleans(),
    sens=sens_st,
    seed=seed_st,
)
def test_generalized_svt_output_is_well_formed(data, answers, eps, c, monotonic, sens, seed) -> None:
    q = np.asarray(answers) * sens
    thresholds = np.asarray(data.draw(st.lists(st.integers(-20, 20), min_size=q.size, max_size=q.size)))
    eps1, eps2, eps3 = eps
    kwargs = {"epsilon3": eps3, "monotonic": monotonic, "sensitivity": sens}
    result = generalized_svt(q, thresholds * sens, eps1, eps2, c, rng=seed, **kwargs)
    assert result.flags.shape == (q.size,)
    assert_numeric_well_formed(result, c, sens)
    batch = generalized_svt_batch(q, thresholds * sens, eps1, eps2, c, runs=4, rng=seed, **kwargs)
    assert_numeric_well_formed(batch, c, sens)
    # without a numeric budget the batch form releases flags only
    flags_only = generalized_svt_batch(
        q, thresholds * sens, eps1, eps2, c, runs=4, rng=seed, sensitivity=sens
    )
    assert flags_only.flags.shape == (4, q.size)
    assert_well_formed(flags_only.flags, c)
    assert np.isnan(flags_only.values).all()


def test_generalized_svt_without_numeric_budget_returns_flags() -> None:
    # epsilon3 = 0 (the default): indicator-only, nothing is released
    result = generalized_svt([1, 5, 9], 4, 0.5, 0.5, 2, rng=SEED)
    assert_well_formed(result.flags, 2)
    assert result.values.shape == (3,) and np.isnan(result.values).all()
    batch = generalized_svt_batch([1, 5, 9], 4, 0.5, 0.5, 2, runs=6, rng=SEED)
    assert_well_formed(batch.flags, 2)
    assert batch.values.shape == (6, 3) and np.isnan(batch.values).all()


@PROPERTY
@given(answers=answers_st, threshold=st.integers(-20, 20), eps=eps_st, c=c_st, seed=seed_st)
def test_two_dimensional_answers_run_row_by_row(answers, threshold, eps, c, seed) -> None:
    rows = np.asarray([answers, [a + 3 for a in answers], [-a for a in answers]])
    flags = sparse_batch(rows, threshold, eps, c, rng=seed)
    assert flags.shape == rows.shape
    assert_well_formed(flags, c)
    assert_well_formed(sparse_batch(rows, threshold, eps, c, runs=3, rng=seed), c)


@PROPERTY
@given(answers=answers_st, threshold=st.integers(-20, 20), eps=st.floats(0.05, 20.0), c=c_st, seed=seed_st)
def test_single_run_is_the_batch_with_one_run(answers, threshold, eps, c, seed) -> None:
    np.testing.assert_array_equal(
        above_threshold(answers, threshold, eps, rng=seed),
        above_threshold_batch(answers, threshold, eps, runs=1, rng=seed)[0],
    )
    np.testing.assert_array_equal(
        sparse(answers, threshold, eps, c, rng=seed), sparse_batch(answers, threshold, eps, c, rng=seed)[0]
    )
    single = numeric_sparse(answers, threshold, eps, c, rng=seed)
    batch = numeric_sparse_batch(answers, threshold, eps, c, runs=1, rng=seed)
    np.testing.assert_array_equal(single.flags, batch.flags[0])
    np.testing.assert_array_equal(single.values, batch.values[0])
    single = generalized_svt(answers, threshold, eps, eps, c, epsilon3=eps, rng=seed)
    batch = generalized_svt_batch(answers, threshold, eps, eps, c, epsilon3=eps, rng=seed)
    np.testing.assert_array_equal(single.flags, batch.flags[0])
    np.testing.assert_array_equal(single.values, batch.values[0])


# --- noise-free limit ------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    answers=answers_st,
    threshold=st.integers(-20, 20),
    c=c_st,
    sens=sens_st,
    seed=seed_st,
    delta=st.sampled_from([0.0, 1e-6]),
)
def test_huge_epsilon_reduces_to_exact_threshold_comparisons(
    answers, threshold, c, sens, seed, delta
) -> None:
    q = np.asarray(answers) * sens
    t = threshold * sens
    np.testing.assert_array_equal(
        above_threshold(q, t, HUGE_EPS, sensitivity=sens, rng=seed), reference_svt(q, t, 1)
    )
    expected = reference_svt(q, t, c)
    np.testing.assert_array_equal(
        sparse(q, t, HUGE_EPS, c, delta=delta, sensitivity=sens, rng=seed), expected
    )
    batch = sparse_batch(q, t, HUGE_EPS, c, sensitivity=sens, runs=3, rng=seed)
    np.testing.assert_array_equal(batch, np.tile(expected, (3, 1)))
    numeric = numeric_sparse(q, t, HUGE_EPS, c, delta=delta, sensitivity=sens, rng=seed)
    np.testing.assert_array_equal(numeric.flags, expected)
    np.testing.assert_array_equal(numeric.values[expected == TOP], q[expected == TOP])


@settings(max_examples=100, deadline=None)
@given(data=st.data(), answers=answers_st, c=c_st, monotonic=st.booleans(), seed=seed_st)
def test_generalized_svt_huge_epsilon_uses_per_query_thresholds(data, answers, c, monotonic, seed) -> None:
    thresholds = data.draw(st.lists(st.integers(-20, 20), min_size=len(answers), max_size=len(answers)))
    expected = reference_svt(answers, thresholds, c)
    result = generalized_svt(
        answers, thresholds, HUGE_EPS, HUGE_EPS, c, epsilon3=HUGE_EPS, monotonic=monotonic, rng=seed
    )
    np.testing.assert_array_equal(result.flags, expected)
    np.testing.assert_array_equal(result.values[expected == TOP], np.asarray(answers)[expected == TOP])


# --- exact distributions: single-run and batch forms ------------------------------------------------

ANSWERS = [0, 3, 1, 5, 2, 6, 4]
THRESHOLD = 4


def _single_runs(fn, n: int) -> np.ndarray:
    gen = np.random.default_rng(SEED + 1)
    return np.asarray([np.asarray(fn(gen)) for _ in range(n)])


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_above_threshold_matches_exact_distribution(eps: float) -> None:
    probs = exact_pattern_probabilities(
        ANSWERS, THRESHOLD, threshold_scale=2 / eps, query_scale=4 / eps, c=1, redraw=False
    )
    batch = above_threshold_batch(ANSWERS, THRESHOLD, eps, runs=N_BATCH, rng=SEED)
    assert pattern_gof(batch, probs) > P_FLOOR
    single = _single_runs(lambda g: above_threshold(ANSWERS, THRESHOLD, eps, rng=g), N_SINGLE)
    assert pattern_gof(single, probs) > P_FLOOR


def test_exact_distribution_test_has_power() -> None:
    # the comparison above would notice query noise at half its scale (Lap(2/eps) instead of 4/eps)
    wrong = exact_pattern_probabilities(
        ANSWERS, THRESHOLD, threshold_scale=2.0, query_scale=2.0, c=1, redraw=False
    )
    assert pattern_gof(above_threshold_batch(ANSWERS, THRESHOLD, 1.0, runs=N_BATCH, rng=SEED), wrong) < 1e-6


@pytest.mark.parametrize(("eps", "c", "delta"), [(1.0, 2, 0.0), (4.0, 3, 0.0), (8.0, 2, 0.1)])
def test_sparse_matches_exact_distribution(eps: float, c: int, delta: float) -> None:
    sigma = sparse_sigma(eps, c, delta)
    probs = exact_pattern_probabilities(
        ANSWERS, THRESHOLD, threshold_scale=sigma, query_scale=2 * sigma, c=c, redraw=True
    )
    batch = sparse_batch(ANSWERS, THRESHOLD, eps, c, delta=delta, runs=N_BATCH, rng=SEED)
    assert pattern_gof(batch, probs) > P_FLOOR
    single = _single_runs(lambda g: sparse(ANSWERS, THRESHOLD, eps, c, delta=delta, rng=g), N_SINGLE)
    assert pattern_gof(single, probs) > P_FLOOR


def test_sparse_redraws_the_threshold_after_each_top() -> None:
    # a run-long threshold gives a measurably different pattern distribution (power of the test above)
    no_redraw = exact_pattern_probabilities(
        ANSWERS, THRESHOLD, threshold_scale=2.0, query_scale=4.0, c=2, redraw=False
    )
    assert pattern_gof(sparse_batch(ANSWERS, THRESHOLD, 2.0, 2, runs=N_BATCH, rng=SEED), no_redraw) < 1e-6


@pytest.mark.parametrize(("eps", "c"), [(2.0, 2), (6.0, 3)])
def test_numeric_sparse_matches_exact_distribution(eps: float, c: int) -> None:
    sigma1 = sparse_sigma(8 * eps / 9, c)  # Sparse runs on eps1 = 8 eps / 9
    sigma2 = sparse_sigma(2 * eps / 9, c)  # values: q + Lap(sigma(eps2)), eps2 = 2 eps / 9
    probs = exact_pattern_probabilities(
        ANSWERS, THRESHOLD, threshold_scale=sigma1, query_scale=2 * sigma1, c=c, redraw=True
    )
    batch = numeric_sparse_batch(ANSWERS, THRESHOLD, eps, c, runs=N_BATCH, rng=SEED)
    assert pattern_gof(batch.flags, probs) > P_FLOOR
    # released noise is fresh: independent of the comparison, DLap(sigma2) on TOPs
    tops = batch.flags == TOP
    offsets = (batch.values - np.asarray(ANSWERS, dtype=float))[tops].astype(np.int64)
    assert _dlap_gof(offsets, sigma2) > P_FLOOR
    single = _single_runs(lambda g: numeric_sparse(ANSWERS, THRESHOLD, eps, c, rng=g).flags, N_SINGLE)
    assert pattern_gof(single, probs) > P_FLOOR


@pytest.mark.parametrize(("c", "monotonic"), [(1, False), (2, False), (3, True)])
def test_generalized_svt_matches_exact_distribution(c: int, monotonic: bool) -> None:
    thresholds = [1, 4, 2, 5, 3, 6, 4]
    eps1, eps2, eps3 = generalized_svt_allocate(3.0, c, monotonic=monotonic, epsilon3=1.0)
    probs = exact_pattern_probabilities(
        ANSWERS,
        thresholds,
        threshold_scale=1 / eps1,
        query_scale=(1 if monotonic else 2) * c / eps2,
        c=c,
        redraw=False,
    )
    batch = generalized_svt_batch(
        ANSWERS, thresholds, eps1, eps2, c, epsilon3=eps3, monotonic=monotonic, runs=N_BATCH, rng=SEED
    )
    assert pattern_gof(batch.flags, probs) > P_FLOOR
    offsets = (batch.values - np.asarray(ANSWERS, dtype=float))[batch.flags == TOP].astype(np.int64)
    assert _dlap_gof(offsets, c / eps3) > P_FLOOR
    gen = np.random.default_rng(SEED + 3)
    single = [
        generalized_svt(ANSWERS, thresholds, eps1, eps2, c, epsilon3=eps3, monotonic=monotonic, rng=gen).flags
        for _ in range(N_SINGLE)
    ]
    assert pattern_gof(np.asarray(single), probs) > P_FLOOR


@pytest.mark.slow
@pytest.mark.parametrize("eps", [0.3, 1.0, 3.0])
def test_sparse_family_matches_exact_distribution_large_sample(eps: float) -> None:
    answers = [2, 7, 0, 5, 5, 3, 9, 1, 6, 4]
    for c in (1, 2, 4):
        sigma = sparse_sigma(eps, c)
        probs = exact_pattern_probabilities(
            answers, 5, threshold_scale=sigma, query_scale=2 * sigma, c=c, redraw=True
        )
        assert pattern_gof(sparse_batch(answers, 5, eps, c, runs=400_000, rng=SEED + c), probs) > P_FLOOR
        flags = np.asarray([sparse(answers, 5, eps, c) for _ in range(10_000)])  # secure source
        assert pattern_gof(flags, probs) > 1e-6  # fresh randomness each run: floor 1e-6
    probs = exact_pattern_probabilities(
        answers, 5, threshold_scale=2 / eps, query_scale=4 / eps, c=1, redraw=False
    )
    assert pattern_gof(above_threshold_batch(answers, 5, eps, runs=400_000), probs) > 1e-6


# --- budget allocation and scales ------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    eps=st.floats(0.01, 100.0),
    c=st.integers(1, 200),
    reserve=st.floats(0.0, 0.9),
    monotonic=st.booleans(),
)
def test_generalized_svt_allocate_split(eps: float, c: int, reserve: float, monotonic: bool) -> None:
    eps3 = reserve * eps
    eps1, eps2, got3 = generalized_svt_allocate(eps, c, monotonic=monotonic, epsilon3=eps3)
    assert got3 == eps3
    assert eps1 > 0 and eps2 > 0
    assert eps1 + eps2 == pytest.approx(eps - eps3, rel=1e-12)
    ratio = (c if monotonic else 2 * c) ** (2 / 3)
    assert eps2 / eps1 == pytest.approx(ratio, rel=1e-9)
    # the split minimises the variance of the comparison noise Lap(1/eps1) - Lap(m/eps2), m = c or 2c
    m = c if monotonic else 2 * c

    def variance(e1: float) -> float:
        return 2 / e1**2 + 2 * (m / (eps - eps3 - e1)) ** 2

    best = optimize.minimize_scalar(
        variance,
        bounds=(1e-9 * (eps - eps3), (eps - eps3) * (1 - 1e-9)),
        method="bounded",
        options={"xatol": 1e-12 * (eps - eps3)},
    )
    assert variance(eps1) <= best.fun * (1 + 1e-6)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"epsilon": 0.0, "c": 1},
        {"epsilon": -1.0, "c": 1},
        {"epsilon": math.nan, "c": 1},
        {"epsilon": 1.0, "c": 0},
        {"epsilon": 1.0, "c": 1.5},
        {"epsilon": 1.0, "c": 1, "epsilon3": 1.0},
        {"epsilon": 1.0, "c": 1, "epsilon3": -0.1},
    ],
)
def test_generalized_svt_allocate_rejects_bad_arguments(kwargs) -> None:
    with pytest.raises(ValueError):
        generalized_svt_allocate(**kwargs)


@settings(max_examples=100, deadline=None)
@given(
    eps=st.floats(0.01, 100.0),
    c=st.integers(1, 100),
    delta=st.floats(1e-12, 0.99),
    sens=st.floats(0.01, 10.0),
)
def test_sparse_sigma(eps: float, c: int, delta: float, sens: float) -> None:
    pure = sparse_sigma(eps, c, 0.0, sens)
    assert pure == pytest.approx(2 * c * sens / eps)
    # Sparse with c positives at eps is c AboveThresholds at eps / c (threshold noise 2D/(eps/c))
    assert pure == pytest.approx(sparse_sigma(eps / c, 1, 0.0, sens))
    approx = sparse_sigma(eps, c, delta, sens)
    assert approx == pytest.approx(math.sqrt(32 * c * math.log(1 / delta)) * sens / eps)
    assert approx > 0


@pytest.mark.parametrize(
    ("eps", "delta"), [(0.0, 0.0), (-1.0, 0.0), (math.inf, 0.0), (1.0, -0.1), (1.0, 1.0)]
)
def test_sparse_sigma_rejects_bad_arguments(eps: float, delta: float) -> None:
    with pytest.raises(ValueError):
        sparse_sigma(eps, 2, delta)


# --- input validation ------------------------------------------------------------------------------

MECHANISMS = {
    "above_threshold": lambda q, eps=1.0, c=1: above_threshold(q, 2, eps, rng=1),
    "above_threshold_batch": lambda q, eps=1.0, c=1: above_threshold_batch(q, 2, eps, runs=3, rng=1),
    "sparse": lambda q, eps=1.0, c=2: sparse(q, 2, eps, c, rng=1),
    "sparse_batch": lambda q, eps=1.0, c=2: sparse_batch(q, 2, eps, c, runs=3, rng=1),
    "numeric_sparse": lambda q, eps=1.0, c=2: numeric_sparse(q, 2, eps, c, rng=1),
    "numeric_sparse_batch": lambda q, eps=1.0, c=2: numeric_sparse_batch(q, 2, eps, c, runs=3, rng=1),
    "generalized_svt": lambda q, eps=1.0, c=2: generalized_svt(q, 2, eps, eps, c, epsilon3=1.0, rng=1),
    "generalized_svt_eps1": lambda q, eps=1.0, c=2: generalized_svt_batch(q, 2, eps, 1.0, c, rng=1),
    "generalized_svt_eps2": lambda q, eps=1.0, c=2: generalized_svt_batch(q, 2, 1.0, eps, c, rng=1),
    "svt_retraversal": lambda q, eps=1.0, c=2: svt_retraversal(q, 2, eps, eps, c, increment=1.0, rng=1),
    "svt_retraversal_batch": lambda q, eps=1.0, c=2: svt_retraversal_batch(
        q, 2, eps, eps, c, increment=1.0, runs=3, rng=1
    ),
}


@pytest.mark.parametrize("name", list(MECHANISMS))
def test_valid_inputs_run(name: str) -> None:
    MECHANISMS[name]([1, 2, 3, 4])


@pytest.mark.parametrize("eps", [0.0, -0.5, math.nan, math.inf])
@pytest.mark.parametrize("name", list(MECHANISMS))
def test_nonpositive_or_nonfinite_epsilon_raises(name: str, eps: float) -> None:
    with pytest.raises(ValueError):
        MECHANISMS[name]([1, 2, 3, 4], eps=eps)


@pytest.mark.parametrize("c", [0, -1, 1.5])
@pytest.mark.parametrize("name", [n for n in MECHANISMS if not n.startswith("above")])
def test_bad_cutoff_raises(name: str, c) -> None:
    with pytest.raises(ValueError):
        MECHANISMS[name]([1, 2, 3, 4], c=c)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("name", list(MECHANISMS))
def test_nonfinite_answers_raise(name: str, bad: float) -> None:
    with pytest.raises(ValueError):
        MECHANISMS[name]([1, bad, 3])


def test_answer_shape_errors() -> None:
    with pytest.raises(ValueError):
        sparse_batch(np.zeros((2, 2, 2)), 0, 1.0, 1)
    with pytest.raises(ValueError):
        sparse_batch(np.zeros((3, 4)), 0, 1.0, 1, runs=5)
    with pytest.raises(ValueError):
        svt_retraversal(np.zeros((3, 4)), 0, 1.0, 1.0, 1, increment=0.0)


@pytest.mark.parametrize(
    ("answers", "sensitivity"), [([1, 2.5, 3], 1.0), ([0.5, 0.25], 0.5), ([3, 4.000001], 1.0)]
)
def test_numeric_release_requires_lattice_answers(answers, sensitivity) -> None:
    with pytest.raises(ValueError, match="lattice"):
        numeric_sparse(answers, 2, 1.0, 1, sensitivity=sensitivity, rng=1)
    with pytest.raises(ValueError, match="lattice"):
        generalized_svt(answers, 2, 1.0, 1.0, 1, epsilon3=1.0, sensitivity=sensitivity, rng=1)
    # indicator-only mechanisms accept real-valued answers
    assert_well_formed(sparse(answers, 2, 1.0, 1, sensitivity=sensitivity, rng=1), 1)
    on_lattice = np.round(np.asarray(answers) / sensitivity) * sensitivity
    assert_numeric_well_formed(
        numeric_sparse(on_lattice, 2, 1.0, 1, sensitivity=sensitivity, rng=1), 1, sensitivity
    )


@pytest.mark.parametrize("mechanism", ["numeric_sparse_batch", "generalized_svt_batch"])
def test_batch_numeric_release_requires_lattice_answers(mechanism: str) -> None:
    answers = [100.3, 250.7]
    with pytest.raises(ValueError, match="lattice"):
        if mechanism == "numeric_sparse_batch":
            numeric_sparse_batch(answers, 0, 1.0, 2, runs=4, rng=1)
        else:
            generalized_svt_batch(answers, 0, 1.0, 1.0, 2, epsilon3=1.0, runs=4, rng=1)


# --- SVT with retraversal -------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(
    answers=answers_st,
    threshold=st.integers(-20, 20),
    increment=st.sampled_from([0.0, 1.0, 5.0]),
    eps=st.one_of(st.floats(0.05, 20.0), st.just(HUGE_EPS)),
    c=c_st,
    monotonic=st.booleans(),
    seed=seed_st,
)
def test_retraversal_selects_at_most_c_distinct_valid_items(
    answers, threshold, increment, eps, c, monotonic, seed
) -> None:
    selected = svt_retraversal(
        answers, threshold, eps, eps, c, increment=increment, monotonic=monotonic, max_passes=50, rng=seed
    )
    assert selected.dtype == np.int64 and selected.ndim == 1
    assert selected.size <= c
    assert np.unique(selected).size == selected.size
    assert np.all((selected >= 0) & (selected < len(answers)))


@settings(max_examples=80, deadline=None)
@given(
    answers=answers_st,
    threshold=st.integers(-20, 20),
    increment=st.sampled_from([0, 1, 5]),
    c=c_st,
    seed=seed_st,
)
def test_retraversal_huge_epsilon_selects_items_above_raised_threshold(
    answers, threshold, increment, c, seed
):
    # without noise one pass decides everything; further passes (max_passes) add nothing
    selected = svt_retraversal(
        answers, threshold, HUGE_EPS, HUGE_EPS, c, increment=increment, max_passes=5, rng=seed
    )
    above = [i for i, q in enumerate(answers) if q >= threshold + increment]
    np.testing.assert_array_equal(selected, above[:c])


def test_retraversal_repeats_passes_until_c_selected() -> None:
    # every item sits exactly at the raised threshold: one pass selects each with probability about
    # 1/2, so several passes over the remaining items fill all c slots (P(fail) < 2^-200 per item)
    answers = np.full(12, 10)
    for seed in range(20):
        selected = svt_retraversal(answers, 5, 1.0, 1.0, 6, increment=5, rng=seed)
        assert selected.size == 6
    # items far below the raised threshold are never selected, far above always
    answers = np.array([0, 1000, 0, 1000, 0, 1000])
    selected = svt_retraversal(answers, 10, 1.0, 1.0, 3, increment=10, rng=SEED)
    np.testing.assert_array_equal(np.sort(selected), [1, 3, 5])


@settings(max_examples=60, deadline=None)
@given(
    answers=answers_st,
    threshold=st.integers(-20, 20),
    increment=st.sampled_from([0.0, 1.0, 5.0]),
    eps=st.one_of(st.floats(0.05, 20.0), st.just(HUGE_EPS)),
    c=c_st,
    runs=st.integers(1, 8),
    seed=seed_st,
)
def test_retraversal_batch_rows_are_padded_selections(
    answers, threshold, increment, eps, c, runs, seed
) -> None:
    picked = svt_retraversal_batch(
        answers, threshold, eps, eps, c, increment=increment, max_passes=20, runs=runs, rng=seed
    )
    assert picked.shape == (runs, c) and picked.dtype == np.int64
    for row in picked:
        chosen = row[row >= 0]
        np.testing.assert_array_equal(row[: chosen.size], chosen)  # -1 only as trailing padding
        assert np.all(row[chosen.size :] == -1)
        assert np.unique(chosen).size == chosen.size
        assert np.all(chosen < len(answers))
    # the single-run function is the batch with one run
    single = svt_retraversal(answers, threshold, eps, eps, c, increment=increment, max_passes=20, rng=seed)
    first = svt_retraversal_batch(
        answers, threshold, eps, eps, c, increment=increment, max_passes=20, runs=1, rng=seed
    )[0]
    np.testing.assert_array_equal(single, first[first >= 0])
    if eps == HUGE_EPS:
        above = [i for i, q in enumerate(answers) if q >= threshold + increment][:c]
        np.testing.assert_array_equal(picked, np.tile(above + [-1] * (c - len(above)), (runs, 1)))


def test_retraversal_single_and_batch_have_the_same_distribution() -> None:
    """Selections from independent single runs and from one batch follow the same distribution
    (chi-square test of homogeneity on the selected tuples; fixed seeds, p floor 1e-4)."""
    answers = np.array([3, 6, 1, 5, 4, 2])
    kwargs = {"increment": 1.0, "max_passes": 30}
    batch = svt_retraversal_batch(answers, 3, 0.5, 1.0, 2, runs=6000, rng=SEED, **kwargs)
    gen = np.random.default_rng(SEED + 4)
    single = [svt_retraversal(answers, 3, 0.5, 1.0, 2, rng=gen, **kwargs) for _ in range(1500)]
    batch_counts = Counter(tuple(int(i) for i in row if i >= 0) for row in batch)
    single_counts = Counter(tuple(int(i) for i in row) for row in single)
    keys = sorted(set(batch_counts) | set(single_counts))
    table = np.array([[batch_counts.get(k, 0) for k in keys], [single_counts.get(k, 0) for k in keys]])
    # pool the rare selections (expected < 5 in the smaller sample) into one column
    rare = table.sum(axis=0) * (1500 / 7500) < 5
    table = np.column_stack([table[:, ~rare], table[:, rare].sum(axis=1)])
    table = table[:, table.sum(axis=0) > 0]
    assert stats.chi2_contingency(table).pvalue > P_FLOOR


# --- faulty fixtures --------------------------------------------------------------------------------


def test_stoddard_has_no_query_noise_and_never_halts() -> None:
    answers = np.array([3, 8, 1, 6, 6, 2, 9, 5])
    flags = faulty.svt_stoddard_batch(answers, 5, 1.0, c=1, runs=5000, rng=SEED)
    assert_well_formed(flags, None)
    assert not (flags == UNANSWERED).any()
    # without query noise a run's TOPs are exactly the answers above its noisy threshold
    for row in flags:
        if (row == TOP).any() and (row == BOT).any():
            assert answers[row == BOT].max() < answers[row == TOP].min()
    # more than c TOPs in a run
    assert ((flags == TOP).sum(axis=1) > 1).any()
    far = faulty.svt_stoddard_batch(np.full(10, 1000), 0, 1.0, c=2, runs=50, rng=SEED)
    assert (far == TOP).all()
    probs = exact_pattern_probabilities(
        answers, 5, threshold_scale=2.0, query_scale=None, c=None, redraw=False
    )
    assert pattern_gof(flags, probs) > P_FLOOR


def test_chen_has_query_noise_and_never_halts() -> None:
    answers = np.array([3, 8, 1, 6, 6, 2, 9, 5])
    eps = 2.0
    flags = faulty.svt_chen_batch(answers, 5, eps, c=1, runs=N_BATCH, rng=SEED)
    assert not (flags == UNANSWERED).any()
    assert ((flags == TOP).sum(axis=1) > 1).any()
    probs = exact_pattern_probabilities(
        answers, 5, threshold_scale=2 / eps, query_scale=2 / eps, c=None, redraw=False
    )
    assert pattern_gof(flags, probs) > P_FLOOR
    # query noise exists: equal answers in one run get different flags (all-equal has prob < 1e-30)
    equal = faulty.svt_chen_batch(np.full(200, 5), 5, 1.0, runs=1, rng=SEED)
    assert (equal == TOP).any() and (equal == BOT).any()


@pytest.mark.parametrize("c", [1, 3])
def test_lee_clifton_halts_at_c(c: int) -> None:
    eps = 2.0
    flags = faulty.svt_lee_clifton_batch(ANSWERS, THRESHOLD, eps, c, runs=N_BATCH, rng=SEED)
    assert_well_formed(flags, c)
    far = faulty.svt_lee_clifton_batch(np.full(10, 1000), 0, 1.0, c, runs=20, rng=SEED)
    assert ((far == TOP).sum(axis=1) == c).all()
    # eps1 = eps / 4 for a run-long threshold, query noise Lap(D / (3 eps / 4)) ignoring c
    probs = exact_pattern_probabilities(
        ANSWERS, THRESHOLD, threshold_scale=4 / eps, query_scale=4 / (3 * eps), c=c, redraw=False
    )
    assert pattern_gof(flags, probs) > P_FLOOR


def test_roth2011_releases_the_compared_noisy_query() -> None:
    """On TOP it outputs q + nu with the very nu that won the comparison: for one query at the
    threshold, P(value = T + v | TOP) is proportional to P(nu = v) P(rho <= v) (biased upwards)."""
    eps, c, t = 1.0, 1, 50
    result = faulty.svt_roth2011_batch([t], t, eps, c, runs=N_BATCH, rng=SEED)
    rho_scale, nu_scale = 2 / eps, c / (eps / 2)
    tops = result.flags[:, 0] == TOP
    assert np.isnan(result.values[~tops, 0]).all() and np.isfinite(result.values[tops, 0]).all()
    offsets = (result.values[tops, 0] - t).astype(np.int64)
    m = int(np.abs(offsets).max()) + 1
    vs = np.arange(-m - 80, m + 81)
    joint = discrete_laplace_pmf(vs, nu_scale) * (1.0 - discrete_laplace_sf(vs + 1, rho_scale))
    probs = joint / joint.sum()
    observed = np.bincount(offsets - vs[0], minlength=vs.size)
    assert pooled_chisquare(observed, probs) > P_FLOOR
    # ... which is not fresh noise: the unconditional DLap(nu_scale) fit is rejected
    assert _dlap_gof(offsets, nu_scale) < 1e-6
    # multi-query runs: at most c TOPs and values exactly at TOPs, on the lattice
    multi = faulty.svt_roth2011_batch(ANSWERS, THRESHOLD, 1.0, 2, runs=500, rng=SEED)
    assert_numeric_well_formed(multi, 2, 1.0)
    exact = faulty.svt_roth2011_batch(ANSWERS, THRESHOLD, HUGE_EPS, 2, runs=3, rng=SEED)
    np.testing.assert_array_equal(exact.flags[0], reference_svt(ANSWERS, THRESHOLD, 2))


@pytest.mark.parametrize("c", [1, 2, 10])
@pytest.mark.parametrize("eps", [0.1, 1.0])
def test_true_epsilon(eps: float, c: int) -> None:
    lee = faulty.true_epsilon("svt-lee-clifton", eps, c)
    assert lee == pytest.approx((1 + 6 * c) / 4 * eps)
    assert lee > eps  # it never delivers the claimed cost
    assert faulty.true_epsilon("svt-lee-clifton", eps, c + 1) > lee
    for name in ("svt-roth2011", "svt-stoddard", "svt-chen"):
        assert faulty.true_epsilon(name, eps, c) == math.inf
    with pytest.raises(KeyError):
        faulty.true_epsilon("svt-sparse", eps, c)


# --- Ding et al.'s free gap ------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    answers=st.lists(st.integers(0, 30), min_size=1, max_size=25),
    c=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
)
def test_free_gap_values_are_nonnegative_lattice_gaps_at_tops(answers, c, seed) -> None:
    from mbeacon.privacy import svt_with_gap

    res = svt_with_gap(np.array(answers, dtype=float), 10, 1.0, c, rng=seed)
    tops = res.flags == 1
    assert np.all(np.isnan(res.values[~tops]))
    # TOP means q + nu >= T + rho, so the released gap q + nu - (T + rho) is >= 0 and an integer
    assert np.all(res.values[tops] >= 0)
    assert np.all(res.values[tops] == np.round(res.values[tops]))
    assert tops.sum() <= c


def test_free_gap_without_noise_is_the_true_gap() -> None:
    from mbeacon.privacy import svt_with_gap_batch

    answers = np.array([3.0, 12.0, 7.0, 25.0])
    res = svt_with_gap_batch(answers, 10, 1e9, 2, runs=3, rng=0)
    assert (res.flags == np.array([0, 1, 0, 1])).all()
    assert np.allclose(res.values[:, [1, 3]], [12 - 10, 25 - 10])


def test_retraversal_warns_when_capped() -> None:
    from mbeacon.privacy import svt_retraversal

    with pytest.warns(RuntimeWarning, match="max_passes=3"):
        picked = svt_retraversal(np.zeros(5), 1000, 0.5, 0.5, 2, increment=0, max_passes=3, rng=1)
    assert picked.size < 2


def _walk_retraversal(q, threshold, eps1, eps2, c, increment, max_passes, rng) -> list[int]:
    """The stream, literally: pass after pass over the unselected items, one noisy test each."""
    from mbeacon.privacy.noise import lattice_laplace

    query_scale = c / eps2  # monotonic
    rho = float(lattice_laplace(1 / eps1, 1.0, None, rng))
    selected: list[int] = []
    for _ in range(max_passes):
        for item in range(len(q)):
            if item in selected:
                continue
            if q[item] + float(lattice_laplace(query_scale, 1.0, None, rng)) >= threshold + increment + rho:
                selected.append(item)
                if len(selected) == c:
                    return selected
    return selected


@pytest.mark.parametrize(("increment", "max_passes"), [(3.0, 1000), (12.0, 3)])
def test_retraversal_sampler_matches_a_walk_of_the_stream(increment: float, max_passes: int) -> None:
    """The geometric first-pass sampler has the distribution of walking every (pass, item): per item,
    P(selected) and P(selected first) agree within 5 standard errors (fails by chance < 1e-5)."""
    q = np.array([30, 5, 22, 18, 0, 25, 12, 3], dtype=np.float64)
    runs = 3000
    fast = svt_retraversal_batch(
        q, 15.0, 0.5, 1.0, 3, increment=increment, monotonic=True, max_passes=max_passes, runs=runs, rng=1
    )
    gen = np.random.default_rng(2)
    walked = np.full((runs, 3), -1)
    for r in range(runs):
        picked = _walk_retraversal(q, 15.0, 0.5, 1.0, 3, increment, max_passes, gen)
        walked[r, : len(picked)] = picked
    for stat in (lambda x, i: (x == i).any(axis=1), lambda x, i: x[:, 0] == i):
        for item in range(q.size):
            a, b = stat(fast, item).mean(), stat(walked, item).mean()
            se = math.sqrt((a * (1 - a) + b * (1 - b)) / runs) + 1e-3
            assert abs(a - b) < 5 * se, (item, a, b)

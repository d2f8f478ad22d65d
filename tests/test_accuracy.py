"""The (alpha, beta)-accuracy theorems of the SVT lecture notes, checked on inputs that satisfy their
premises (``seeds/svt-lecture-notes-abovethreshold-sparse-pmw.txt``; log is the natural log).

Accuracy (lecture notes): a run is accurate when every ``TOP`` is on a query with ``f_i >= T - alpha``
and every ``BOT`` on a query with ``f_i <= T + alpha``; the mechanism is (alpha, beta)-accurate if a
run is accurate with probability at least ``1 - beta``.

* AboveThreshold, ``k`` queries with ``f_i <= T - alpha`` for ``i < k`` (we also put ``f_k >= T +
  alpha``, so that an accurate run must answer it TOP): ``alpha = 8 (log k + log(2/beta)) / eps``.
* Sparse, at most ``c`` queries with ``f_i >= T - alpha``: ``alpha = 8c (log k + log(2c/beta)) / eps``
  (pure) or ``sqrt(512 c log(1/delta)) (log k + log(2c/beta)) / eps`` (approximate DP).

The inputs sit right at the premises' edge: the small answers are the largest integers strictly
below ``T - alpha`` and the large ones the smallest integers strictly above ``T + alpha``, so every
violation of the accuracy definition is a deviation from the pattern ``BOT...BOT TOP`` (per positive).

Lattice noise: the proof uses the Laplace tail ``P(|Lap(b)| >= t b) = exp(-t)``. The library draws
discrete Laplace ``DLap(b)`` (``P(X = k)`` proportional to ``exp(-|k|/b)``), whose tail is
``P(|X| >= t b) = 2 q^ceil(t b) / (1 + q) <= 2/(1 + q) * exp(-t)`` with ``q = exp(-1/b)``: the bound
holds up to the factor ``F(b) = 2 / (1 + exp(-1/b))`` (between 1 and 2, attained when ``t b`` is an
integer, so it cannot be dropped; see :func:`test_discrete_laplace_tail_bound_holds_up_to_factor`).
Every step of the proof is a union bound over such tails, so for the library's mechanisms the
theorems hold with ``beta`` replaced by ``F * beta`` where ``F`` is the factor of the smallest noise
scale used. The tests allow exactly that, plus a binomial tolerance for the finite number of runs.
The bound is loose (observed rates are orders of magnitude below beta), so each check also compares
the observed violation count with its exact probability under the documented noise scales (computed
from the discrete Laplace pmf; exact binomial test), which does notice wrong noise scales.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mbeacon.privacy.noise import discrete_laplace_pmf, discrete_laplace_sf
from mbeacon.privacy.sparse_vector import BOT, TOP, above_threshold_batch, sparse_batch, sparse_sigma

SEED = 314159
# A fixed seed makes each test deterministic. The observed violation count must not exceed the
# (1 - 1e-6) quantile of Binomial(runs, F * beta): if the true violation rate were exactly at the
# (lattice-adjusted) bound, a random seed would fail with probability below 1e-6.
BINOMIAL_QUANTILE = 1 - 1e-6
# Two-sided exact binomial test of the observed count against the exact violation probability;
# fixed seeds, so a correct mechanism fails for one seed in 10^4.
EXACT_P_FLOOR = 1e-4


def tail_factor(scale: float) -> float:
    """sup over t of P(|X| >= t * scale) / exp(-t) for X ~ DLap(scale)."""
    return 2.0 / (1.0 + math.exp(-1.0 / scale))


def _max_violations(runs: int, rate_bound: float) -> int:
    return int(stats.binom.ppf(BINOMIAL_QUANTILE, runs, min(rate_bound, 1.0)))


def _edge_answers(k: int, large_positions: list[int], threshold: float, alpha: float) -> np.ndarray:
    small = math.ceil(threshold - alpha) - 1  # largest integer strictly below T - alpha
    large = math.floor(threshold + alpha) + 1  # smallest integer strictly above T + alpha
    answers = np.full(k, small, dtype=np.int64)
    answers[large_positions] = large
    return answers


def _violation_fraction(flags: np.ndarray, answers: np.ndarray, threshold: float, alpha: float) -> float:
    """Fraction of runs with a TOP on some f_i < T - alpha or a BOT on some f_i > T + alpha, or that
    halted before answering a query with f_i > T + alpha (it would have had to answer it TOP)."""
    top_on_small = ((flags == TOP) & (answers < threshold - alpha)).any(axis=1)
    bot_on_large = ((flags == BOT) & (answers > threshold + alpha)).any(axis=1)
    missed_large = ((flags != TOP) & (answers > threshold + alpha)).any(axis=1)
    return float(np.mean(top_on_small | bot_on_large | missed_large))


def _exact_violation_probability(
    answers: np.ndarray, threshold: float, threshold_scale: float, query_scale: float
) -> float:
    """Exact P(run is not accurate) for the edge inputs under the documented lattice noise.

    Every large answer ends a segment that is an independent AboveThreshold (fresh threshold noise
    for Sparse; AboveThreshold is the one-segment case): the segment is accurate iff its small
    answers are BOT and its large answer TOP. Given rho, ``f + nu >= T + rho`` iff ``nu >=
    ceil(T + rho - f)``, whose probability is an exact discrete Laplace tail.
    """
    r = math.ceil(50 * threshold_scale) + 1
    rho = np.arange(-r, r + 1)
    weight = discrete_laplace_pmf(rho, threshold_scale)
    small, large = answers.min(), answers.max()
    p_small_top = discrete_laplace_sf(np.ceil(threshold + rho - small), query_scale)
    p_large_top = discrete_laplace_sf(np.ceil(threshold + rho - large), query_scale)
    accurate = 1.0
    start = 0
    for end in np.flatnonzero(answers == large):
        n_small = end - start
        accurate *= float(weight @ (np.exp(n_small * np.log1p(-p_small_top)) * p_large_top))
        start = end + 1
    return 1.0 - accurate


# --- the tail bound the proofs use ---------------------------------------------------------------


@pytest.mark.parametrize("scale", [0.25, 0.5, 1.0, 2.0, 4.0, 16.0, 100.0])
def test_discrete_laplace_tail_bound_holds_up_to_factor(scale: float) -> None:
    factor = tail_factor(scale)
    assert 1.0 < factor < 2.0
    t = np.linspace(1e-3, 40.0, 4001)
    m = np.ceil(t * scale)  # |X| >= t * scale  <=>  |X| >= ceil(t * scale) for integer X
    two_sided = 2.0 * discrete_laplace_sf(m, scale)  # P(X >= m) + P(X <= -m), m >= 1
    assert np.all(two_sided <= factor * np.exp(-t) * (1 + 1e-12))
    # ... and the factor is needed: at t * scale = 1 the continuous bound exp(-t) fails
    assert 2.0 * float(discrete_laplace_sf(1, scale)) == pytest.approx(factor * math.exp(-1.0 / scale))
    assert 2.0 * float(discrete_laplace_sf(1, scale)) > math.exp(-1.0 / scale)


# --- AboveThreshold --------------------------------------------------------------------------------


def _above_threshold_check(eps: float, k: int, beta: float, runs: int, seed: int) -> None:
    alpha = 8 * (math.log(k) + math.log(2 / beta)) / eps
    threshold = 1000.5 + alpha  # T - alpha = 1000.5 is no integer: the small answers are strictly below
    answers = _edge_answers(k, [k - 1], threshold, alpha)
    assert np.all(answers[:-1] <= threshold - alpha) and answers[-1] >= threshold + alpha  # premises
    flags = above_threshold_batch(answers, threshold, eps, runs=runs, rng=seed)
    rate = _violation_fraction(flags, answers, threshold, alpha)
    # noise scales 2/eps (threshold) and 4/eps (queries): the smaller one has the larger factor
    bound = tail_factor(2 / eps) * beta
    assert rate * runs <= _max_violations(runs, bound), f"violation rate {rate} > bound {bound}"
    # sharper: the rate matches the exact value for the documented noise, which obeys the theorem
    exact = _exact_violation_probability(answers, threshold, 2 / eps, 4 / eps)
    assert exact <= bound
    assert stats.binomtest(round(rate * runs), runs, exact).pvalue > EXACT_P_FLOOR


@pytest.mark.parametrize(
    ("eps", "k", "beta"),
    [(1.0, 10, 0.1), (0.5, 100, 0.05), (2.0, 1000, 0.2), (0.1, 50, 0.5), (5.0, 20, 0.01)],
)
def test_above_threshold_is_alpha_beta_accurate(eps: float, k: int, beta: float) -> None:
    _above_threshold_check(eps, k, beta, runs=100_000 if k < 1000 else 10_000, seed=SEED)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("eps", "k", "beta"),
    [(1.0, 10, 0.1), (0.5, 100, 0.05), (0.1, 50, 0.5), (5.0, 2, 0.9), (1.0, 2000, 0.3), (10.0, 5, 0.001)],
)
def test_above_threshold_is_alpha_beta_accurate_large_sample(eps: float, k: int, beta: float) -> None:
    _above_threshold_check(eps, k, beta, runs=1_000_000 if k <= 100 else 20_000, seed=SEED + 1)


def test_accuracy_check_catches_inflated_noise() -> None:
    """The check has teeth: AboveThreshold run at a quarter of the epsilon the alpha was computed for
    (noise four times too large) violates the bound. alpha here is for eps = 1."""
    eps, k, beta, runs = 1.0, 100, 0.05, 20_000
    alpha = 8 * (math.log(k) + math.log(2 / beta)) / eps
    threshold = 1000.5 + alpha
    answers = _edge_answers(k, [k - 1], threshold, alpha)
    flags = above_threshold_batch(answers, threshold, eps / 4, runs=runs, rng=SEED)
    rate = _violation_fraction(flags, answers, threshold, alpha)
    assert rate * runs > _max_violations(runs, tail_factor(2 / eps) * beta)


# --- Sparse ----------------------------------------------------------------------------------------


def _spread(k: int, c: int) -> list[int]:
    """c positions spread over k queries, the last one at k - 1 (so every query gets answered)."""
    return sorted({k - 1 - j * (k // c) for j in range(c)})


def _sparse_check(eps: float, k: int, c: int, beta: float, delta: float, runs: int, seed: int) -> None:
    if delta == 0:
        alpha = 8 * c * (math.log(k) + math.log(2 * c / beta)) / eps
    else:
        alpha = math.sqrt(512 * c * math.log(1 / delta)) * (math.log(k) + math.log(2 * c / beta)) / eps
    threshold = 5000.5 + alpha
    positions = _spread(k, c)
    assert len(positions) == c
    answers = _edge_answers(k, positions, threshold, alpha)
    assert np.sum(answers >= threshold - alpha) <= c  # premise: at most c queries are large
    flags = sparse_batch(answers, threshold, eps, c, delta=delta, runs=runs, rng=seed)
    rate = _violation_fraction(flags, answers, threshold, alpha)
    sigma = sparse_sigma(eps, c, delta)  # threshold noise sigma, query noise 2 sigma
    bound = tail_factor(sigma) * beta
    assert rate * runs <= _max_violations(runs, bound), f"violation rate {rate} > bound {bound}"
    exact = _exact_violation_probability(answers, threshold, sigma, 2 * sigma)
    assert exact <= bound
    assert stats.binomtest(round(rate * runs), runs, exact).pvalue > EXACT_P_FLOOR


@pytest.mark.parametrize(
    ("eps", "k", "c", "beta"),
    [(1.0, 50, 3, 0.1), (2.0, 200, 5, 0.05), (0.5, 20, 2, 0.2), (4.0, 30, 1, 0.5)],
)
def test_sparse_is_alpha_beta_accurate(eps: float, k: int, c: int, beta: float) -> None:
    _sparse_check(eps, k, c, beta, 0.0, runs=50_000, seed=SEED)


@pytest.mark.parametrize(
    ("eps", "k", "c", "beta", "delta"),
    [(1.0, 100, 8, 0.1, 1e-6), (0.5, 40, 20, 0.05, 1e-3), (1.0, 30, 4, 0.3, 0.1)],
)
def test_sparse_approximate_dp_is_alpha_beta_accurate(eps, k, c, beta, delta) -> None:
    _sparse_check(eps, k, c, beta, delta, runs=50_000, seed=SEED)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("eps", "k", "c", "beta", "delta"),
    [
        (1.0, 50, 3, 0.1, 0.0),
        (0.3, 500, 10, 0.05, 0.0),
        (3.0, 10, 2, 0.9, 0.0),
        (1.0, 200, 16, 0.1, 1e-6),
        (0.5, 60, 30, 0.5, 1e-2),
    ],
)
def test_sparse_is_alpha_beta_accurate_large_sample(eps, k, c, beta, delta) -> None:
    _sparse_check(eps, k, c, beta, delta, runs=500_000 if k <= 60 else 100_000, seed=SEED + 2)

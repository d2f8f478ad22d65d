"""SVT²: the contract other issues rely on, the listing's semantics, and batch == scalar."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import mbeacon.privacy as mp
from mbeacon.privacy import (
    BOT,
    TOP,
    UNANSWERED,
    SVT2Params,
    SVT2State,
    svt2,
    svt2_allocate,
    svt2_batch,
    svt2_epsilon,
    svt2_release,
    svt2_step,
)

# A stream that exercises both thresholds: beta below, above and near T, alpha agreeing and not.
ALPHA = np.array([0, 5, 0, 5, 0, 5, 0, 5, 0, 0, 3, 1], dtype=float)
BETA = np.array([0, 0, 3, 3, 0.5, 0.5, 2, 2, 1, 1.5, 2.5, 0.2])


def listing_reference(alpha, beta, threshold, z1, z2, y, y_prime, c, redraw_z=None):
    """The MBeacon listing, literally, with all noise given (for exact-noise comparisons)."""
    out, count, j = [], 0, 0
    for i, (a, b) in enumerate(zip(alpha, beta, strict=True)):
        if count >= c:
            out.append(UNANSWERED)
            continue
        if (a + y[i] < threshold + z1 and b + y[i] < threshold + z1) or (
            a + y_prime[i] >= threshold + z2 and b + y_prime[i] >= threshold + z2
        ):
            out.append(BOT)
        else:
            out.append(TOP)
            count += 1
            if redraw_z is not None:
                z1, z2 = redraw_z[j]
                j += 1
    return out


def test_contract_names_and_types():
    flags = svt2(ALPHA, BETA, 1, 0.5, 0.5, 3, rng=1)
    assert flags.dtype == np.int8 and flags.shape == ALPHA.shape
    batch = svt2_batch(np.tile(ALPHA, (4, 1)), BETA, 1, 0.5, 0.5, 3, rng=1)
    assert batch.dtype == np.int8 and batch.shape == (4, ALPHA.size)
    assert set(np.unique(batch)) <= {TOP, BOT, UNANSWERED}
    for name in ("svt2", "svt2_batch", "svt2_epsilon", "svt2_allocate"):
        assert callable(getattr(mp, name))


@given(
    epsilon=st.floats(0.01, 20, allow_nan=False),
    c=st.integers(1, 200),
    redraw=st.booleans(),
)
def test_allocate_spends_exactly_epsilon_and_minimises_noise(epsilon, c, redraw):
    eps1, eps2 = svt2_allocate(epsilon, c, redraw=redraw)
    assert eps1 > 0 and eps2 > 0
    assert svt2_epsilon(eps1, eps2, c, redraw=redraw) == pytest.approx(epsilon, rel=1e-9)

    def variance(e1):
        e2 = epsilon / 2 - (c if redraw else 1) * e1
        return 2 / e1**2 + 2 * (2 * c / e2) ** 2

    best = variance(eps1)
    for factor in (0.9, 0.99, 1.01, 1.1):
        e1 = eps1 * factor
        if epsilon / 2 - (c if redraw else 1) * e1 > 0:
            assert variance(e1) >= best * (1 - 1e-12)


def test_allocation_ratio_matches_lyu_su_li():
    eps1, eps2 = svt2_allocate(1.0, 5, redraw=False)
    assert eps2 / eps1 == pytest.approx(10 ** (2 / 3))
    eps1, eps2 = svt2_allocate(1.0, 5, redraw=True)
    assert eps2 / eps1 == pytest.approx(4 ** (1 / 3) * 5)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40),
    c=st.integers(1, 6),
    redraw=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_outputs_respect_the_halting_rule(n, c, redraw, seed, data):
    alpha = np.array(data.draw(st.lists(st.integers(0, 20), min_size=n, max_size=n)), dtype=float)
    beta = np.array(data.draw(st.lists(st.floats(0, 20), min_size=n, max_size=n)))
    for flags in (
        svt2(alpha, beta, 2, 0.3, 0.7, c, redraw=redraw, rng=seed),
        svt2_batch(alpha, beta, 2, 0.3, 0.7, c, redraw=redraw, runs=3, rng=seed)[1],
    ):
        tops = np.flatnonzero(flags == TOP)
        assert tops.size <= c
        unanswered = np.flatnonzero(flags == UNANSWERED)
        if unanswered.size:
            # halted: exactly c TOPs, and everything after the c-th TOP is unanswered
            assert tops.size == c and unanswered[0] == tops[-1] + 1
            assert np.all(flags[unanswered[0] :] == UNANSWERED)


def test_huge_epsilon_is_the_noiseless_listing():
    # With eps -> infinity all noise is 0 and TOP means "the data and the prior disagree about >= T".
    alpha = np.array([0, 3, 3, 0, 2, 1])
    beta = np.array([0, 0, 3, 3, 2.5, 0.5])
    flags = svt2(alpha, beta, 2, 1e9, 1e9, 10, rng=0)
    expected = listing_reference(alpha, beta, 2, 0, 0, np.zeros(6), np.zeros(6), 10)
    assert flags.tolist() == expected == [BOT, TOP, BOT, TOP, BOT, BOT]
    batch = svt2_batch(alpha, beta, 2, 1e9, 1e9, 10, runs=5, rng=0)
    assert (batch == np.array(expected)).all()


def test_step_matches_the_listing_noise_for_noise():
    """svt2_step consumes noise exactly as the listing: replay the same words and compare."""
    params = SVT2Params(2.0, 0.5, 0.5, 3, redraw=True)
    for seed in range(30):
        flags = svt2(ALPHA, BETA, 2.0, 0.5, 0.5, 3, redraw=True, rng=seed)
        source = np.random.default_rng(seed)
        z = mp.lattice_laplace(params.threshold_scale, 1.0, 2, source)
        z1, z2 = float(z[0]), float(z[1])
        out, count = [], 0
        for a, b in zip(ALPHA, BETA, strict=True):
            if count >= 3:
                out.append(UNANSWERED)
                continue
            y, yp = mp.lattice_laplace(params.query_scale, 1.0, 2, source)
            if max(a, b) + y < 2 + z1 or min(a, b) + yp >= 2 + z2:
                out.append(BOT)
            else:
                out.append(TOP)
                count += 1
                z = mp.lattice_laplace(params.threshold_scale, 1.0, 2, source)
                z1, z2 = float(z[0]), float(z[1])
        assert flags.tolist() == out


def test_saved_and_resumed_state_equals_one_long_run():
    """Answering one query per 'request' from a JSON-saved state reproduces the long run exactly."""
    params = SVT2Params.from_epsilon(1.0, 3, 1.0, redraw=True)
    for seed in range(20):
        long_run = svt2(
            ALPHA,
            BETA,
            1.0,
            params.epsilon1,
            params.epsilon2,
            3,
            redraw=True,
            rng=np.random.default_rng(seed),
        )
        generator = np.random.default_rng(seed)
        saved = json.dumps(SVT2State.start(params, generator).to_json())
        stepwise = []
        for a, b in zip(ALPHA, BETA, strict=True):
            state = SVT2State.from_json(json.loads(saved))  # a new request, a new worker
            flag, state = svt2_step(state, float(a), float(b), params, generator)
            stepwise.append(flag)
            saved = json.dumps(state.to_json())
        assert stepwise == long_run.tolist()


def test_thresholds_are_kept_out_of_repr():
    state = SVT2State(z1=-7.0, z2=13.0, count=2)
    text = repr(state) + str(state)
    assert "-7" not in text and "13" not in text and "secret" in text


def _pattern_counts(flags: np.ndarray) -> dict[bytes, int]:
    keys, counts = np.unique(flags, axis=0, return_counts=True)
    return {k.tobytes(): int(n) for k, n in zip(keys, counts, strict=True)}


@pytest.mark.parametrize("redraw", [False, True])
def test_batch_has_the_distribution_of_the_listing(redraw):
    """Chi-square homogeneity test of whole output patterns: scalar svt2 vs svt2_batch.

    p > 1e-4 with fixed seeds: a real difference in distribution (e.g. a wrong tail formula, an
    off-by-one in the redraw) gives p-values far below that with these sample sizes, while two
    samples of one distribution fail it with probability 1e-4.
    """
    alpha, beta = ALPHA[:8], BETA[:8]
    scalar = np.array([svt2(alpha, beta, 1, 0.6, 0.6, 2, redraw=redraw, rng=s) for s in range(6000)])
    batch = svt2_batch(alpha, beta, 1, 0.6, 0.6, 2, redraw=redraw, runs=60000, rng=99)
    a, b = _pattern_counts(scalar), _pattern_counts(batch)
    keys = sorted(set(a) | set(b))
    table = np.array([[a.get(k, 0) for k in keys], [b.get(k, 0) for k in keys]])
    # pool rare patterns so the chi-square approximation holds (expected counts >= 5)
    expected_small = table.sum(axis=0) * (table[0].sum() / table.sum()) < 5
    pooled = np.column_stack([table[:, ~expected_small], table[:, expected_small].sum(axis=1)])
    pooled = pooled[:, pooled.sum(axis=0) > 0]
    _, p, _, _ = stats.chi2_contingency(pooled)
    assert p > 1e-4, f"batch and scalar SVT² differ (p={p:.2g})"


def test_batch_per_query_probabilities_are_exact():
    """With c large (never halts) each query is TOP independently with the closed-form probability."""
    eps1, eps2, c = 0.8, 0.8, 1000
    params = SVT2Params(1.0, eps1, eps2, c)
    runs = 200_000
    flags = svt2_batch(ALPHA, BETA, 1.0, eps1, eps2, c, runs=runs, rng=7)
    # Average the per-query TOP probability over the distribution of (z1, z2).
    zs = np.arange(-60, 61)
    pz = mp.discrete_laplace_pmf(zs, params.threshold_scale)
    for i in range(ALPHA.size):
        hi, lo = max(ALPHA[i], BETA[i]), min(ALPHA[i], BETA[i])
        p_hi = mp.discrete_laplace_sf(np.ceil(1 + zs - hi), params.query_scale)
        p_lo = 1 - mp.discrete_laplace_sf(np.ceil(1 + zs - lo), params.query_scale)
        expected = float(np.sum(pz * p_hi) * np.sum(pz * p_lo))
        observed = (flags[:, i] == TOP).mean()
        # 5 binomial standard errors: fails by chance with probability < 1e-6 per query
        assert abs(observed - expected) < 5 * math.sqrt(expected * (1 - expected) / runs) + 1e-9


def test_release_answers_from_the_prior_or_its_negation():
    flags = np.array([BOT, TOP, BOT, TOP, UNANSWERED], dtype=np.int8)
    beta = np.array([0.2, 0.2, 3.0, 3.0, 3.0])
    answers = svt2_release(flags, beta, 1.0)
    assert answers.tolist() == [0, 1, 1, 0, -1]


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError):
        svt2(np.array([1.0, np.nan]), np.array([1.0, 1.0]), 1, 0.5, 0.5, 2)
    with pytest.raises(ValueError):
        svt2_batch(np.array([1.0, np.inf]), np.array([1.0, 1.0]), 1, 0.5, 0.5, 2, rng=0)
    with pytest.raises(ValueError):
        svt2(ALPHA, BETA, 1, 0.5, 0.5, 0)
    with pytest.raises(ValueError):
        SVT2Params(1.0, -0.1, 0.5, 2)
    with pytest.raises(ValueError):
        svt2_batch(np.ones((3, 4)), np.ones(4), 1, 0.5, 0.5, 2, runs=5)

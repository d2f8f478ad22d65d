"""Tests for the noise samplers of :mod:`mbeacon.privacy.noise`.

Statistical tests follow one rule: with a fixed seed a test is deterministic, and its p-value floor
(1e-4) says how unlucky a *correct* sampler would have to be for a random seed to fail; with the
secure default source (``rng=None``) the draws change on every run, so the floor is 1e-6 and a
correct sampler flakes at most once in a million runs per test.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from _stats import pooled_chisquare
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import stats

import mbeacon.privacy as privacy
from mbeacon.privacy import noise
from mbeacon.privacy.noise import (
    GeneratorSource,
    SecureSource,
    as_source,
    discrete_laplace,
    discrete_laplace_pmf,
    discrete_laplace_sf,
    gumbel,
    laplace,
    lattice_laplace,
    lattice_laplace_sf,
    uniform,
)

SEED = 20240611
P_FLOOR_SEEDED = 1e-4  # fixed seed: deterministic; a correct sampler fails for 1 seed in 10^4
P_FLOOR_SECURE = 1e-6  # fresh OS randomness every run: a correct sampler flakes 1 run in 10^6
SCALES = [0.5, 2.0, 10.0]
SAMPLERS = [discrete_laplace, laplace, gumbel]


class FixedWords:
    """A user-supplied RandomSource replaying given 64-bit words (exercises the Protocol path)."""

    def __init__(self, words: list[int]) -> None:
        self._words = list(words)

    def words(self, n: int) -> np.ndarray:
        out, self._words = self._words[:n], self._words[n:]
        assert len(out) == n, "FixedWords ran out of words"
        return np.asarray(out, dtype=np.uint64)

    def word(self) -> int:
        return int(self.words(1)[0])


def _discrete_laplace_gof(samples: np.ndarray, scale: float) -> float:
    """Chi-square p-value of integer samples against the exact discrete Laplace pmf: one bin per
    integer in [-M, M] (M chosen so that every bin expects >= 5) plus the two exact tails."""
    samples = np.asarray(samples)
    n = samples.size
    support = np.arange(0, 2000)
    m = int(support[n * discrete_laplace_pmf(support, scale) >= 5].max())
    ks = np.arange(-m, m + 1)
    tail = float(discrete_laplace_sf(m + 1, scale))  # P(X > M) = P(X < -M) by symmetry
    probs = np.concatenate([[tail], discrete_laplace_pmf(ks, scale), [tail]])
    observed = np.concatenate(
        [
            [np.sum(samples < -m)],
            np.bincount(samples[np.abs(samples) <= m] + m, minlength=ks.size),
            [np.sum(samples > m)],
        ]
    )
    return pooled_chisquare(observed, probs)


# --- discrete Laplace against its exact pmf -------------------------------------------------------


@pytest.mark.parametrize("scale", SCALES)
def test_discrete_laplace_vector_matches_pmf_seeded(scale: float) -> None:
    samples = discrete_laplace(scale, 200_000, rng=SEED)
    assert samples.dtype == np.int64
    assert _discrete_laplace_gof(samples, scale) > P_FLOOR_SEEDED


@pytest.mark.parametrize("scale", SCALES)
def test_discrete_laplace_vector_matches_pmf_secure(scale: float) -> None:
    samples = discrete_laplace(scale, 200_000)
    assert _discrete_laplace_gof(samples, scale) > P_FLOOR_SECURE


@pytest.mark.parametrize("scale", SCALES)
def test_discrete_laplace_scalar_matches_pmf_seeded(scale: float) -> None:
    # An int seed would re-seed on every call (same draw each time), so the scalar loop shares one
    # seeded Generator, which the samplers accept and advance.
    gen = np.random.default_rng(SEED)
    draws = [discrete_laplace(scale, rng=gen) for _ in range(30_000)]
    assert all(type(d) is int for d in draws)
    assert _discrete_laplace_gof(np.asarray(draws), scale) > P_FLOOR_SEEDED


@pytest.mark.parametrize("scale", SCALES)
def test_discrete_laplace_scalar_matches_pmf_secure(scale: float) -> None:
    draws = np.asarray([discrete_laplace(scale) for _ in range(30_000)])
    assert _discrete_laplace_gof(draws, scale) > P_FLOOR_SECURE


@pytest.mark.slow
@pytest.mark.parametrize("scale", [0.3, 0.5, 1.0, 2.0, 10.0, 50.0])
def test_discrete_laplace_matches_pmf_large_sample(scale: float) -> None:
    # 4 million draws resolve relative pmf errors of about 1% even a few scales out in the tails.
    assert _discrete_laplace_gof(discrete_laplace(scale, 4_000_000, rng=SEED), scale) > P_FLOOR_SEEDED
    assert _discrete_laplace_gof(discrete_laplace(scale, 4_000_000), scale) > P_FLOOR_SECURE


@pytest.mark.slow
@pytest.mark.parametrize("scale", SCALES)
def test_discrete_laplace_scalar_matches_pmf_large_sample(scale: float) -> None:
    draws = np.asarray([discrete_laplace(scale) for _ in range(400_000)])
    assert _discrete_laplace_gof(draws, scale) > P_FLOOR_SECURE


@settings(max_examples=200, deadline=None)
@given(
    words=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=8),
    scale=st.sampled_from([0.3, 0.5, 1.0, 2.0, 7.5, 10.0, 1000.0]),
)
def test_scalar_and_vector_paths_map_words_identically(words: list[int], scale: float) -> None:
    """Both code paths turn one 64-bit word into one sample by the same rule (53 bits for the
    magnitude, the low bit for the sign), so the same words give the same samples."""
    scalar_d = [discrete_laplace(scale, rng=FixedWords([w])) for w in words]
    np.testing.assert_array_equal(
        np.asarray(scalar_d), discrete_laplace(scale, len(words), rng=FixedWords(words))
    )
    for sampler in (laplace, gumbel):  # math.log and np.log may differ in the last ulp
        scalar = [sampler(scale, rng=FixedWords([w])) for w in words]
        vector = sampler(scale, len(words), rng=FixedWords(words))
        np.testing.assert_allclose(np.asarray(scalar), vector, rtol=1e-12, atol=1e-300)
    scalar_u = [uniform(rng=FixedWords([w])) for w in words]
    np.testing.assert_array_equal(np.asarray(scalar_u), uniform(len(words), rng=FixedWords(words)))


@pytest.mark.parametrize("scale", SCALES)
def test_extreme_words_give_finite_samples(scale: float) -> None:
    """The smallest and largest words are the edges of W in (0, 1]; no sampler may return inf/NaN."""
    for word in (0, 1, 2**64 - 1, 2**64 - 2, 2**11, 2**63):
        for sampler in SAMPLERS:
            for value in (
                sampler(scale, rng=FixedWords([word])),
                sampler(scale, 1, rng=FixedWords([word]))[0],
            ):
                assert math.isfinite(value)
    # the all-zero word is W = 2^-53, the deepest tail: log(2^53 * 2 / (1 + q)) < 54 log 2 scales out
    tail = abs(discrete_laplace(scale, rng=FixedWords([0])))
    assert 36 * scale <= tail <= 54 * math.log(2) * scale


# --- exact distribution functions ----------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(scale=st.floats(0.05, 500.0), m=st.integers(-400, 400))
def test_discrete_laplace_sf_and_pmf_agree(scale: float, m: int) -> None:
    sf_m = float(discrete_laplace_sf(m, scale))
    sf_next = float(discrete_laplace_sf(m + 1, scale))
    pmf_m = float(discrete_laplace_pmf(m, scale))
    # sf(m) - sf(m+1) = P(X = m); for m <= 0 both terms are near 1, so allow double rounding
    assert sf_m - sf_next == pytest.approx(pmf_m, rel=1e-9, abs=1e-14)
    # symmetry: P(X >= m) = P(X <= -m) = 1 - P(X >= 1 - m), and the pmf is even
    assert sf_m + float(discrete_laplace_sf(1 - m, scale)) == pytest.approx(1.0, abs=1e-14)
    assert pmf_m == float(discrete_laplace_pmf(-m, scale))
    assert 0.0 <= sf_next <= sf_m <= 1.0
    # the defining geometric decay P(X = k+1) / P(X = k) = exp(-1/scale) for k >= 0
    k = abs(m)
    ratio = float(discrete_laplace_pmf(k + 1, scale)) / pmf_m if pmf_m > 1e-300 else None
    if ratio is not None:
        assert ratio == pytest.approx(math.exp(-1.0 / scale), rel=1e-9)


@pytest.mark.parametrize("scale", [0.1, 0.5, 2.0, 10.0, 100.0])
def test_discrete_laplace_sf_limits_and_normalisation(scale: float) -> None:
    far = int(60 * scale) + 10
    assert float(discrete_laplace_sf(-far, scale)) == pytest.approx(1.0, abs=1e-15)
    assert float(discrete_laplace_sf(far, scale)) == pytest.approx(0.0, abs=1e-15)
    ks = np.arange(-far, far + 1)
    assert discrete_laplace_pmf(ks, scale).sum() == pytest.approx(1.0, abs=1e-12)
    # sf is the tail sum of the pmf, evaluated vectorised
    tail_sums = np.cumsum(discrete_laplace_pmf(ks, scale)[::-1])[::-1]
    np.testing.assert_allclose(discrete_laplace_sf(ks, scale), tail_sums, rtol=1e-9, atol=1e-14)


@settings(max_examples=200, deadline=None)
@given(
    v=st.floats(-50, 50),
    scale=st.floats(0.1, 20.0),
    sensitivity=st.sampled_from([0.25, 0.5, 1.0, 3.0]),
)
def test_lattice_laplace_sf_is_tail_of_lattice_points(v: float, scale: float, sensitivity: float) -> None:
    # P(N >= v) for N = sensitivity * X: the tail from the first lattice point at or above v. The
    # library snaps v within 1e-9 lattice units onto the lattice point (to absorb float error such as
    # 3 * 0.1 = 0.30000000000000004), so v that close to a lattice point is not a real-valued case.
    assume(abs(v / sensitivity - round(v / sensitivity)) > 1e-6)
    ks = np.arange(-5000, 5001)
    points = ks * sensitivity
    probs = discrete_laplace_pmf(ks, scale / sensitivity)
    expected = probs[points >= v].sum()
    assert float(lattice_laplace_sf(v, scale, sensitivity)) == pytest.approx(expected, abs=1e-9)


# --- lattice Laplace, continuous Laplace, Gumbel, uniform ---------------------------------------


@pytest.mark.parametrize("sensitivity", [0.1, 0.5, 3.0])
@pytest.mark.parametrize("scale", [1.0, 6.0])
def test_lattice_laplace_on_lattice_with_discrete_laplace_units(scale: float, sensitivity: float) -> None:
    values = lattice_laplace(scale, sensitivity, 100_000, rng=SEED)
    units = values / sensitivity
    np.testing.assert_allclose(units, np.round(units), rtol=0, atol=1e-9)
    # in lattice units the noise is discrete Laplace with scale / sensitivity
    assert _discrete_laplace_gof(np.round(units).astype(np.int64), scale / sensitivity) > P_FLOOR_SEEDED
    scalar = lattice_laplace(scale, sensitivity, rng=SEED)
    assert scalar / sensitivity == pytest.approx(round(scalar / sensitivity), abs=1e-9)


def test_lattice_laplace_unit_sensitivity_is_integer_noise() -> None:
    values = lattice_laplace(3.0, 1.0, 1000, rng=SEED)
    assert values.dtype == np.int64
    np.testing.assert_array_equal(values, discrete_laplace(3.0, 1000, rng=SEED))


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize(
    ("sampler", "reference"),
    [(laplace, stats.laplace), (gumbel, stats.gumbel_r)],
    ids=["laplace", "gumbel"],
)
def test_continuous_samplers_pass_ks(sampler, reference, scale: float) -> None:
    dist = reference(scale=scale)
    vector = sampler(scale, 50_000, rng=SEED)
    assert vector.shape == (50_000,)
    assert stats.kstest(vector, dist.cdf).pvalue > P_FLOOR_SEEDED
    assert stats.kstest(sampler(scale, 50_000), dist.cdf).pvalue > P_FLOOR_SECURE
    gen = np.random.default_rng(SEED)
    scalar = np.asarray([sampler(scale, rng=gen) for _ in range(10_000)])
    assert stats.kstest(scalar, dist.cdf).pvalue > P_FLOOR_SEEDED
    scalar_secure = np.asarray([sampler(scale) for _ in range(10_000)])
    assert stats.kstest(scalar_secure, dist.cdf).pvalue > P_FLOOR_SECURE


def test_ks_detects_a_wrong_scale() -> None:
    # the KS checks above have power: with 50k draws a 10% scale error moves the cdf by up to 0.0175,
    # about 3.9 / sqrt(n), far past the 1e-6 critical value (about 2.7 / sqrt(n))
    draws = laplace(2.0, 50_000, rng=SEED)
    assert stats.kstest(draws, stats.laplace(scale=2.2).cdf).pvalue < 1e-6
    assert stats.kstest(gumbel(2.0, 50_000, rng=SEED), stats.gumbel_r(scale=2.2).cdf).pvalue < 1e-6


def test_uniform_lies_in_half_open_unit_interval() -> None:
    u = uniform(200_000, rng=SEED)
    assert u.shape == (200_000,)
    assert np.all(u > 0.0) and np.all(u <= 1.0)
    assert stats.kstest(u, "uniform").pvalue > P_FLOOR_SEEDED
    scalars = [uniform() for _ in range(1000)]
    assert all(0.0 < x <= 1.0 for x in scalars)
    # the edges: the zero word maps to 2^-53 (never 0, so log is safe); the all-ones word to 1.0
    assert uniform(rng=FixedWords([0])) == 2.0**-53
    assert uniform(rng=FixedWords([2**64 - 1])) == 1.0
    np.testing.assert_array_equal(uniform(2, rng=FixedWords([0, 2**64 - 1])), [2.0**-53, 1.0])


@pytest.mark.parametrize("sampler", [discrete_laplace, laplace, gumbel])
def test_tuple_sizes_give_arrays_of_that_shape(sampler) -> None:
    assert sampler(2.0, (3, 4), rng=SEED).shape == (3, 4)
    assert sampler(2.0, 0, rng=SEED).shape == (0,)
    assert uniform((2, 5), rng=SEED).shape == (2, 5)


# --- rng handling --------------------------------------------------------------------------------


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_same_int_seed_gives_identical_draws(sampler) -> None:
    np.testing.assert_array_equal(sampler(3.0, 64, rng=7), sampler(3.0, 64, rng=7))
    np.testing.assert_array_equal(sampler(3.0, 64, rng=np.int64(7)), sampler(3.0, 64, rng=7))
    assert sampler(3.0, rng=7) == sampler(3.0, rng=7)
    assert not np.array_equal(sampler(3.0, 64, rng=7), sampler(3.0, 64, rng=8))


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_generator_is_advanced_between_calls(sampler) -> None:
    gen = np.random.default_rng(SEED)
    first, second = sampler(3.0, 64, rng=gen), sampler(3.0, 64, rng=gen)
    assert not np.array_equal(first, second)
    # ... and is used as given: a generator in the same state gives the same first draw
    np.testing.assert_array_equal(first, sampler(3.0, 64, rng=np.random.default_rng(SEED)))


@pytest.mark.parametrize("sampler", [*SAMPLERS, lambda scale, size=None, rng=None: uniform(size, rng)])
def test_secure_default_differs_across_calls(sampler) -> None:
    assert not np.array_equal(sampler(10.0, 64), sampler(10.0, 64))
    assert not np.array_equal(sampler(10.0, 64, rng=None), sampler(10.0, 64, rng=None))


def test_as_source_resolution() -> None:
    assert isinstance(as_source(None), SecureSource)
    assert as_source(None) is as_source()
    assert isinstance(as_source(3), GeneratorSource)
    gen = np.random.default_rng(1)
    assert as_source(gen).generator is gen
    custom = FixedWords([1, 2])
    assert as_source(custom) is custom
    assert SecureSource.secure and not GeneratorSource.secure


@pytest.mark.parametrize("bad_rng", [True, 1.5, "seed", [1, 2], np.random.RandomState(0), object()])
@pytest.mark.parametrize("sampler", SAMPLERS)
def test_wrong_rng_types_raise_type_error(sampler, bad_rng) -> None:
    with pytest.raises(TypeError):
        sampler(1.0, 4, rng=bad_rng)
    with pytest.raises(TypeError):
        sampler(1.0, rng=bad_rng)


@pytest.mark.parametrize("bad_rng", [False, 2.0, b"x"])
def test_wrong_rng_types_raise_type_error_for_uniform_and_lattice(bad_rng) -> None:
    with pytest.raises(TypeError):
        uniform(4, rng=bad_rng)
    with pytest.raises(TypeError):
        lattice_laplace(1.0, 0.5, 4, rng=bad_rng)


@pytest.mark.parametrize("bad_scale", [0.0, -1.0, -1e-300, math.nan, math.inf, -math.inf])
def test_invalid_scales_raise_value_error(bad_scale: float) -> None:
    for sampler in SAMPLERS:
        with pytest.raises(ValueError):
            sampler(bad_scale, 4, rng=1)
        with pytest.raises(ValueError):
            sampler(bad_scale, rng=1)
    with pytest.raises(ValueError):
        lattice_laplace(bad_scale, 1.0, 4, rng=1)
    with pytest.raises(ValueError):
        lattice_laplace(1.0, bad_scale, 4, rng=1)
    with pytest.raises(ValueError):
        discrete_laplace_pmf(0, bad_scale)
    with pytest.raises(ValueError):
        discrete_laplace_sf(0, bad_scale)


def test_package_reexports_the_samplers() -> None:
    assert privacy.discrete_laplace is noise.discrete_laplace
    assert privacy.discrete_laplace_pmf is noise.discrete_laplace_pmf
    assert privacy.discrete_laplace_sf is noise.discrete_laplace_sf


# --- fork independence ---------------------------------------------------------------------------

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _fork_children(draw, n_children: int = 2) -> list[np.ndarray]:
    """Fork ``n_children`` children from the *current* process state; each runs ``draw()`` and sends
    the int64 result back through a pipe. Returns the children's arrays in fork order."""
    pipes = []
    for _ in range(n_children):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: never return into pytest
            code = 1
            try:
                os.close(r)
                payload = np.ascontiguousarray(draw(), dtype=np.int64).tobytes()
                with os.fdopen(w, "wb") as out:
                    out.write(payload)
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        pipes.append((pid, r))
    results = []
    for pid, r in pipes:
        with os.fdopen(r, "rb") as inp:
            data = inp.read()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "child failed"
        results.append(np.frombuffer(data, dtype=np.int64))
    return results


@needs_fork
def test_forked_workers_draw_independent_secure_noise() -> None:
    """gunicorn workers fork from a master: with the default (secure, stateless) source the workers'
    noise streams share nothing with each other or with the master."""
    warm_up = privacy.discrete_laplace(10.0, 256)  # any lazily created state now exists pre-fork
    assert warm_up.shape == (256,)
    child_a, child_b = _fork_children(lambda: privacy.discrete_laplace(10.0, 256))
    parent_next = privacy.discrete_laplace(10.0, 256)
    assert child_a.shape == child_b.shape == (256,)
    # 256 draws at scale 10 collide by chance with probability far below 1e-100
    assert not np.array_equal(child_a, child_b)
    assert not np.array_equal(child_a, parent_next)
    assert not np.array_equal(child_b, parent_next)
    # the scalar path too (it takes another route to the OS source)
    scalar_a, scalar_b = _fork_children(lambda: [privacy.discrete_laplace(10.0) for _ in range(256)])
    assert not np.array_equal(scalar_a, scalar_b)


@needs_fork
def test_generator_created_before_fork_repeats_in_children() -> None:
    """The hazard the service avoids: a seeded (or any) numpy Generator created before ``fork`` is
    copied into every worker, which then all draw the *same* noise."""
    gen = np.random.default_rng()  # even an OS-entropy-seeded generator has in-process state
    privacy.discrete_laplace(10.0, 16, rng=gen)
    child_a, child_b = _fork_children(lambda: privacy.discrete_laplace(10.0, 256, rng=gen))
    np.testing.assert_array_equal(child_a, child_b)
    # the parent's own next draws repeat them as well
    np.testing.assert_array_equal(child_a, privacy.discrete_laplace(10.0, 256, rng=gen))

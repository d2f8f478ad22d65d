"""Online PMW with per-probe state (mbeacon/attack/pmw_state.py): the evaluation's model of the service
matches :func:`online_pmw_step` run query by query, and the tracker meets the moved histograms."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.attack.pmw_state import PMWStreams, synthetic_count
from mbeacon.privacy.online_pmw import OnlinePMWParams, OnlinePMWState, online_pmw_step
from mbeacon.privacy.sparse_vector import TOP

N = 50


def probability(rows: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """A public prior: probe r's values are Beta-like bumps; the mass of [lo, hi] by a CDF."""
    rows = np.asarray(rows, dtype=np.float64)
    lo, hi = np.clip(lo, 0.0, 1.0), np.clip(hi, 0.0, 1.0)

    def cdf(x: np.ndarray) -> np.ndarray:
        power = 1.0 + rows  # probe 0 uniform, probe 1 x^2, ...
        return x**power

    return np.maximum(cdf(hi) - cdf(lo), 0.0)


def reference(stream, params: OnlinePMWParams, seed: int):
    """The service's representation written out plainly: per query, segments between the sorted
    distinct endpoints of the probe's updates, the query's, 0 and 1, each at the prior's mass floored
    at 0.5/N and renormalised; the state's updates re-expressed as segment indices; one
    :func:`online_pmw_step`."""
    rng = np.random.default_rng(seed)
    state = OnlinePMWState.start(params, rng)
    done: dict[int, list[tuple[float, float, float]]] = {}
    out = []
    for row, lo, hi, alpha in stream:
        mine = done.get(row, [])
        edges = sorted({0.0, 1.0, lo, hi, *[x for u in mine for x in u[:2]]})
        masses = np.array([float(probability([row], [a], [b])[0]) for a, b in itertools.pairwise(edges)])
        masses = np.maximum(masses, 0.5 / N)
        masses /= masses.sum()
        index = {x: i for i, x in enumerate(edges)}
        here = OnlinePMWState(
            state.z, state.count, tuple((str(row), index[a], index[b], t) for a, b, t in mine)
        )
        flag, answer, count, after = online_pmw_step(
            here, str(row), index[lo], index[hi], alpha, masses, params, rng
        )
        if flag == TOP:
            done.setdefault(row, []).append((lo, hi, after.updates[-1][3]))
        state = OnlinePMWState(after.z, after.count, ())
        out.append((flag, answer, count))
    return out


def _stream(seed: int, queries: int = 60):
    """Nested and overlapping ranges at three probes, counts often far from the prior (TOPs)."""
    rng = np.random.default_rng(seed)
    stream = []
    for _ in range(queries):
        row = int(rng.integers(0, 3))
        a, b = np.sort(np.round(rng.uniform(0, 1, 2), 3))
        if b <= a:
            b = min(1.0, a + 0.01)
        stream.append((row, float(a), float(b), int(rng.integers(0, N + 1))))
    return stream


def test_the_state_model_is_online_pmw_step_query_by_query() -> None:
    """One account fed a fixed stream: flags, answers and released counts equal the step loop's
    exactly (same seed), TOPs and later answers from moved histograms included."""
    params = OnlinePMWParams.from_epsilon(40.0, 12, 5, N, margin=2.0)
    for seed in (1, 2, 3):
        stream = _stream(seed)
        expected = reference(stream, params, seed)
        model = PMWStreams(params, 1, probability, np.random.default_rng(seed))
        got = []
        for row, lo, hi, alpha in stream:
            release, _ = model.answer(
                np.array([0]), np.array([row]), np.array([lo]), np.array([hi]), np.array([alpha])
            )
            count = release.counts[0]
            got.append(
                (int(release.flags[0]), int(release.answers[0]), None if np.isnan(count) else float(count))
            )
        tops = sum(f == TOP for f, _, _ in got)
        assert 3 <= tops <= params.c  # the stream exercises updates (and, here, the halt)
        assert got == [(f, a, None if c is None else float(c)) for f, a, c in expected]


@settings(max_examples=60, deadline=None)
@given(row=st.integers(0, 2), lo=st.floats(0, 1), width=st.one_of(st.just(0.0), st.floats(0, 1)))
def test_the_fast_path_equals_the_segment_histogram_before_any_update(row, lo, width) -> None:
    """Point ranges included: the service answers ``[x, x]`` from a floored segment of its own, and the
    evaluation's model must say what the service says."""
    hi = min(1.0, lo + width)
    params = OnlinePMWParams.from_epsilon(10.0, 5, 1, N)
    model = PMWStreams(params, 1, probability, np.random.default_rng(0))
    fast = model.synthetic(np.array([0]), np.array([row]), np.array([lo]), np.array([hi]))[0]
    assert np.isclose(fast, synthetic_count(probability, row, [], lo, hi, N), rtol=1e-12, atol=1e-12)


def test_after_a_top_nearby_ranges_are_answered_from_the_moved_histogram() -> None:
    """A TOP at a probe moves the synthetic count of a range nested in it (and of none elsewhere)."""
    params = OnlinePMWParams.from_epsilon(1000.0, 5, 5, N)  # nearly no noise: the TOP is certain
    model = PMWStreams(params, 2, probability, np.random.default_rng(4))
    runs, rows, lo, hi = np.array([0, 1]), np.array([0, 0]), np.array([0.01, 0.01]), np.array([0.02, 0.02])
    before = model.synthetic(runs, rows, lo, hi)
    # the prior says 2.5 patients in [0, 0.05], so "at least 5?" is "no"; the data hold 40: a TOP
    release, _ = model.answer(np.array([0]), np.array([0]), np.array([0.0]), np.array([0.05]), np.array([40]))
    assert release.flags[0] == TOP and abs(release.counts[0] - 40) <= 2
    after = model.synthetic(runs, rows, lo, hi)
    assert after[0] > 10 * before[0]  # run 0's histogram moved toward the 40 patients in [0, 0.05]
    assert after[1] == before[1]  # run 1 (another account) did not


@settings(max_examples=60, deadline=None)
@given(
    updated=st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20), st.floats(0.01, 0.99)), max_size=3),
    asked=st.tuples(st.integers(0, 20), st.integers(0, 20)),
)
def test_the_evaluation_answers_as_the_service_does(updated, asked) -> None:
    """One Online PMW state: the evaluation's accounts give every range, point ranges and ranges at
    updated probes included, the synthetic count the service's state gives it."""
    from mbeacon.beacon.sanitisers import online_pmw_state

    params = OnlinePMWParams.from_epsilon(10.0, 5, 1, N)
    model = PMWStreams(params, 1, probability, np.random.default_rng(0))
    edges = [(min(a, b) / 20, max(a, b) / 20, t) for a, b, t in updated]
    if edges:
        model.updates[0][1] = list(edges)
    lo, hi = min(asked) / 20, max(asked) / 20
    got = model.synthetic(np.array([0]), np.array([1]), np.array([lo]), np.array([hi]))[0]

    def mass(probes: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        return probability(np.ones(len(starts)), starts, ends)

    recorded = [online_pmw_state.PMWUpdate("p", a, b, t) for a, b, t in edges]
    served = online_pmw_state.synthetic_count(N, "p", lo, hi, recorded, mass)
    assert np.isclose(got, served, rtol=1e-12, atol=1e-12)

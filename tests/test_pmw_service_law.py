"""The service's Online PMW decides a whole request at once
(mbeacon.beacon.sanitisers.online_pmw_state.run). Its answers must follow the law of the reference,
``run_stepwise`` (one online_pmw_step per query on the histogram the updates leave), and a query's
synthetic count must not depend on the rest of its request."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.beacon.sanitisers import online_pmw_state as pmw_state
from mbeacon.privacy.online_pmw import OnlinePMWParams
from mbeacon.privacy.sparse_vector import TOP, UNANSWERED


def _beta_mass(probes: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """A smooth prior per probe: mass of [lo, hi] under a CDF x**k with k set by the probe."""
    k = np.where(probes == "p", 2.0, 0.5)
    return np.where(hi > lo, hi**k - lo**k, 0.0)


#: A request that revisits a probe after it may have been updated, with counts that disagree with the
#: prior by about the test's noise, so that TOPs, BOTs and the halt all happen often.
STREAM = [("p", 0.2, 0.4, 12), ("q", 0.0, 0.3, 30), ("p", 0.1, 0.5, 8), ("p", 0.2, 0.4, 12),
          ("q", 0.5, 0.5, 3), ("q", 0.0, 0.3, 30), ("p", 0.6, 1.0, 40), ("q", 0.2, 0.9, 20)]  # fmt: skip
PARAMS = OnlinePMWParams(10.0, 1.0, 2.0, 2.0, 2, 60, margin=2.0)
RUNS = 3000
#: Two frequencies of 3,000 runs each: 4.5 standard errors of their difference at p = 0.5.
TOLERANCE = 4.5 * np.sqrt(2 * 0.25 / RUNS)
#: Mean released counts (each position's sd is under 5 patients here, 6 taken): 4.5 standard errors of
#: their difference.
COUNT_TOLERANCE = 4.5 * 6 * np.sqrt(2 / RUNS)


def test_a_request_decided_at_once_follows_the_law_of_one_step_per_query() -> None:
    queries = [pmw_state.PMWQuery(*q) for q in STREAM]
    rng = np.random.default_rng(20)  # noise-ok: the test's own seeded draws
    ours = np.zeros((4, len(queries)))  # TOP, UNANSWERED, answered yes, released count
    reference = np.zeros_like(ours)
    for _ in range(RUNS):
        out = pmw_state.run(PARAMS, 0.0, 0, queries, {}, _beta_mass, rng=rng)
        flags, answers = np.array(out.flags), np.array(out.answers)
        ours += [flags == TOP, flags == UNANSWERED, answers, out.counts]
        out = pmw_state.run_stepwise(PARAMS, 0.0, 0, queries, {}, _beta_mass, rng=rng)
        flags, answers = np.array(out.flags), np.array(out.answers)
        reference += [flags == TOP, flags == UNANSWERED, answers, out.counts]
    ours, reference = ours / RUNS, reference / RUNS
    assert 0.05 < ours[0].mean() < 0.6 and ours[1].max() > 0.05  # the stream exercises TOPs and the halt
    np.testing.assert_allclose(ours[:3], reference[:3], atol=TOLERANCE)
    np.testing.assert_allclose(ours[3], reference[3], atol=COUNT_TOLERANCE)


ranges = st.tuples(st.integers(0, 20), st.integers(0, 20)).map(lambda r: (min(r) / 20, max(r) / 20))


@settings(deadline=None, max_examples=60)
@given(
    st.lists(st.tuples(st.sampled_from("pq"), ranges), min_size=1, max_size=8),
    st.lists(st.tuples(ranges, st.floats(0.01, 0.99)), max_size=3),
)
def test_a_synthetic_count_is_the_replayed_histograms_and_does_not_depend_on_the_request(
    asked: list[tuple[str, tuple[float, float]]], recorded: list[tuple[tuple[float, float], float]]
) -> None:
    params = OnlinePMWParams(5.0, 1.0, 1.0, 1.0, 5, 100)
    updates = {"p": [pmw_state.PMWUpdate("p", lo, hi, t) for (lo, hi), t in recorded]}
    queries = [pmw_state.PMWQuery(p, lo, hi, 0) for p, (lo, hi) in asked]
    together = pmw_state._starting_counts(params, queries, updates, _beta_mass)
    for q, s in zip(queries, together, strict=True):
        alone = pmw_state._starting_counts(params, [q], updates, _beta_mass)
        assert alone[0] == s  # exactly: an answer never depends on what else the request asks
        replayed = pmw_state.synthetic_count(
            params.n, q.probe, q.lo, q.hi, updates.get(q.probe, []), _beta_mass
        )
        assert s == pytest.approx(replayed, rel=1e-9, abs=1e-9)

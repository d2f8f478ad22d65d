"""The cohort's Online PMW in the privacy core (mbeacon.privacy.cohort_pmw): one state for every owner,
each within its quota; the statistical audit passes it and catches its broken twin."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.privacy.audit import all_targets, audit_target
from mbeacon.privacy.cohort_pmw import cohort_pmw_batch
from mbeacon.privacy.online_pmw import OnlinePMWParams, online_pmw_batch
from mbeacon.privacy.sparse_vector import TOP, UNANSWERED

PRIOR = np.full(4, 0.25)


@settings(max_examples=30, deadline=None)
@given(owners=st.lists(st.integers(0, 3), min_size=1, max_size=30), quota=st.integers(1, 4),
       c=st.integers(1, 6), seed=st.integers(0, 2**16))  # fmt: skip
def test_no_owner_exceeds_its_quota_and_the_cohort_its_c(owners, quota, c, seed) -> None:
    params = OnlinePMWParams.from_epsilon(50.0, c, 1, 20, margin=0.0)
    k = len(owners)
    alpha = np.random.default_rng(seed).integers(0, 20, size=k)
    release = cohort_pmw_batch(np.array(owners), np.zeros(k), np.full(k, 2), alpha, PRIOR, params, quota,
                               runs=50, rng=seed)  # fmt: skip
    tops = release.flags == TOP
    assert tops.sum(axis=1).max() <= c
    for owner in set(owners):
        assert tops[:, np.array(owners) == owner].sum(axis=1).max() <= quota
    # an untested query is still answered (from the synthetic state), never left without an answer
    assert set(np.unique(release.answers[release.flags == UNANSWERED])) <= {0, 1}


def test_one_owner_with_the_whole_quota_is_online_pmw() -> None:
    """With one owner whose quota is c, the cohort's run is Online PMW's: the same TOP rates."""
    params = OnlinePMWParams.from_epsilon(2.0, 3, 1, 8, margin=0.5)
    lo, hi = np.array([0, 0, 1, 2, 0, 1] * 2), np.array([1, 2, 3, 4, 4, 2] * 2)
    alpha = np.array([0, 5, 3, 1, 8, 2] * 2)
    ours = cohort_pmw_batch(np.zeros(12), lo, hi, alpha, PRIOR, params, 3, runs=40_000, rng=1)
    theirs = online_pmw_batch(0, lo, hi, alpha, PRIOR, params, runs=40_000, rng=2)
    rate = (ours.flags == TOP).mean(axis=0)
    assert np.allclose(rate, (theirs.flags == TOP).mean(axis=0), atol=0.015), rate


def test_the_audit_passes_it_and_catches_its_broken_twin() -> None:
    targets = all_targets(0.5)
    ok = audit_target(targets["cohort-pmw-c2"], runs=20_000, seed=3)
    assert ok.verdict == "pass" and ok.p_value > 0.05
    broken = audit_target(targets["cohort-pmw-exact-past-quota"], runs=20_000, seed=3)
    assert broken.verdict == "violation" and broken.p_value < 1e-6 and broken.epsilon_lower_bound > 1.0

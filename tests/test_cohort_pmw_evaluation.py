"""``cohort-pmw`` in the evaluation: the compiled stream keeps the quotas as the audited step loop does,
every account's answers come back to it, and the attack and deployment views use the cohort's one
budget."""

from __future__ import annotations

import numpy as np
import pytest

from mbeacon.attack.coalition import coalition_epsilon, release
from mbeacon.attack.defences import Defence
from mbeacon.attack.evaluate import GridConfig
from mbeacon.privacy.cohort_pmw import cohort_pmw_batch
from mbeacon.privacy.online_pmw import OnlinePMWParams, online_pmw_batch
from mbeacon.privacy.sparse_vector import TOP, UNANSWERED

PRIOR = np.full(4, 0.25)


def test_the_compiled_stream_keeps_the_quotas_as_the_step_loop() -> None:
    """Three owners, quota 1, c 2, at one probe: the compiled kernel's TOP and yes rates per query
    agree with the audited step loop's over 40,000 runs each (tolerance 4.5 binomial sd)."""
    params = OnlinePMWParams.from_epsilon(3.0, 2, 1, 8, margin=0.5)
    owners = np.array([0, 1, 0, 2, 1, 0, 2, 1, 0, 2])
    lo, hi = np.array([0, 0, 1, 2, 0, 1, 0, 2, 1, 0]), np.array([1, 2, 3, 4, 4, 2, 2, 3, 4, 1])
    alpha = np.array([0, 5, 3, 1, 8, 2, 6, 0, 7, 4])
    runs = 40_000
    loop = cohort_pmw_batch(owners, lo, hi, alpha, PRIOR, params, 1, runs=runs, rng=1)
    fast = online_pmw_batch(0, lo, hi, alpha, PRIOR[None, :], params, runs=runs, rng=2, owner=owners, quota=1)
    for name, a, b in [
        ("top", loop.flags == TOP, fast.flags == TOP),
        ("untested", loop.flags == UNANSWERED, fast.flags == UNANSWERED),
        ("yes", loop.answers == 1, fast.answers == 1),
    ]:
        x, y = a.mean(axis=0), b.mean(axis=0)
        sd = np.sqrt(np.maximum(x * (1 - x), 1e-4) * 2 / runs)
        assert np.all(np.abs(x - y) <= 4.5 * sd), (name, x, y)
    tops = fast.flags == TOP
    assert tops.sum(axis=1).max() <= 2  # the cohort's c
    assert max(tops[:, owners == o].sum(axis=1).max() for o in range(3)) <= 1  # each owner's quota
    assert np.isnan(fast.counts[~tops & (fast.flags == UNANSWERED)]).all()  # untested: no count


def test_every_account_gets_its_own_answers_back() -> None:
    """Four cohorts of five accounts through one stream each: a released count sits in the account
    and query it measured (tiny noise at epsilon 2,000), no account has more than its quota of TOPs
    and no cohort more than its c; an untested query is nothing to the attacker (no count)."""
    defence = Defence("cohort-pmw", epsilon=2000.0, c=6, threshold=1, margin=0.0, quota=2).with_cohort(500)
    rng = np.random.default_rng(3)
    alpha = rng.integers(100, 400, size=(20, 8))  # far from the prior's beta 0.1: every test is a TOP
    out = defence.release_accounts(alpha, np.full(alpha.shape, 0.1), rng, accounts=5)
    tops = out.flags == TOP
    assert tops.sum(axis=1).max() == 2  # every account spends exactly its quota
    assert tops.reshape(4, 5, 8).sum(axis=(1, 2)).tolist() == [6, 6, 6, 6]  # each cohort its c
    assert np.all(np.abs(out.counts[tops] - alpha[tops]) <= 3)
    assert np.isnan(out.counts[~tops]).all()
    # an account's TOPs are its first queries that came before the cohort's c ran out (round-robin)
    assert not tops[:, 3:].any()
    with pytest.raises(ValueError, match="whole cohorts"):
        defence.release_accounts(alpha, np.zeros(alpha.shape), rng, accounts=3)


def test_a_coalition_of_any_size_buys_at_most_the_cohorts_c() -> None:
    """The coalition's pooled accounts share one stream: its bound stays at the cohort's epsilon, and
    the counts it pools are at most c, however many accounts join."""
    defence = Defence("cohort-pmw", epsilon=1000.0, c=5, threshold=1, quota=1).with_cohort(300)
    alpha = np.full((40, 10), 150)
    counts, answers = release(
        defence, alpha, np.full(alpha.shape, 0.1), shared=False, rng=np.random.default_rng(1)
    )
    assert counts is not None and np.isfinite(counts).sum() == 5  # c, not 40 accounts x quota
    assert np.sum(answers >= 0) == 5  # the rest is the public synthetic state: dropped
    assert coalition_epsilon(defence, 40, shared=False) == 1000.0


def test_the_grid_runs_cohort_pmw_at_each_quota_within_c() -> None:
    grid = GridConfig(defences=["cohort-pmw"], epsilon=[1.0], c=[5, 20], threshold=[1], margin=[0.0],
                      quota=[2, 10])  # fmt: skip
    labels = [d.label for d in grid.settings()]
    assert labels == [
        "cohort-pmw eps=1 c=5 r=0.333333 quota=2",
        "cohort-pmw eps=1 c=20 r=0.333333 quota=2",
        "cohort-pmw eps=1 c=20 r=0.333333 quota=10",
    ]
    default = GridConfig(defences=["cohort-pmw"], epsilon=[1.0], c=[20], threshold=[1], margin=[0.0])
    assert [d.effective_quota for d in default.settings()] == [2]  # the service's default, c / 10

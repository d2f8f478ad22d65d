"""The service's mechanism dispatch (mbeacon.beacon.mechanisms) and each mechanism's account accounting.

The promise to a budget holder is the policy's ``epsilon``: whatever the mechanism, variant, share
and ``c``, what an account reports as spent must never exceed it, must grow with each positive, and
must reach it exactly at the c-th positive.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mbeacon.beacon.budget import Account, AccountParams
from mbeacon.beacon.config import DatasetPolicy
from mbeacon.beacon.mechanisms import run
from mbeacon.privacy.sparse_vector import BOT, TOP, UNANSWERED
from mbeacon.privacy.svt2 import SVT2State

policies = st.builds(
    lambda mechanism, epsilon, c, variant, share, margin: DatasetPolicy(
        mechanism=mechanism,
        epsilon=epsilon,
        c=c,
        variant=variant,
        release_share=share if mechanism == "svt2-noisy" else None,
        margin_above=margin if mechanism != "svt2" else 0.0,
    ),
    st.sampled_from(["svt2", "svt2-margin", "svt2-noisy"]),
    st.floats(0.01, 100),
    st.integers(1, 500),
    st.sampled_from(["single", "redraw"]),
    st.floats(0.01, 0.99),
    st.floats(0, 50),
)


@given(policy=policies, sensitivity=st.integers(1, 20))
def test_an_account_never_spends_more_than_its_epsilon(policy: DatasetPolicy, sensitivity: int) -> None:
    params = AccountParams.from_policy(policy, sensitivity=sensitivity)
    assert AccountParams.from_storage(params.to_storage()) == params
    spent = [
        Account("user:a", "d", params, SVT2State(0.0, 0.0, k), "now").epsilon_spent()
        for k in range(params.c + 1)
    ]
    assert all(a < b for a, b in itertools.pairwise(spent))
    # the promise at the c-th positive (to the float rounding of eps1 and eps2's sum, as for SVT²)
    assert math.isclose(spent[-1], policy.epsilon, rel_tol=1e-12)
    assert max(spent) <= policy.epsilon * (1 + 1e-12)
    # the privacy layer's own statement of the mechanism's cost agrees with the service's
    assert math.isclose(params.svt2().epsilon, policy.epsilon, rel_tol=1e-9)


def _noisy_params(epsilon: float = 100.0, c: int = 3) -> AccountParams:
    return AccountParams.from_policy(DatasetPolicy(mechanism="svt2-noisy", epsilon=epsilon, c=c, threshold=5))


def test_svt2_noisy_answers_a_top_from_its_noisy_count() -> None:
    params = _noisy_params()
    state = SVT2State.start(params.svt2())
    # the data hold 40 patients where the prior expects none: a clear TOP, answered by the count
    out = run(params.mechanism, params.svt2(), state, [40.0, 0.0], [0.0, 0.0])
    assert out.flags == [TOP, BOT]
    assert out.answers[0] is True and out.answers[1] is None
    assert out.counts[0] is not None and abs(out.counts[0] - 40) <= 3  # noise scale c/eps3 = 0.09
    assert out.counts[1] is None
    assert out.state.count == 1 and (out.state.z1, out.state.z2) == (state.z1, state.z2)


def test_svt2_noisy_can_answer_no_on_a_top() -> None:
    """A TOP whose noisy count falls below T answers no: unlike SVT², it is not a forced flip."""
    params = _noisy_params()
    # the prior expects 40 where the data hold 0: TOP, and the count says no (SVT² would flip to no as
    # well; the point is that the answer is the count's, with the count released)
    out = run(params.mechanism, params.svt2(), SVT2State.start(params.svt2()), [0.0], [40.0])
    assert out.flags == [TOP] and out.answers == [False] and out.counts == [0]


def test_a_halted_account_answers_nothing_and_keeps_its_state() -> None:
    for mechanism in ("svt2", "svt2-margin", "svt2-noisy"):
        params = AccountParams.from_policy(DatasetPolicy(mechanism=mechanism, c=2))
        halted = SVT2State(1.0, 2.0, 2)
        out = run(mechanism, params.svt2(), halted, [10.0, 10.0], [0.0, 0.0])
        assert out.flags == [UNANSWERED, UNANSWERED] and out.state == halted
        assert out.counts == [None, None]


def test_margins_keep_near_threshold_disagreements_from_spending() -> None:
    """With a margin of 30 patients, a count of 3 against a prior of 0 (T = 1) is not a clear
    disagreement: at a large epsilon it answers from the prior and spends nothing."""
    policy = DatasetPolicy(mechanism="svt2-margin", epsilon=100.0, c=5, margin_above=30.0)
    params = AccountParams.from_policy(policy)
    state = SVT2State.start(params.svt2())
    out = run("svt2-margin", params.svt2(), state, [3.0] * 20, [0.0] * 20)
    assert out.flags == [BOT] * 20 and out.state.count == 0
    plain = AccountParams.from_policy(DatasetPolicy(mechanism="svt2", epsilon=100.0, c=5))
    out = run("svt2", plain.svt2(), SVT2State.start(plain.svt2()), [3.0], [0.0])
    assert out.flags == [TOP]


@pytest.mark.parametrize("mechanism", ["svt2-margin", "svt2-noisy"])
def test_unprotected_dispatch_is_not_reached_by_sanitisers(mechanism: str) -> None:
    params = AccountParams.from_policy(DatasetPolicy(mechanism=mechanism))
    assert params.sanitised
    none = AccountParams.from_policy(DatasetPolicy(mechanism="none", allow_unprotected=True))
    assert not none.sanitised
    out = run("none", none.svt2(), SVT2State(0.0, 0.0, 0), [5.0], [0.0])
    assert out.flags == [BOT] and out.state == SVT2State(0.0, 0.0, 0)

"""The served sanitisers (mbeacon.beacon.sanitisers) and each mechanism's account accounting.

The promise to a budget holder is the policy's ``epsilon``: whatever the mechanism, variant, share
and ``c``, what an account reports as spent must never exceed it, must grow with each positive, and
must reach it exactly at the c-th positive.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.beacon.budget import Account, AccountParams
from mbeacon.beacon.config import dataset_policy
from mbeacon.beacon.sanitisers import Fresh, Run, account_params, sanitiser_of
from mbeacon.beacon.sanitisers import online_pmw_state as pmw_state
from mbeacon.beacon.sanitisers.policy import PolicyBase
from mbeacon.privacy.online_pmw import OnlinePMWParams
from mbeacon.privacy.sparse_vector import BOT, TOP, UNANSWERED
from mbeacon.privacy.svt2 import SVT2State


def run(
    mechanism: str, params: AccountParams, state: SVT2State, alpha: list[float], beta: list[float]
) -> Run:
    """The account's sanitiser over queries at probes of their own."""
    fresh = Fresh(alpha, beta, [f"p{i}" for i in range(len(alpha))], [(0.0, 1.0)] * len(alpha))
    return sanitiser_of(mechanism).decide(params, state, fresh, None)


def start(params: AccountParams) -> SVT2State:
    return sanitiser_of(params.mechanism).start_state(params)


policies = st.builds(
    lambda mechanism, epsilon, c, variant, share, margin: dataset_policy(
        mechanism=mechanism,
        epsilon=epsilon,
        c=c,
        variant="single" if mechanism == "online-pmw" else variant,
        release_share=share if mechanism in ("svt2-noisy", "online-pmw") else None,
        margin_above=margin if mechanism in ("svt2-margin", "svt2-noisy") else 0.0,
        margin=margin if mechanism == "online-pmw" else 0.0,
    ),
    st.sampled_from(["svt2", "svt2-margin", "svt2-noisy", "online-pmw"]),
    st.floats(0.01, 100),
    st.integers(1, 500),
    st.sampled_from(["single", "redraw"]),
    st.floats(0.01, 0.99),
    st.floats(0, 50),
)


@given(policy=policies, sensitivity=st.integers(1, 20))
def test_an_account_never_spends_more_than_its_epsilon(policy: PolicyBase, sensitivity: int) -> None:
    if policy.mechanism == "online-pmw":
        sensitivity = 1  # the engine serves online-pmw at contribution bound 1 only
    params = account_params(policy, sensitivity=sensitivity)
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
    own = sanitiser_of(policy).mechanism_params(params, n=100)
    assert math.isclose(own.epsilon, policy.epsilon, rel_tol=1e-9)


def _noisy_params(epsilon: float = 100.0, c: int = 3) -> AccountParams:
    return account_params(dataset_policy(mechanism="svt2-noisy", epsilon=epsilon, c=c, threshold=5))


def test_svt2_noisy_answers_a_top_from_its_noisy_count() -> None:
    params = _noisy_params()
    state = start(params)
    # the data hold 40 patients where the prior expects none: a clear TOP, answered by the count
    out = run(params.mechanism, params, state, [40.0, 0.0], [0.0, 0.0])
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
    out = run(params.mechanism, params, start(params), [0.0], [40.0])
    assert out.flags == [TOP] and out.answers == [False] and out.counts == [0]


def test_a_halted_account_answers_nothing_and_keeps_its_state() -> None:
    for mechanism in ("svt2", "svt2-margin", "svt2-noisy"):
        params = account_params(dataset_policy(mechanism=mechanism, c=2))
        halted = SVT2State(1.0, 2.0, 2)
        out = run(mechanism, params, halted, [10.0, 10.0], [0.0, 0.0])
        assert out.flags == [UNANSWERED, UNANSWERED] and out.state == halted
        assert out.counts == [None, None]


def test_margins_keep_near_threshold_disagreements_from_spending() -> None:
    """With a margin of 30 patients, a count of 3 against a prior of 0 (T = 1) is not a clear
    disagreement: at a large epsilon it answers from the prior and spends nothing."""
    policy = dataset_policy(mechanism="svt2-margin", epsilon=100.0, c=5, margin_above=30.0)
    params = account_params(policy)
    state = start(params)
    out = run("svt2-margin", params, state, [3.0] * 20, [0.0] * 20)
    assert out.flags == [BOT] * 20 and out.state.count == 0
    plain = account_params(dataset_policy(mechanism="svt2", epsilon=100.0, c=5))
    # plain SVT² spends on it: TOP unless the prior's side's noise alone crosses T (about 2% of runs)
    tops = sum(run("svt2", plain, start(plain), [3.0], [0.0]).flags == [TOP] for _ in range(200))
    assert tops >= 180


@pytest.mark.parametrize("mechanism", ["svt2-margin", "svt2-noisy"])
def test_unprotected_dispatch_is_not_reached_by_sanitisers(mechanism: str) -> None:
    params = account_params(dataset_policy(mechanism=mechanism))
    assert params.sanitised
    none = account_params(dataset_policy(mechanism="none", allow_unprotected=True))
    assert not none.sanitised
    out = run("none", none, SVT2State(0.0, 0.0, 0), [5.0], [0.0])
    assert out.flags == [BOT] and out.state == SVT2State(0.0, 0.0, 0)


# --- online-pmw: policy, account parameters and the bin-free synthetic distribution (pmw_state) ----------


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"mechanism": "svt2-noisy", "margin": 5.0}, "margin applies to mechanism 'online-pmw'"),
        ({"mechanism": "online-pmw", "margin_above": 5.0}, "online-pmw has one margin"),
        (
            {"mechanism": "online-pmw", "count_epsilon": 0.1},
            "count_epsilon must be 0 with mechanism 'online-pmw'",
        ),
        ({"mechanism": "online-pmw", "variant": "redraw"}, "online-pmw draws one noisy threshold"),
        ({"mechanism": "online-pmw", "margin": -1.0}, "greater than or equal to 0"),
        ({"mechanism": "svt2", "release_share": 0.3}, "'svt2-noisy' or 'online-pmw'"),
    ],
)
def test_online_pmw_policy_keys_are_checked(keys: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataset_policy(**keys)


def test_online_pmw_account_parameters_split_epsilon_as_the_privacy_layer_does() -> None:
    policy = dataset_policy(mechanism="online-pmw", epsilon=10.0, c=50, threshold=5, margin=60.0)
    params = account_params(policy)
    assert params.epsilon3 == pytest.approx(10.0 / 3)  # release_share defaults to 1/3
    assert params.margin == 60.0 and params.count_epsilon == 0.0
    reference = OnlinePMWParams.from_epsilon(10.0, 50, 5, 120, margin=60.0)
    assert sanitiser_of(params.mechanism).mechanism_params(params, n=120) == reference
    assert AccountParams.from_storage(params.to_storage()) == params
    assert params.to_json()["margin"] == 60.0 and params.to_json()["mechanism"] == "online-pmw"
    # the text of an account that does not use the margin is what it always was
    assert 'margin"' not in account_params(dataset_policy()).to_storage()
    with pytest.raises(ValueError, match="recorded updates"):
        run("online-pmw", params, SVT2State(0, 0, 0), [1.0], [0.0])
    state = start(params)
    assert state.z2 == 0.0 and state.count == 0 and "z1" not in repr(state).replace("z1=<", "")
    spent = [Account("u", "d", params, SVT2State(0.0, 0.0, k), "t").epsilon_spent() for k in range(51)]
    assert spent[0] == pytest.approx(params.epsilon1) and spent[-1] == pytest.approx(10.0)
    assert all(a < b for a, b in itertools.pairwise(spent))


ranges = st.lists(
    st.tuples(st.integers(0, 100), st.integers(0, 100)).map(lambda r: (min(r) / 100, max(r) / 100)),
    min_size=1,
    max_size=12,
)


@given(ranges)
def test_every_range_covers_exactly_its_segments(asked: list[tuple[float, float]]) -> None:
    segs = pmw_state.segments(asked)
    assert segs == sorted(segs) and segs[0][0] == 0.0 and segs[-1][1] == 1.0 and len(segs) >= 2
    for lo, hi in asked:
        i, j = pmw_state.covered(segs, lo, hi)
        inside = segs[i:j]
        assert inside and inside[0][0] == lo and inside[-1][1] == hi
        assert all(lo <= a <= b <= hi for a, b in inside)
        assert all(not (lo <= a <= b <= hi) for a, b in segs[:i] + segs[j:])


def _uniform(probes: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return hi - lo


@settings(deadline=None)  # the first example compiles the histogram kernel
@given(ranges, ranges, st.lists(st.floats(0.01, 0.99), min_size=12, max_size=12))
def test_the_synthetic_count_does_not_depend_on_how_segments_are_cut(
    updated: list[tuple[float, float]], extra: list[tuple[float, float]], targets: list[float]
) -> None:
    """Updates replayed on a finer cut give the same synthetic counts (up to the half-patient floor of
    point segments): the histogram is a function of the prior, the ranges and the released values."""
    params = OnlinePMWParams(5.0, 1.0, 1.0, 1.0, 20, 1_000_000)
    updates = [pmw_state.PMWUpdate("p", lo, hi, t) for (lo, hi), t in zip(updated, targets, strict=False)]
    for lo, hi in extra:
        plain = pmw_state.synthetic_count(params.n, "p", lo, hi, updates, _uniform)
        # the same question with the extra ranges' cut points added, by asking through more updates
        # whose target is the mass they already have (a no-op update on any cut)
        finer = [*updates]
        for a, b in extra:
            finer.append(
                pmw_state.PMWUpdate(
                    "p", a, b, pmw_state.synthetic_count(params.n, "p", a, b, finer, _uniform) / params.n
                )
            )
        refined = pmw_state.synthetic_count(params.n, "p", lo, hi, finer, _uniform)
        assert refined == pytest.approx(plain, rel=1e-4, abs=0.05 * (len(updated) + len(extra) + 2))


def _counting_mass(probes: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.where(hi > lo, hi - lo, 0.0)


def test_a_top_updates_the_probe_and_a_later_range_there_is_answered_from_it_for_free() -> None:
    """40 patients in [0.30, 0.32] where the uniform prior expects 0.6 of 30 (T = 5): a TOP, whose
    released count moves the synthetic mass; a wider range at the same probe is then a BOT answering
    yes from the updated distribution (the bare prior would answer no and spend a positive); another
    probe still starts at its prior."""
    params = OnlinePMWParams(5.0, 30.0, 30.0, 30.0, 3, 60)
    first = pmw_state.PMWQuery("p", 0.30, 0.32, 40)
    wider = pmw_state.PMWQuery("p", 0.29, 0.33, 40)
    other = pmw_state.PMWQuery("q", 0.29, 0.33, 40)
    updates: dict[str, list[pmw_state.PMWUpdate]] = {}
    out = pmw_state.run(params, 0.0, 0, [first, wider, other], updates, _counting_mass, rng=3)
    assert out.flags == [TOP, BOT, TOP] and out.count == 2
    assert out.answers == [True, True, True]
    assert abs(out.counts[0] - 40) <= 3 and abs(out.counts[1] - 40) <= 4  # synthetic s ~ v + 2 x 0.6
    assert [(u.probe, u.lo, u.hi) for u in out.updates] == [("p", 0.30, 0.32), ("q", 0.29, 0.33)]
    assert updates["p"] == out.updates[:1] and abs(out.updates[0].value * 60 - out.counts[0]) <= 1
    # without the update the wider range is a TOP again: the bare prior disagrees with the data
    again = pmw_state.run(params, 0.0, 0, [wider], {}, _counting_mass, rng=3)
    assert again.flags == [TOP]


def test_a_halted_online_pmw_account_answers_from_its_synthetic_distribution() -> None:
    params = OnlinePMWParams(5.0, 30.0, 30.0, 30.0, 1, 60)
    known = {"p": [pmw_state.PMWUpdate("p", 0.30, 0.32, 40 / 60)]}
    out = pmw_state.run(params, 0.0, 1, [pmw_state.PMWQuery("p", 0.29, 0.33, 0)], known, _counting_mass)
    assert out.flags == [UNANSWERED] and out.count == 1 and out.updates == []
    assert out.answers == [True] and abs(out.counts[0] - 41) <= 1  # from the update, not from the data


@settings(deadline=None, max_examples=50)
@given(
    st.lists(
        st.tuples(st.sampled_from("pq"), st.integers(0, 20), st.integers(0, 20), st.integers(0, 60)),
        min_size=1,
        max_size=30,
    ),
    st.integers(1, 4),
    st.integers(0, 2**32 - 1),
)
def test_an_online_pmw_stream_spends_one_update_per_positive_and_halts_at_c(
    stream: list[tuple[str, int, int, int]], c: int, seed: int
) -> None:
    params = OnlinePMWParams(5.0, 0.5, 0.5, 0.5, c, 60)
    queries = [pmw_state.PMWQuery(p, min(a, b) / 20, max(a, b) / 20, alpha) for p, a, b, alpha in stream]
    known: dict[str, list[pmw_state.PMWUpdate]] = {}
    out = pmw_state.run(params, 0.0, 0, queries, known, _counting_mass, rng=seed)
    tops = [i for i, flag in enumerate(out.flags) if flag == TOP]
    assert out.count == len(tops) == len(out.updates) <= c
    assert [(u.probe, u.lo, u.hi) for u in out.updates] == [
        (queries[i].probe, queries[i].lo, queries[i].hi) for i in tops
    ]
    assert all(0 < u.value < 1 for u in out.updates)
    if out.count == c:  # halted: nothing after the c-th TOP is a TOP or a BOT
        assert all(flag == UNANSWERED for flag in out.flags[tops[-1] + 1 :])
    assert all(flag != UNANSWERED for flag in out.flags[: (tops[-1] + 1) if out.count == c else None])
    assert sorted(u.probe for us in known.values() for u in us) == sorted(u.probe for u in out.updates)

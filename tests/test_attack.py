"""The membership-inference attack's library core: its probabilities, scores and metrics, and the
unprotected beacon it must break on the demo cohort."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.attack import (
    auc,
    exact_answers,
    lrt_scores,
    miss_probability,
    plan_queries,
    roc_curve,
    tpr_at_fpr,
    yes_probabilities,
)
from mbeacon.store.cohorts import CohortStore
from mbeacon.store.demo import ensure_demo
from mbeacon.store.priors import load_prior
from mbeacon.store.simulate import FILES


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=2, max_size=30).filter(
        lambda rows: len({m for _, m in rows}) == 2
    )
)
def test_auc_is_the_probability_a_member_outscores_a_non_member(rows) -> None:
    scores = np.array([s for s, _ in rows], dtype=float)
    members = np.array([m for _, m in rows])
    pairs = [(a > b) + 0.5 * (a == b) for a in scores[members] for b in scores[~members]]
    assert auc(scores, members) == pytest.approx(np.mean(pairs))
    fpr, tpr = roc_curve(scores, members)
    assert np.trapezoid(tpr, fpr) == pytest.approx(np.mean(pairs))


def test_tpr_at_fpr() -> None:
    members = np.r_[np.ones(10, bool), np.zeros(100, bool)]
    scores = np.r_[np.arange(10) + 100.0, np.arange(100.0)]
    assert tpr_at_fpr(scores, members, 0.01) == 1.0  # every member above the top non-member
    scores[-1] = 105.0  # one non-member (1%) among the members
    assert tpr_at_fpr(scores, members, 0.01) == 1.0
    scores[-2] = 106.0  # two: at 1% FPR only members above the second are caught
    assert tpr_at_fpr(scores, members, 0.01) == pytest.approx(0.4)  # 106..109 are above 105


def test_yes_probabilities_closed_forms() -> None:
    pi, n = np.array([0.01, 0.1, 0.5]), 60
    member, non = yes_probabilities(pi, n, 1, miss=0.1, min_pi=0.0)
    np.testing.assert_allclose(non, 1 - (1 - pi) ** n)
    np.testing.assert_allclose(member, 0.9 + 0.1 * (1 - (1 - pi) ** (n - 1)))
    member3, non3 = yes_probabilities(pi, n, 3, miss=0.0, min_pi=0.0)
    assert np.all(member3[:2] > non3[:2]) and np.all(member3 >= non3)  # the victim is one of the three
    assert miss_probability(2.0) == pytest.approx(0.0455, abs=1e-4)


def test_scores_accumulate_and_skip_unanswered() -> None:
    answers = np.array([[1, 0, np.nan, 1]])
    pm, pn = np.full((1, 4), 0.9), np.full((1, 4), 0.3)
    scores = lrt_scores(answers, pm, pn)
    yes, no = np.log(0.9 / 0.3), np.log(0.1 / 0.7)
    np.testing.assert_allclose(scores[0], [yes, yes + no, yes + no, 2 * yes + no])


@pytest.fixture(scope="module")
def demo_attack(tmp_path_factory):
    demo = ensure_demo(tmp_path_factory.mktemp("demo"))
    cohort = CohortStore(demo.store).open(demo.dataset)
    prior = load_prior(demo.store, demo.prior)
    members = pd.read_csv(demo.simulation / FILES["members_remeasured"], index_col=0)
    others = pd.read_csv(demo.simulation / FILES["nonmembers_remeasured"], index_col=0)
    profiles = np.vstack([members.T.to_numpy(), others.T.to_numpy()])
    labels = np.r_[np.ones(members.shape[1], bool), np.zeros(others.shape[1], bool)]
    prior_rows = prior.index(members.index.to_numpy())
    plan = plan_queries(profiles, prior, prior_rows, queries=100, noise_sd=0.02)
    return SimpleNamespace(
        cohort=cohort, prior=prior, plan=plan, labels=labels, profiles=profiles, prior_rows=prior_rows
    )


def test_exact_answers_match_a_direct_count(demo_attack) -> None:
    cohort, prior, plan = demo_attack.cohort, demo_attack.prior, demo_attack.plan
    rows = cohort.probe_index(prior.probe_ids)
    answers = exact_answers(cohort.rows(np.arange(cohort.n_probes)), plan, rows, threshold=2)
    for v, q in [(0, 0), (5, 17), (70, 99), (119, 50)]:
        values = cohort.rows([rows[plan.probes[v, q]]])[0]
        alpha = np.sum((values >= plan.lo[v, q]) & (values <= plan.hi[v, q]))
        assert answers[v, q] == (alpha >= 2)
    assert np.all(np.diff(plan.pi, axis=1) >= 0), "most unusual probes first"


def test_unprotected_beacon_leaks_membership(demo_attack) -> None:
    """MBeacon's headline on the demo cohort (60 patients, 2,000 probes): 100 queries separate
    members from non-members (AUC >= 0.9). The prior-only strategy is weaker: the prior is the
    general population, so it wastes queries on the disease's DMPs (``planning``'s docstring)."""
    d = demo_attack
    cohort = d.cohort
    values = cohort.rows(np.arange(cohort.n_probes))
    rows = cohort.probe_index(d.prior.probe_ids)
    by_strategy = {}
    for strategy in ("pooled", "prior"):
        p = plan_queries(d.profiles, d.prior, d.prior_rows, queries=100, noise_sd=0.02, strategy=strategy)
        answers = exact_answers(values, p, rows, 1)
        member, non = yes_probabilities(p.pi, cohort.n_patients, 1, miss_probability(2.0, 0.005))
        scores = lrt_scores(answers, member, non)
        by_strategy[strategy] = [auc(scores[:, k - 1], d.labels) for k in (10, 100)]
    assert by_strategy["pooled"][1] >= 0.9
    assert by_strategy["prior"][0] < by_strategy["prior"][1] < by_strategy["pooled"][1]

"""The coalition attacker: reconstruction from pooled releases, TPR at FPR, the provable bound."""

from __future__ import annotations

import numpy as np
import pytest

from mbeacon.attack.coalition import coalition_table, coalition_view, reconstruct
from mbeacon.attack.defences import Defence
from mbeacon.attack.evaluate import build, load_evaluation_config
from mbeacon.attack.metrics import tpr_at_fpr
from mbeacon.attack.run import evaluate_setting
from mbeacon.privacy.tradeoff import best_attack, max_tpr


@pytest.fixture(scope="module")
def scenario():
    """The quick evaluation's simulated cohort (100 members, 100 non-members), fixed seed."""
    return build(load_evaluation_config(quick=True))


def test_tpr_at_fpr_on_known_scores() -> None:
    members = np.r_[np.ones(10, bool), np.zeros(1000, bool)]
    scores = np.r_[np.arange(10) + 2000.0, np.arange(1000, dtype=float)]
    # one non-member (999) may be flagged at 0.1%: members above the 2nd highest non-member (998)
    assert tpr_at_fpr(scores, members, 0.001) == 1.0
    scores[:5] = 0.0  # half the members now score below every flagged non-member
    assert tpr_at_fpr(scores, members, 0.001) == 0.5
    assert tpr_at_fpr(scores, members, 0.01) == 0.5


def test_reconstruct_solves_exact_subset_sums() -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(0, 2, 40).astype(float)
    rows = (rng.random((400, 40)) < 0.2).astype(float)
    scores = reconstruct(rows, rows @ x)
    assert np.all((scores > 0.5) == (x == 1))
    assert np.all((scores >= 0) & (scores <= 1))


@pytest.mark.slow
def test_unprotected_beacon_is_reconstructed(scenario) -> None:
    rows = coalition_view(scenario, Defence("none"), 30, sizes=(1, 0), rng=np.random.default_rng(1))
    alone, everyone = rows
    assert everyone["accounts"] == scenario.victims
    assert everyone["coalition_auc"] > 0.95
    assert everyone["coalition_auc"] > alone["coalition_auc"] + 0.3
    assert everyone["bound_auc"] is None  # no DP guarantee, no bound


@pytest.mark.slow
def test_cohort_budget_keeps_the_coalition_within_the_bound(scenario) -> None:
    cohort = Defence("cohort-pmw", epsilon=0.5, c=5, threshold=1, margin=0.0, release_share=1 / 3, quota=1)
    cohort = cohort.with_cap(scenario.queries).with_cohort(scenario.n)
    rows = coalition_view(scenario, cohort, 30, sizes=(5, 0), repetitions=3, rng=np.random.default_rng(2))
    for row in rows:
        assert row["accounting"] == "cohort"
        assert row["bound_epsilon"] == 0.5  # one budget however many accounts pool
        # 100 members x 100 non-members: the AUC's sampling sd is about 0.04; 0.05 is over one sd
        assert row["coalition_auc"] <= row["bound_auc"] + 0.05
    per_account = Defence("online-pmw", epsilon=0.5, c=5, threshold=1, margin=0.0, release_share=1 / 3)
    per_account = per_account.with_cap(scenario.queries).with_cohort(scenario.n)
    every = coalition_view(scenario, per_account, 30, sizes=(0,), rng=np.random.default_rng(2))[0]
    assert every["accounting"] == "account" and every["bound_epsilon"] == 0.5 * scenario.victims


@pytest.mark.slow
def test_the_deployment_view_measures_what_quotas_leave_the_researchers(scenario) -> None:
    """One attacking identity against cohort-pmw: with a quota of a tenth of c the researchers keep
    most of their discovery utility; with a quota of the whole c the attacker spends it all."""
    kept = {}
    for quota in (5, 50):
        defence = Defence("cohort-pmw", epsilon=10.0, c=50, threshold=1, margin=15.0, release_share=1 / 3,
                          quota=quota)  # fmt: skip
        rows = evaluate_setting(scenario, defence, [100], repetitions=4, seed=5, attackers=("rarest",),
                                shared=True)  # fmt: skip
        kept[quota] = rows[-1]["honest_kept_shared"]
        assert rows[-1]["utility_discovery_unattacked"] > 0.3  # something to keep
    # measured 0.96 and 0.01 (four streams of 20,000 attack queries and 350 honest ones)
    assert kept[5] >= 0.8 and kept[50] <= 0.1, kept


@pytest.mark.slow
def test_evaluation_rows_carry_the_sweep_and_the_report_table(scenario) -> None:
    rows = evaluate_setting(
        scenario, Defence("none"), [10, 30], repetitions=1, seed=1, attackers=("rarest",), coalition=True
    )
    assert "coalition" not in rows[0]  # only the largest query count is pooled
    sweep = rows[-1]["coalition"]
    assert [r["accounts"] for r in sweep] == [1, 2, 5, 20, scenario.victims]
    assert rows[-1]["auc_coalition"] == max(r["coalition_auc"] for r in sweep) > 0.95
    table = coalition_table(rows)
    assert f"| none | account | {scenario.victims} |" in table
    assert coalition_table(rows[:1]) == ""


def test_bound_of_a_large_coalition_epsilon_does_not_overflow() -> None:
    # 2,000 accounts at epsilon 1 each: e^2000 is beyond a float
    bound = best_attack(2000.0)
    assert bound.auc == 1.0 and bound.tpr_at_fpr_0_1pct == 1.0
    assert max_tpr(2000.0, 0.0) == 0.0

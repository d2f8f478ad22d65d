"""The evaluation's deployment view: the attacker and honest researchers in one ``global`` ledger."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.attack.evaluate import JSON_KEYS, EvaluationConfig, build, public_row, run_grid
from mbeacon.attack.shared import SHARED_KEYS, shared_streams

CONFIG = {
    "seed": 5,
    "repetitions": 3,
    "queries": [1, 20, 200],
    "simulation": {"probes": 3000, "patients": 50, "nonmembers": 50, "reference": 100},
    "grid": {
        "defences": ["svt2-single", "online-pmw", "noisy-count", "suppression", "prior-only"],
        "epsilon": [10.0],
        "c": [100],
        "threshold": [1],
        "suppression_threshold": [3],
        "margin": [20.0],
    },
}


@pytest.fixture(scope="module")
def rows():
    config = EvaluationConfig(**CONFIG)
    return {(r["defence"], r["queries"]): r for r in run_grid(config, build(config), workers=1)}


@settings(max_examples=60, deadline=None)
@given(
    victims=st.integers(1, 12),
    q=st.integers(1, 6),
    honest=st.integers(0, 15),
    runs=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_streams_hold_every_query_once_and_the_attacker_goes_round_robin(victims, q, honest, runs, seed):
    source, is_honest = shared_streams(victims, q, honest, runs, np.random.default_rng(seed))
    attack = victims * q
    assert source.shape == is_honest.shape == (runs, attack + honest)
    for r in range(runs):
        assert sorted(source[r]) == list(range(attack + honest))
        assert np.array_equal(is_honest[r], source[r] >= attack)
        asked = source[r][~is_honest[r]]
        rounds = asked % q  # the k of victim v's k-th query
        assert np.all(np.diff(rounds) >= 0), "every victim's k-th query before any (k+1)-th"
        for k in range(q):  # each round asks every victim once
            assert sorted(asked[rounds == k] // q) == list(range(victims))


def test_the_attackers_victim_order_does_not_follow_the_labels() -> None:
    """The scenario lists members first; a round-robin in that order would hand the budget to them."""
    source, _ = shared_streams(100, 1, 0, 40, np.random.default_rng(1))
    first_half_members = (source[:, :50] < 50).mean()
    assert 0.4 < first_half_members < 0.6


def test_json_rows_carry_both_views(rows) -> None:
    assert set(SHARED_KEYS) <= set(JSON_KEYS)
    for row in rows.values():
        public = public_row(row)
        for key in ("auc_shared", "utility_random_shared", "utility_discovery_shared", "refused_shared"):
            assert public[key] is not None, (row["label"], key)
        assert public["attacker_shared"] in ("rarest", "tracker")


def test_an_attacker_draining_the_global_ledger_costs_researchers_their_discoveries(rows) -> None:
    """Under one ledger the attacker's queries spend the positives the researchers need; with
    per-user accounts (the Sybil view) the researchers' utility does not depend on the attack."""
    for name in ("svt2-single", "online-pmw", "noisy-count"):
        light, heavy = rows[name, 1], rows[name, 200]
        assert light["utility_discovery"] == heavy["utility_discovery"], name  # per-user: untouched
        assert heavy["utility_discovery_shared"] < light["utility_discovery_shared"] - 0.2, name
        assert heavy["utility_discovery_shared"] < heavy["utility_discovery"] - 0.2, name
        assert heavy["honest_refused_shared"] > 0.9 and heavy["refused_shared"] > 0.9, name
        # drained: the researchers get the prior's answers
        prior = rows["prior-only", 200]
        assert heavy["utility_random_shared"] == pytest.approx(prior["utility_random"], abs=0.03), name


def test_one_ledger_holds_the_attack_at_chance(rows) -> None:
    for name in ("svt2-single", "online-pmw", "noisy-count"):
        assert abs(rows[name, 200]["auc_shared"] - 0.5) < 0.1, name


def test_defences_without_a_ledger_are_the_same_in_both_views(rows) -> None:
    """Suppression answers everyone alike: a shared scope buys nothing, and the tracker still wins."""
    for q in (1, 20, 200):
        row = rows["suppression", q]
        assert row["auc_shared"] == row["auc"] and row["attacker_shared"] == row["attacker"]
        assert row["utility_discovery_shared"] == row["utility_discovery"]
    assert rows["suppression", 200]["auc_shared"] > 0.9

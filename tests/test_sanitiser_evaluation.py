"""The claim of docs/attack.md, "Sanitisers built on SVT²": Online PMW from the prior at eps = 10
reaches the issue's corner against the strongest attacker. The evaluation is re-run on the default
simulation with the documented seed and setting; its figures must stay in the corner (AUC <= 0.6,
random-query utility >= 0.97, discovery utility >= 0.75) and near the documented values."""

from __future__ import annotations

import pytest

from mbeacon.attack.evaluate import EvaluationConfig, run_grid

#: The documented best setting (docs/attack.md) and its figures at 1,000 queries per victim.
BEST = {
    "seed": 1,
    "queries": [1000],
    "grid": {
        "defences": ["online-pmw"],
        "epsilon": [10.0],
        "c": [50],
        "threshold": [1, 10],
        "margin": [60.0],
        "release_share": [0.3333],
    },
}
#: At T = 1 the strongest is the boundary attacker (mbeacon/attack/boundary.py), and the AUC sits at the
#: corner's edge: the assertion below is the claim, checked on this seed.
DOCUMENTED = {1: (0.599, 0.976, 0.948), 10: (0.539, 0.989, 0.902)}
#: Seeded, so the figures are reproduced exactly on one platform; the tolerance absorbs numerical
#: differences across platforms without letting the claim slip out of the corner unnoticed.
TOLERANCE = 0.02


@pytest.mark.slow
def test_online_pmw_reaches_the_corner_against_the_strongest_attacker() -> None:
    rows = run_grid(EvaluationConfig(**BEST), workers=1)
    assert {r["threshold"] for r in rows} == set(DOCUMENTED)
    for row in rows:
        attackers = ("rarest", "tracker", "flag", "count", "boundary")
        assert row["epsilon"] <= 10.0 and row["attacker"] in attackers
        assert row["auc"] == max(row[f"auc_{name}"] for name in attackers)
        assert row["auc"] <= 0.6 and row["utility_random"] >= 0.97 and row["utility_discovery"] >= 0.75, row
        auc, random, discovery = DOCUMENTED[row["threshold"]]
        assert row["auc"] == pytest.approx(auc, abs=TOLERANCE)
        assert row["utility_random"] == pytest.approx(random, abs=TOLERANCE)
        assert row["utility_discovery"] == pytest.approx(discovery, abs=TOLERANCE)

"""The claim of docs/attack.md, "Sanitisers built on SVT²": Online PMW from the prior at a per-account
eps = 10 reaches the corner (AUC <= 0.6, random-query utility >= 0.97, discovery utility >= 0.75)
against the strongest attacker at T = 10, and the boundary attacker takes it out of the corner at
T = 1. The evaluation is re-run on the default simulation with the documented seed and setting; its
figures must stay near the documented values, on the documented side of the corner."""

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
#: The strongest is the boundary attacker (mbeacon/attack/boundary.py) at both thresholds.
DOCUMENTED = {1: (0.665, 0.976, 0.948), 10: (0.579, 0.989, 0.902)}
#: Which thresholds keep the corner's AUC.
IN_CORNER = {1: False, 10: True}
#: Seeded, so the figures are reproduced exactly on one platform; the tolerance absorbs numerical
#: differences across platforms without letting the claim slip out of the corner unnoticed.
TOLERANCE = 0.02


@pytest.mark.slow
def test_online_pmw_reaches_the_corner_at_t10_and_the_boundary_attacker_leaves_it_at_t1() -> None:
    rows = run_grid(EvaluationConfig(**BEST), workers=1)
    assert {r["threshold"] for r in rows} == set(DOCUMENTED)
    for row in rows:
        attackers = ("rarest", "tracker", "flag", "count", "boundary")
        assert row["epsilon"] <= 10.0 and row["attacker"] in attackers
        assert row["auc"] == max(row[f"auc_{name}"] for name in attackers)
        assert row["utility_random"] >= 0.97 and row["utility_discovery"] >= 0.75, row
        assert (row["auc"] <= 0.6) == IN_CORNER[row["threshold"]], row
        auc, random, discovery = DOCUMENTED[row["threshold"]]
        assert row["auc"] == pytest.approx(auc, abs=TOLERANCE)
        assert row["utility_random"] == pytest.approx(random, abs=TOLERANCE)
        assert row["utility_discovery"] == pytest.approx(discovery, abs=TOLERANCE)

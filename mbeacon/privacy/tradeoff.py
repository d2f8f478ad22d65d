"""The best membership attack an epsilon-DP mechanism allows, from its trade-off function.

An epsilon-DP mechanism is ``f_eps``-DP (Dong, Roth and Su, "Gaussian differential privacy", 2022,
Proposition 2.5): any test of "patient in" against "patient out" on its whole output, whatever
the tester knows and however many accounts it used to ask, has a true-positive rate of at most

    TPR(FPR) = min(e^eps FPR, 1 - e^-eps (1 - FPR))

at each false-positive rate, and so an ROC area of at most ``e^eps / (1 + e^eps)``. These are
bounds on every attack, not measurements of ours: what an operator can promise an ethics board.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mbeacon.privacy.validation import non_negative

__all__ = ["AttackBound", "best_attack", "max_auc", "max_tpr"]


def max_tpr(epsilon: float, fpr: float) -> float:
    """The highest true-positive rate any test reaches at false-positive rate ``fpr``."""
    epsilon = non_negative(epsilon, "epsilon")
    if not 0.0 <= fpr <= 1.0:
        raise ValueError(f"fpr must be in [0, 1], got {fpr}")
    if math.isinf(epsilon):
        return 1.0 if fpr > 0 else 0.0
    # e^eps overflows a float past eps ~ 709 (a coalition of many per-account budgets reaches it);
    # by then e^eps * fpr is above 1 for every fpr > 0 anyway
    grown = math.exp(epsilon) * fpr if epsilon < 700 else (math.inf if fpr > 0 else 0.0)
    return min(1.0, grown, 1.0 - math.exp(-epsilon) * (1.0 - fpr))


def max_auc(epsilon: float) -> float:
    """The largest ROC area of any test: ``e^eps / (1 + e^eps)`` (0.5 at epsilon 0)."""
    epsilon = non_negative(epsilon, "epsilon")
    return 1.0 / (1.0 + math.exp(-epsilon))


@dataclass(frozen=True)
class AttackBound:
    """The best attack of any coalition on a mechanism whose whole output is ``epsilon``-DP."""

    epsilon: float
    auc: float
    tpr_at_fpr_0_1pct: float
    tpr_at_fpr_1pct: float

    def to_json(self) -> dict:
        return {
            "epsilon": self.epsilon,
            "maxAuc": self.auc,
            "maxTprAt01PctFpr": self.tpr_at_fpr_0_1pct,
            "maxTprAt1PctFpr": self.tpr_at_fpr_1pct,
        }


def best_attack(epsilon: float) -> AttackBound:
    """:class:`AttackBound` of ``epsilon``."""
    return AttackBound(epsilon, max_auc(epsilon), max_tpr(epsilon, 0.001), max_tpr(epsilon, 0.01))

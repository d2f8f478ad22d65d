"""The membership-inference attack and its metrics (issue 5, in progress: the library core)."""

from mbeacon.attack.lrt import (
    QueryPlan,
    exact_answers,
    lrt_scores,
    miss_probability,
    plan_queries,
    yes_probabilities,
)
from mbeacon.attack.metrics import auc, roc_curve, tpr_at_fpr

__all__ = [
    "QueryPlan",
    "auc",
    "exact_answers",
    "lrt_scores",
    "miss_probability",
    "plan_queries",
    "roc_curve",
    "tpr_at_fpr",
    "yes_probabilities",
]

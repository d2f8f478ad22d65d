"""The membership-inference attack, the defences it is measured against, and its metrics."""

from mbeacon.attack.defences import DEFENCES, Defence
from mbeacon.attack.lrt import (
    cohort_counts,
    exact_answers,
    lrt_scores,
    miss_probability,
    observation_probabilities,
    yes_probabilities,
)
from mbeacon.attack.metrics import auc, roc_curve, tpr_at_fpr
from mbeacon.attack.planning import STRATEGIES, QueryPlan, plan_queries, pooled_probability

__all__ = [
    "DEFENCES",
    "STRATEGIES",
    "Defence",
    "QueryPlan",
    "auc",
    "cohort_counts",
    "exact_answers",
    "lrt_scores",
    "miss_probability",
    "observation_probabilities",
    "plan_queries",
    "pooled_probability",
    "roc_curve",
    "tpr_at_fpr",
    "yes_probabilities",
]

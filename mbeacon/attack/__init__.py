"""The membership-inference attack, the defences it is measured against, and its metrics.

Names load on first use (PEP 562), so that importing one module of the package does not pay for the
others' imports (scipy's among them).
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "DEFENCES": "defences",
    "Defence": "defences",
    "cohort_counts": "lrt",
    "exact_answers": "lrt",
    "lrt_scores": "lrt",
    "miss_probability": "lrt",
    "observation_probabilities": "lrt",
    "yes_probabilities": "lrt",
    "auc": "metrics",
    "roc_curve": "metrics",
    "tpr_at_fpr": "metrics",
    "STRATEGIES": "planning",
    "QueryPlan": "planning",
    "plan_queries": "planning",
    "pooled_probability": "planning",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)

"""Statistical differential-privacy audit of the mechanisms (StatDP's method, Ding et al. 2018).

``mbeacon audit`` runs it; ``docs/audit.md`` explains the method and records the verdicts.
"""

from mbeacon.privacy.audit.registry import AuditTarget, all_targets, naive_svt2_targets, targets
from mbeacon.privacy.audit.runner import DEFAULT_RUNS, DEFAULT_SEED, AuditResult, audit_target, run_audit

__all__ = [
    "DEFAULT_RUNS",
    "DEFAULT_SEED",
    "AuditResult",
    "AuditTarget",
    "all_targets",
    "audit_target",
    "naive_svt2_targets",
    "run_audit",
    "targets",
]

"""``cohort-pmw``: Online PMW whose synthetic state belongs to the cohort, not to an account.

One noisy threshold, one count of positives and one list of histogram updates serve every budget
holder of the cohort: a paid update improves everyone's later answers, and the cohort's privacy
cost is Online PMW's ``eps1 + eps2 + eps3 = epsilon`` however many accounts, groups, dataset ids or
servers ask (the whole interleaved stream is one run of the mechanism, its queries chosen
adaptively by any coalition of askers: docs/privacy.md, "The cohort's accountant"). Each holder's own
account keeps only a **quota**: the most of the cohort's ``c`` positives its queries may spend, so no
one identity can exhaust the cohort. A query whose holder has no quota left, or asked after the
cohort's ``c`` positives are spent, is answered from the learnt synthetic state with no test: public
information, free. The service's ledger keeps the cohort's state as the account of the reserved
holder :data:`COHORT_HOLDER` on the cohort (:mod:`mbeacon.beacon.engine`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from mbeacon.beacon.sanitisers.online_pmw import OnlinePMW, OnlinePMWPolicy
from mbeacon.beacon.sanitisers.params import AccountParams
from mbeacon.beacon.sanitisers.policy import PolicyBase
from mbeacon.privacy.svt2 import SVT2State

#: The ledger's holder of a cohort's shared state (:mod:`mbeacon.beacon.holders`): no caller's budget
#: is ever held by it (a caller's is ``user:NAME``, ``group:NAME``, ``global`` or ``anonymous``).
COHORT_HOLDER = "cohort"


def default_quota(c: int) -> int:
    """A tenth of the cohort's positives, at least one: ten identities must agree to exhaust it."""
    return max(1, math.ceil(c / 10))


class CohortPMWPolicy(OnlinePMWPolicy):
    mechanism: Literal["cohort-pmw"] = "cohort-pmw"  # type: ignore[assignment]
    #: The cohort's answers keep coming from the learnt synthetic state once its budget is spent.
    on_exhausted: Literal["refuse", "prior"] = "prior"
    #: The most of the cohort's ``c`` positives one budget holder may spend (default: a tenth).
    quota: int | None = Field(None, ge=1, le=100_000)

    @model_validator(mode="after")
    def _quota_within_c(self) -> CohortPMWPolicy:
        if self.quota is not None and self.quota > self.c:
            raise ValueError(f"quota ({self.quota}) is a share of the cohort's c ({self.c}): at most c")
        return self

    @property
    def effective_quota(self) -> int:
        return default_quota(self.c) if self.quota is None else self.quota


class CohortPMW(OnlinePMW):
    """Online PMW with the cohort's state (see the module docstring)."""

    name = "cohort-pmw"
    policy_model: ClassVar[type[PolicyBase]] = CohortPMWPolicy
    shared = True

    def account_params(self, policy: PolicyBase, *, sensitivity: float = 1.0) -> AccountParams:
        """Online PMW's split of the cohort's epsilon, and the holders' quota."""
        params = super().account_params(policy, sensitivity=sensitivity)
        quota = policy.effective_quota if isinstance(policy, CohortPMWPolicy) else default_quota(policy.c)
        return replace(params, mechanism=self.name, quota=quota)

    def start_state(self, params: AccountParams) -> SVT2State:
        """The cohort's state: Online PMW's one threshold. (A holder's quota account keeps only a
        count, drawn nothing: :meth:`quota_state`.)"""
        return super().start_state(params)

    @staticmethod
    def quota_state() -> SVT2State:
        return SVT2State(0.0, 0.0, 0)

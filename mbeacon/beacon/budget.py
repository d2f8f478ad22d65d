"""Budget accounts: the public parameters frozen for one budget holder and dataset, and what has been
spent.

The parameters (:class:`~mbeacon.beacon.sanitisers.params.AccountParams`) are made by the dataset's
sanitiser from its policy (or an operator override) when the account is opened and never change
afterwards: the promise made to a budget holder is the epsilon of the parameters their noisy
thresholds were drawn for. A new policy applies to accounts opened after it (new users, or after an
explicit, audited ``budget reset``); see docs/service.md. What an account has spent is its
sanitiser's cost of its parameters and positives (:meth:`~mbeacon.beacon.sanitisers.base.Sanitiser.spent`,
proved in docs/privacy.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from mbeacon.beacon.sanitisers import AccountParams, sanitiser_of
from mbeacon.beacon.sanitisers.cohort_pmw import COHORT_HOLDER
from mbeacon.privacy.svt2 import SVT2State

__all__ = ["Account", "AccountParams", "cohort_budget", "unopened_budget"]


@dataclass(frozen=True)
class Account:
    """One budget holder's account on one dataset, as locked in the current transaction."""

    principal: str
    dataset: str
    params: AccountParams
    state: SVT2State
    created: str

    @property
    def limit(self) -> int:
        """The positives this account may spend: ``c``, or a holder's quota of a shared cohort state
        (the cohort's own account, :data:`COHORT_HOLDER`, has the cohort's ``c``)."""
        if self.params.quota and self.principal != COHORT_HOLDER:
            return self.params.quota
        return self.params.c

    @property
    def exhausted(self) -> bool:
        return self.params.sanitised and self.state.count >= self.limit

    def epsilon_spent(self) -> float:
        return sanitiser_of(self.params.mechanism).spent(self.params, self.state.count)

    def budget(self) -> dict:
        """What the holder is told: the Beacon response's budget fields."""
        if not self.params.sanitised:
            return unopened_budget(self.params)
        return {
            "positivesUsed": self.state.count,
            "positivesTotal": self.limit,
            "epsilonSpent": round(self.epsilon_spent(), 12),
            "epsilonTotal": self.params.epsilon,
        }


def unopened_budget(params: AccountParams) -> dict:
    """Budget fields of an account that has not answered anything yet."""
    return {
        "positivesUsed": 0,
        "positivesTotal": params.quota or params.c,
        "epsilonSpent": 0.0,
        "epsilonTotal": params.epsilon,
    }


def cohort_budget(cohort: Account | None, params: AccountParams) -> dict:
    """The shared state's budget: the cohort's positives and epsilon, spent and in all (nothing spent
    while the state is not opened: no threshold has been drawn)."""
    return {
        "positivesUsed": cohort.state.count if cohort is not None else 0,
        "positivesTotal": params.c,
        "epsilonSpent": round(cohort.epsilon_spent(), 12) if cohort is not None else 0.0,
        "epsilonTotal": params.epsilon,
    }

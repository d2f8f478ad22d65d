"""What a caller of the answer engine deals in: who asks, what comes back, and why a request is refused.

These are plain values with no store, prior or ledger behind them, kept apart from
:mod:`mbeacon.beacon.engine` so that the API layer (authentication, responses, error mapping) and the
release step (:mod:`mbeacon.beacon.release`) can name them without depending on the engine itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mbeacon.beacon.config import TIERS, DatasetPolicy
from mbeacon.beacon.holders import budget_holder
from mbeacon.beacon.query import QueryError


@dataclass(frozen=True)
class Principal:
    """Who is asking: a user, or the shared anonymous caller."""

    name: str
    tier: str
    group: str | None = None
    anonymous: bool = False
    #: The ControlledAccessGrants visa values of a signed-in researcher's passport (verified).
    grants: frozenset[str] = frozenset()

    def budget_holder(self, scope: str) -> str:
        """The holder whose budget this caller's query spends on a dataset of ``scope``."""
        return budget_holder(scope, self.name, self.group, self.anonymous)

    def may_see(self, policy: DatasetPolicy) -> bool:
        """A dataset that names its grants is open to its grantees only (a visa for its grant, or a
        user it names); any other to the callers whose tier reaches its tier."""
        if policy.grant is not None or policy.granted_users:
            if self.anonymous:
                return False
            return policy.grant in self.grants or self.name in policy.granted_users
        return TIERS.index(self.tier) >= TIERS.index(policy.tier)


class DatasetUnavailable(QueryError):
    """The dataset does not exist or the caller may not see it (one message for both: no leak)."""


class UnknownProbe(QueryError):
    """A query names a probe (by id or by position) that none of the datasets it targets has."""


class BudgetExhausted(RuntimeError):
    """Every positive of the account is spent and the policy refuses further answers."""

    def __init__(self, dataset: str, budget: dict) -> None:
        super().__init__(f"privacy budget for dataset {dataset!r} is exhausted")
        self.dataset = dataset
        self.budget = budget


@dataclass
class Answer:
    """One (query, dataset) answer as released."""

    query_index: int
    dataset: str
    probe: str | None
    exists: bool
    answered_from: str  # "prior", "data" or "refused"
    count: int | None = None
    cached: bool = False
    exhausted: bool = False


@dataclass
class AnswerSet:
    """One request's answers, sorted by (query, dataset), with what the caller is told beside them: each
    dataset's budget after the request, the granularity returned, the positives spent, the refusals."""

    answers: list[Answer]
    budgets: dict[str, dict]
    granularity: str
    positives_spent: dict[str, int] = field(default_factory=dict)
    refused: int = 0
    #: The probe queries the request was answered (and charged) as: a gene or region counts each of
    #: its probes (None: the queries as sent).
    queries: int | None = None

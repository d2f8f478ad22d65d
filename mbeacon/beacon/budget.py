"""Budget accounts: the public SVT² parameters frozen for one budget holder and dataset, and what
has been spent.

The parameters are copied from the dataset's policy (or an operator override) when the account is
opened and never change afterwards: the promise made to a budget holder is the epsilon of the
parameters their noisy thresholds were drawn for. A new policy applies to accounts opened after it
(new users, or after an explicit, audited ``budget reset``); see docs/service.md.

What an account has spent is :func:`mbeacon.privacy.accounting.svt2_spent` of its parameters and
positives (the rule, with noisy counts, is stated there and proved in docs/privacy.md).
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass

from mbeacon.beacon.config import DatasetPolicy
from mbeacon.privacy.accounting import svt2_spent
from mbeacon.privacy.svt2 import SVT2Params, SVT2State, svt2_allocate


@dataclass(frozen=True)
class AccountParams:
    """Public: safe to publish and to show the budget holder."""

    mechanism: str
    epsilon: float
    epsilon1: float
    epsilon2: float
    count_epsilon: float
    c: int
    threshold: int
    variant: str

    @classmethod
    def from_policy(cls, policy: DatasetPolicy) -> AccountParams:
        svt_epsilon = policy.epsilon - policy.count_epsilon
        eps1, eps2 = svt2_allocate(svt_epsilon, policy.c, redraw=policy.variant == "redraw")
        return cls(
            mechanism=policy.mechanism,
            epsilon=policy.epsilon,
            epsilon1=eps1,
            epsilon2=eps2,
            count_epsilon=policy.count_epsilon,
            c=policy.c,
            threshold=policy.threshold,
            variant=policy.variant,
        )

    def svt2(self) -> SVT2Params:
        return SVT2Params(
            float(self.threshold), self.epsilon1, self.epsilon2, self.c, redraw=self.variant == "redraw"
        )

    def to_storage(self) -> str:
        """The parameters as the ledger stores them (JSON text, keys sorted, so equal parameters
        are equal texts)."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_storage(cls, text: str) -> AccountParams:
        """Parsed once per distinct text: every request reads its account's parameters back, and
        accounts share a handful of policies (the instances are frozen, so sharing them is safe)."""
        return _params_from_storage(text)

    def to_json(self) -> dict:
        """The parameters in the API's spelling (camelCase, as everywhere in the Beacon API)."""
        return {
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "epsilon1": self.epsilon1,
            "epsilon2": self.epsilon2,
            "countEpsilon": self.count_epsilon,
            "c": self.c,
            "threshold": self.threshold,
            "variant": self.variant,
        }


@dataclass(frozen=True)
class Account:
    """One budget holder's account on one dataset, as locked in the current transaction."""

    principal: str
    dataset: str
    params: AccountParams
    state: SVT2State
    created: str

    @property
    def exhausted(self) -> bool:
        return self.params.mechanism == "svt2" and self.state.count >= self.params.c

    def epsilon_spent(self) -> float:
        p = self.params
        if p.mechanism != "svt2":
            return 0.0
        return svt2_spent(
            p.epsilon1,
            p.epsilon2,
            p.c,
            self.state.count,
            redraw=p.variant == "redraw",
            count_epsilon=p.count_epsilon,
        )

    def budget(self) -> dict:
        """What the holder is told: the Beacon response's budget fields."""
        if self.params.mechanism != "svt2":
            return unopened_budget(self.params)
        return {
            "positivesUsed": self.state.count,
            "positivesTotal": self.params.c,
            "epsilonSpent": round(self.epsilon_spent(), 12),
            "epsilonTotal": self.params.epsilon,
        }


@functools.lru_cache(maxsize=256)
def _params_from_storage(text: str) -> AccountParams:
    return AccountParams(**json.loads(text))


def unopened_budget(params: AccountParams) -> dict:
    """Budget fields of an account that has not answered anything yet."""
    return {
        "positivesUsed": 0,
        "positivesTotal": params.c,
        "epsilonSpent": 0.0,
        "epsilonTotal": params.epsilon,
    }

"""The public parameters of one budget account, as the ledger stores them and the API shows them.

Frozen when the account is opened (from the dataset's policy, by the account's sanitiser:
:meth:`mbeacon.beacon.sanitisers.base.Sanitiser.account_params`) and never changed afterwards: the
promise made to a budget holder is the epsilon of the parameters their noisy thresholds were drawn
for. One flat record for every mechanism, so accounts are opened, locked, cached and audited
identically and the stored text of an account never depends on code that came later.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass
from typing import Any

#: Parameters of the newer sanitisers: left out of the stored text when 0, so the text of an account
#: that does not use them is what it always was.
_SANITISER_FIELDS = ("margin_above", "margin_below", "epsilon3", "margin", "quota")


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
    sensitivity: float = 1.0  # the dataset's contribution bound when the account opened
    margin_above: float = 0.0  # svt2-margin, svt2-noisy
    margin_below: float = 0.0
    epsilon3: float = 0.0  # svt2-noisy, online-pmw: the noisy counts that answer TOPs
    margin: float = 0.0  # online-pmw: patients of disagreement with the synthetic answer a TOP needs
    #: cohort-pmw: the most of the cohort's ``c`` positives one budget holder's queries may spend (0: none)
    quota: int = 0

    @classmethod
    def from_split(
        cls, mechanism: str, policy: Any, eps1: float, eps2: float, epsilon3: float, sensitivity: float
    ) -> AccountParams:
        """A sanitiser's parameters under ``policy`` once it has split the epsilon: the policy's
        common keys, and those of its mechanism's keys it has (margins)."""
        return cls(
            mechanism=mechanism,
            epsilon=policy.epsilon,
            epsilon1=eps1,
            epsilon2=eps2,
            count_epsilon=policy.count_epsilon,
            c=policy.c,
            threshold=policy.threshold,
            variant=policy.variant,
            sensitivity=float(sensitivity),
            margin_above=getattr(policy, "margin_above", 0.0),
            margin_below=getattr(policy, "margin_below", 0.0),
            epsilon3=epsilon3,
            margin=getattr(policy, "margin", 0.0),
        )

    @property
    def sanitised(self) -> bool:
        """Answers go through the account's state and spend budget (every mechanism but ``none``)."""
        from mbeacon.beacon.sanitisers.registry import sanitiser_of  # the registry builds these

        return sanitiser_of(self.mechanism).spends_budget

    def to_storage(self) -> str:
        """The parameters as the ledger stores them (JSON text, keys sorted, so equal parameters
        are equal texts)."""
        fields = asdict(self)
        for name in _SANITISER_FIELDS:
            if not fields[name]:
                del fields[name]
        return json.dumps(fields, sort_keys=True)

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
            "sensitivity": self.sensitivity,
            "marginAbove": self.margin_above,
            "marginBelow": self.margin_below,
            "epsilon3": self.epsilon3,
            "margin": self.margin,
            "quota": self.quota,
        }


@functools.lru_cache(maxsize=256)
def _params_from_storage(text: str) -> AccountParams:
    return AccountParams(**json.loads(text))

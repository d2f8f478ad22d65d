"""Budget accounts: the public SVT² parameters frozen for one budget holder and dataset, and what
has been spent.

The parameters are copied from the dataset's policy (or an operator override) when the account is
opened and never change afterwards: the promise made to a budget holder is the epsilon of the
parameters their noisy thresholds were drawn for. A new policy applies to accounts opened after it
(new users, or after an explicit, audited ``budget reset``); see docs/service.md.

What an account has spent is :func:`mbeacon.privacy.accounting.svt2_spent` of its parameters and
positives (the rule, with noisy counts, is stated there and proved in docs/privacy.md); for
``online-pmw``, :func:`mbeacon.privacy.accounting.online_pmw_spent` (at most ``eps1 + eps2 + eps3 =
epsilon`` however many queries). An ``online-pmw`` account keeps its one secret noisy threshold in
``SVT2State.z1`` (``z2`` is 0) and its positives in ``count``, so it is opened, locked and saved as
SVT²'s accounts are; its histogram updates live beside it (:mod:`mbeacon.beacon.pmw_state`).
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass

from mbeacon.beacon.config import DatasetPolicy
from mbeacon.beacon.mechanisms import SANITISED
from mbeacon.privacy.accounting import online_pmw_spent, svt2_spent
from mbeacon.privacy.online_pmw import OnlinePMWParams, OnlinePMWState
from mbeacon.privacy.svt2 import SVT2Params, SVT2State, svt2_allocate
from mbeacon.privacy.svt2_margin import SVT2MarginParams
from mbeacon.privacy.svt2_noisy import SVT2NoisyParams

#: Parameters of the newer sanitisers: left out of the stored text when 0, so the text of an account
#: that does not use them is what it always was.
_SANITISER_FIELDS = ("margin_above", "margin_below", "epsilon3", "margin")


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

    @property
    def sanitised(self) -> bool:
        """Answers go through SVT²'s state and spend budget (every mechanism but ``none``)."""
        return self.mechanism in SANITISED

    @classmethod
    def from_policy(cls, policy: DatasetPolicy, *, sensitivity: float = 1.0) -> AccountParams:
        epsilon3 = policy.epsilon * policy.effective_release_share
        svt_epsilon = policy.epsilon - policy.count_epsilon - epsilon3
        if policy.mechanism == "online-pmw":  # Lyu-Su-Li's split of the test's share (online_pmw.py)
            eps1 = svt_epsilon / (1 + (2 * policy.c) ** (2 / 3))
            eps2 = svt_epsilon - eps1
        else:
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
            sensitivity=float(sensitivity),
            margin_above=policy.margin_above,
            margin_below=policy.margin_below,
            epsilon3=epsilon3,
            margin=policy.margin,
        )

    def svt2(self) -> SVT2Params:
        """The mechanism's parameters (:class:`SVT2MarginParams`/:class:`SVT2NoisyParams` for the
        margin and noisy-release mechanisms; see :mod:`mbeacon.beacon.mechanisms`).
        ``online-pmw`` has its own (:meth:`online_pmw`)."""
        if self.mechanism == "online-pmw":
            raise ValueError("an online-pmw account's parameters are online_pmw(n), not svt2()")
        args = (float(self.threshold), self.epsilon1, self.epsilon2, self.c, self.sensitivity,
                self.variant == "redraw")  # fmt: skip
        if self.mechanism == "svt2-noisy":
            return SVT2NoisyParams(*args, self.margin_above, self.margin_below, self.epsilon3)
        if self.mechanism == "svt2-margin":
            return SVT2MarginParams(*args, self.margin_above, self.margin_below)
        return SVT2Params(*args)

    def online_pmw(self, n: int) -> OnlinePMWParams:
        """``online-pmw``'s parameters for a cohort of ``n`` patients (the public N of the prior)."""
        return OnlinePMWParams(float(self.threshold), self.epsilon1, self.epsilon2, self.epsilon3, self.c,
                               int(n), self.margin)  # fmt: skip

    def start_state(self) -> SVT2State:
        """A new account's state: fresh secret noisy thresholds (``online-pmw``: its one threshold
        ``rho ~ Lap(1/eps1)`` in ``z1``); zeros for an unprotected account."""
        if not self.sanitised:
            return SVT2State(0.0, 0.0, 0)
        if self.mechanism == "online-pmw":  # n does not enter the threshold's noise
            return SVT2State(OnlinePMWState.start(self.online_pmw(1)).z, 0.0, 0)
        return SVT2State.start(self.svt2())

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
        return self.params.sanitised and self.state.count >= self.params.c

    def epsilon_spent(self) -> float:
        p = self.params
        if not p.sanitised:
            return 0.0
        if p.mechanism == "online-pmw":
            return online_pmw_spent(p.epsilon1, p.epsilon2, p.epsilon3, p.c, self.state.count)
        return svt2_spent(
            p.epsilon1,
            p.epsilon2,
            p.c,
            self.state.count,
            redraw=p.variant == "redraw",
            count_epsilon=p.count_epsilon + p.epsilon3,  # both paid per positive (svt2_spent)
        )

    def budget(self) -> dict:
        """What the holder is told: the Beacon response's budget fields."""
        if not self.params.sanitised:
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

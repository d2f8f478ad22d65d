"""``none``: the raw data's answer, no protection (evaluations only, behind ``allow_unprotected``)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import model_validator

from mbeacon.beacon.sanitisers.base import Fresh, PMWSource, Run
from mbeacon.beacon.sanitisers.params import AccountParams
from mbeacon.beacon.sanitisers.policy import PolicyBase
from mbeacon.beacon.sanitisers.svt2 import SVT2
from mbeacon.privacy.svt2 import SVT2State


class NonePolicy(PolicyBase):
    mechanism: Literal["none"] = "none"

    @model_validator(mode="after")
    def _opted_in(self) -> NonePolicy:
        if not self.allow_unprotected:
            raise ValueError(
                "mechanism 'none' answers from the raw data with no protection; it needs "
                "allow_unprotected = true (for evaluations only)"
            )
        return self


class Unprotected(SVT2):
    """Every query answered from the data (flag BOT, state kept); spends nothing. Its account
    parameters are SVT²'s split of the policy's epsilon, as stored for every account."""

    name = "none"
    policy_model: ClassVar[type[PolicyBase]] = NonePolicy
    spends_budget = False

    def start_state(self, params: AccountParams) -> SVT2State:
        return SVT2State(0.0, 0.0, 0)

    def decide(
        self,
        params: AccountParams,
        state: SVT2State,
        fresh: Fresh,
        source: PMWSource | None,
        limit: int | None = None,
    ) -> Run:
        n = len(fresh.alpha)
        return Run([0] * n, [None] * n, [None] * n, state)

    def spent(self, params: AccountParams, positives: int) -> float:
        return 0.0

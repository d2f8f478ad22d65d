"""``svt2-margin``: SVT² whose two thresholds sit ``margin_above`` above and ``margin_below`` below
``T`` (:mod:`mbeacon.privacy.svt2_margin`): a TOP needs a clear disagreement with the prior and still
flips the prior's answer. Cost: SVT²'s (the margins are public constants)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from mbeacon.beacon.sanitisers.base import Fresh, PMWSource, Run
from mbeacon.beacon.sanitisers.params import AccountParams
from mbeacon.beacon.sanitisers.policy import PolicyBase
from mbeacon.beacon.sanitisers.svt2 import SVT2
from mbeacon.privacy.svt2 import SVT2State
from mbeacon.privacy.svt2_margin import SVT2MarginParams, svt2_margin_step


class Margins(BaseModel):
    """SVT²'s two margins: how far above / below T the thresholds of its two tests sit (patients)."""

    margin_above: float = Field(0.0, ge=0, le=1_000_000, allow_inf_nan=False)
    margin_below: float = Field(0.0, ge=0, le=1_000_000, allow_inf_nan=False)

    KEY_HINTS: ClassVar[dict[str, str]] = {"margin": "use margin_above and margin_below"}


class SVT2MarginPolicy(PolicyBase, Margins):
    mechanism: Literal["svt2-margin"] = "svt2-margin"


class SVT2Margin(SVT2):
    name = "svt2-margin"
    policy_model: ClassVar[type[PolicyBase]] = SVT2MarginPolicy

    def mechanism_params(self, params: AccountParams, n: int | None = None) -> SVT2MarginParams:
        return SVT2MarginParams(float(params.threshold), params.epsilon1, params.epsilon2, params.c,
                                params.sensitivity, params.variant == "redraw", params.margin_above,
                                params.margin_below)  # fmt: skip

    def decide(
        self,
        params: AccountParams,
        state: SVT2State,
        fresh: Fresh,
        source: PMWSource | None,
        limit: int | None = None,
    ) -> Run:
        p = self.mechanism_params(params)
        flags: list[int] = []
        for a, b in zip(fresh.alpha, fresh.beta, strict=True):
            flag, state = svt2_margin_step(state, a, b, p)
            flags.append(flag)
        none: list = [None] * len(flags)
        return Run(flags, none, list(none), state)

"""``svt2-noisy``: SVT²'s test with margins, and a TOP answered by a fresh noisy count
``v = alpha + Lap(c b / epsilon3)`` compared with ``T`` (:func:`mbeacon.privacy.svt2_noisy.svt2_noisy_step`,
the audited step). ``v`` (rounded, at least 0) is the count a CONTROLLED caller gets with count
granularity. Cost: SVT²'s plus ``epsilon3`` (``release_share`` of epsilon) for the released counts.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from mbeacon.beacon.sanitisers.base import Fresh, PMWSource, Run
from mbeacon.beacon.sanitisers.params import AccountParams
from mbeacon.beacon.sanitisers.policy import PolicyBase, ReleasingPolicy
from mbeacon.beacon.sanitisers.svt2 import SVT2
from mbeacon.beacon.sanitisers.svt2_margin import Margins
from mbeacon.privacy.sparse_vector import TOP
from mbeacon.privacy.svt2 import SVT2State
from mbeacon.privacy.svt2_noisy import SVT2NoisyParams, svt2_noisy_step


class SVT2NoisyPolicy(ReleasingPolicy, Margins):
    mechanism: Literal["svt2-noisy"] = "svt2-noisy"


class SVT2Noisy(SVT2):
    name = "svt2-noisy"
    policy_model: ClassVar[type[PolicyBase]] = SVT2NoisyPolicy
    releases_counts = True

    def mechanism_params(self, params: AccountParams, n: int | None = None) -> SVT2NoisyParams:
        return SVT2NoisyParams(float(params.threshold), params.epsilon1, params.epsilon2, params.c,
                               params.sensitivity, params.variant == "redraw", params.margin_above,
                               params.margin_below, params.epsilon3)  # fmt: skip

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
        answers: list[bool | None] = []
        counts: list[int | None] = []
        for a, b in zip(fresh.alpha, fresh.beta, strict=True):
            flag, answer, v, state = svt2_noisy_step(state, a, b, p)
            flags.append(flag)
            top = flag == TOP and v is not None
            answers.append(bool(answer) if top else None)
            counts.append(max(round(v), 0) if top and v is not None else None)  # post-processing of v
        return Run(flags, answers, counts, state)

"""``svt2``: SVT², the double-threshold sparse vector technique (:mod:`mbeacon.privacy.svt2`).

A TOP flips the public prior's answer. Cost per account: SVT²'s ``2 (eps1 + eps2)`` (``2 (c eps1 +
eps2)`` with ``redraw``) plus ``count_epsilon`` per positive for noisy counts
(:func:`mbeacon.privacy.accounting.svt2_spent`, proved in docs/privacy.md). The SVT² family
(``svt2-margin``, ``svt2-noisy``) and ``none`` share this module's account parameters.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np

from mbeacon.beacon.sanitisers.base import Fresh, PMWSource, Run, Sanitiser
from mbeacon.beacon.sanitisers.params import AccountParams
from mbeacon.beacon.sanitisers.policy import PolicyBase
from mbeacon.privacy.accounting import svt2_spent
from mbeacon.privacy.svt2 import SVT2Params, SVT2State, svt2_allocate, svt2_resume, svt2_step


class SVT2Policy(PolicyBase):
    mechanism: Literal["svt2"] = "svt2"


class SVT2(Sanitiser):
    """SVT² over the account's two saved noisy thresholds."""

    name = "svt2"
    policy_model: ClassVar[type[PolicyBase]] = SVT2Policy

    def account_params(self, policy: PolicyBase, *, sensitivity: float = 1.0) -> AccountParams:
        """What is left after ``count_epsilon`` and the released counts' ``epsilon3``, split by
        :func:`~mbeacon.privacy.svt2.svt2_allocate` (Lyu, Su and Li's ratio for SVT²)."""
        epsilon3 = policy.epsilon * policy.effective_release_share
        svt_epsilon = policy.epsilon - policy.count_epsilon - epsilon3
        eps1, eps2 = svt2_allocate(svt_epsilon, policy.c, redraw=policy.variant == "redraw")
        return AccountParams.from_split(self.name, policy, eps1, eps2, epsilon3, sensitivity)

    def mechanism_params(self, params: AccountParams, n: int | None = None) -> SVT2Params:
        """The privacy core's parameters of an account (``n`` does not enter SVT²'s)."""
        return SVT2Params(float(params.threshold), params.epsilon1, params.epsilon2, params.c,
                          params.sensitivity, params.variant == "redraw")  # fmt: skip

    def start_state(self, params: AccountParams) -> SVT2State:
        return SVT2State.start(self.mechanism_params(params))

    def decide(
        self,
        params: AccountParams,
        state: SVT2State,
        fresh: Fresh,
        source: PMWSource | None,
        limit: int | None = None,
    ) -> Run:
        p = self.mechanism_params(params)
        n = len(fresh.alpha)
        none: list = [None] * n
        if n == 1:  # one query skips the vectorised noise's array set-up (same distribution)
            flag, state = svt2_step(state, fresh.alpha[0], fresh.beta[0], p)
            return Run([flag], none, list(none), state)
        flags, state = svt2_resume(state, np.array(fresh.alpha), np.array(fresh.beta), p)
        return Run(flags.tolist(), none, list(none), state)

    def spent(self, params: AccountParams, positives: int) -> float:
        return svt2_spent(
            params.epsilon1,
            params.epsilon2,
            params.c,
            positives,
            redraw=params.variant == "redraw",
            count_epsilon=params.count_epsilon + params.epsilon3,  # both paid per positive
        )

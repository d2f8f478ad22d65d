"""``online-pmw``: Online Private Multiplicative Weights started at the public prior
(:mod:`mbeacon.privacy.online_pmw`, served without bins by
:mod:`mbeacon.beacon.sanitisers.online_pmw_state`).

The test compares the data with the account's *synthetic* answer (the prior as updated by the
account's earlier released counts at the probe) with one ``margin``; a BOT releases the synthetic
answer and count (free), a TOP a fresh noisy count ``v = alpha + Lap(c / epsilon3)`` and records the
update it makes. Its state is the account's row (its one noisy threshold in ``z1``, ``z2 = 0``) plus
the updates, which the engine reads under the account's lock (:class:`~.base.PMWSource`). Cost:
``eps1 + eps2 + eps3 = epsilon`` however many queries
(:func:`mbeacon.privacy.accounting.online_pmw_spent`), at contribution bound 1 only.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from mbeacon.beacon.sanitisers import online_pmw_state
from mbeacon.beacon.sanitisers.base import Fresh, PMWSource, Run, Sanitiser
from mbeacon.beacon.sanitisers.online_pmw_state import PMWQuery
from mbeacon.beacon.sanitisers.params import AccountParams
from mbeacon.beacon.sanitisers.policy import PolicyBase, ReleasingPolicy, default_hint
from mbeacon.privacy.accounting import online_pmw_spent
from mbeacon.privacy.online_pmw import OnlinePMWParams, OnlinePMWState
from mbeacon.privacy.sparse_vector import generalized_svt_allocate
from mbeacon.privacy.svt2 import SVT2State


class OnlinePMWPolicy(ReleasingPolicy):
    mechanism: Literal["online-pmw"] = "online-pmw"
    #: How clearly (patients) the data must disagree with the synthetic answer for a TOP.
    margin: float = Field(0.0, ge=0, le=1_000_000, allow_inf_nan=False)

    KEY_HINTS: ClassVar[dict[str, str]] = {
        "margin_above": "online-pmw has one margin: set margin",
        "margin_below": "online-pmw has one margin: set margin",
    }

    @model_validator(mode="after")
    def _one_threshold(self) -> OnlinePMWPolicy:
        if self.variant != "single":
            raise ValueError(
                "variant 'redraw' applies to the SVT² mechanisms; online-pmw draws one noisy threshold "
                "for the account's whole stream" + default_hint(self.mechanism)
            )
        return self


class OnlinePMW(Sanitiser):
    name = "online-pmw"
    policy_model: ClassVar[type[PolicyBase]] = OnlinePMWPolicy
    releases_counts = True
    learns = True

    def account_params(self, policy: PolicyBase, *, sensitivity: float = 1.0) -> AccountParams:
        """``epsilon3`` for the released counts, the rest split ``1 : (2c)^(2/3)`` (Lyu, Su and Li)."""
        epsilon3 = policy.epsilon * policy.effective_release_share
        eps1, eps2, _ = generalized_svt_allocate(policy.epsilon - policy.count_epsilon, policy.c,
                                                 epsilon3=epsilon3)  # fmt: skip
        return AccountParams.from_split(self.name, policy, eps1, eps2, epsilon3, sensitivity)

    def check_servable(self, dataset: str, sensitivity: int) -> None:
        """Its audited step adds noise for counts that move by one patient at most."""
        if sensitivity > 1:
            raise ValueError(
                f"dataset {dataset!r}: mechanism {self.name!r} needs one counted sample per patient "
                f"(contribution bound 1), but this dataset is served at contribution bound {sensitivity}; "
                "set contribution_bound = 1 in its table (each patient's first sample counts) or "
                "choose another mechanism"
            )

    def mechanism_params(self, params: AccountParams, n: int | None = None) -> OnlinePMWParams:
        """The privacy core's parameters for a cohort of ``n`` patients (the public N of the prior)."""
        if n is None:
            raise ValueError("online-pmw's parameters need the cohort size n")
        return OnlinePMWParams(float(params.threshold), params.epsilon1, params.epsilon2, params.epsilon3,
                               params.c, int(n), params.margin)  # fmt: skip

    def start_state(self, params: AccountParams) -> SVT2State:
        """Its one threshold ``rho ~ Lap(1/eps1)`` in ``z1`` (``n`` does not enter its noise)."""
        return SVT2State(OnlinePMWState.start(self.mechanism_params(params, n=1)).z, 0.0, 0)

    def decide(
        self,
        params: AccountParams,
        state: SVT2State,
        fresh: Fresh,
        source: PMWSource | None,
        limit: int | None = None,
    ) -> Run:
        if source is None:
            raise ValueError("online-pmw decides from the account's recorded updates (a PMWSource)")
        online = self.mechanism_params(params, n=source.n_patients())
        asked = zip(fresh.probes, fresh.ranges, fresh.alpha, strict=True)
        queries = [PMWQuery(p, lo, hi, int(a)) for p, (lo, hi), a in asked]
        updates = source.load_updates(fresh.probes)
        decided = online_pmw_state.run(
            online, state.z1, state.count, queries, updates, source.mass, limit=limit
        )
        after = SVT2State(state.z1, state.z2, decided.count)
        return Run(decided.flags, list(decided.answers), list(decided.counts), after, decided.updates)

    def spent(self, params: AccountParams, positives: int) -> float:
        return online_pmw_spent(params.epsilon1, params.epsilon2, params.epsilon3, params.c, positives)

"""What a served sanitiser is: one object that knows its policy keys, its parameters, its state, its
decision on a request and its privacy cost.

A sanitiser module defines a subclass of :class:`Sanitiser` and its policy model (a subclass of
:class:`mbeacon.beacon.sanitisers.policy.PolicyBase`); the registry
(:mod:`mbeacon.beacon.sanitisers.registry`) maps the mechanism's name to it. The rest of the service
asks the registry, never compares mechanism names: the ledger stores the account's
:class:`~mbeacon.beacon.sanitisers.params.AccountParams` and its state (:class:`SVT2State`: two secret
numbers and the positives spent, the row every sanitiser keeps), the engine prepares the counts,
and :meth:`Sanitiser.decide` turns them into flags, answers and released counts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from mbeacon.beacon.sanitisers.online_pmw_state import PMWUpdate, PriorMass
from mbeacon.beacon.sanitisers.params import AccountParams
from mbeacon.beacon.sanitisers.policy import PolicyBase
from mbeacon.privacy.svt2 import SVT2State

#: ``online-pmw``: the recorded histogram updates of the given probes, read under the account's lock.
LoadUpdates = Callable[[list[str]], dict[str, list[PMWUpdate]]]


@dataclass(frozen=True)
class Run:
    """What a sanitiser decided for a stream of fresh queries.

    ``flags``: TOP/BOT/UNANSWERED per query; ``answers``: the yes/no a TOP released when the
    mechanism decides it by a noisy comparison (None: the flipped prior, SVT²'s rule);
    ``counts``: the noisy count released with such a TOP (None elsewhere); ``state``: to save;
    ``updates``: what a shared-state sanitiser learnt and records beside the state (one per TOP).
    """

    flags: list[int]
    answers: list[bool | None]
    counts: list[int | None]
    state: SVT2State
    updates: Sequence[PMWUpdate] = ()


@dataclass(frozen=True)
class Fresh:
    """The fresh queries of one request on one dataset, in order: the cohort's counts ``alpha``
    (the only data), the prior's ``beta``, and each query's probe and ``[lo, hi]``."""

    alpha: list[float]
    beta: list[float]
    probes: list[str]
    ranges: list[tuple[float, float]]


@dataclass(frozen=True)
class PMWSource:
    """What a sanitiser that learns from its releases reads beyond its account and the request, each
    read only when a fresh query is decided: the account's recorded updates (under the lock the
    engine holds), the cohort size, and the prior's mass of a range."""

    load_updates: LoadUpdates
    n_patients: Callable[[], int]
    mass: PriorMass


class Sanitiser:
    """One served mechanism. Subclasses set the class attributes and override the methods."""

    #: The policy's ``mechanism``: the name operators write and the ledger stores.
    name: ClassVar[str]
    #: The model of this mechanism's policy table.
    policy_model: ClassVar[type[PolicyBase]]
    #: Whether answers go through the account's state and spend budget (all but ``none``).
    spends_budget: ClassVar[bool] = True
    #: Whether a TOP carries its own noisy count (no ``count_epsilon`` needed for count answers).
    releases_counts: ClassVar[bool] = False
    #: Whether :meth:`decide` reads the account's recorded updates (:class:`PMWSource`).
    learns: ClassVar[bool] = False
    #: Whether one state serves every budget holder of the cohort (the cohort's accountant), each
    #: holder's account keeping only its quota of the cohort's positives.
    shared: ClassVar[bool] = False

    def account_params(self, policy: PolicyBase, *, sensitivity: float = 1.0) -> AccountParams:
        """The public parameters of a new account under ``policy``: the split of its epsilon."""
        raise NotImplementedError

    def mechanism_params(self, params: AccountParams, n: int | None = None) -> object:
        """The privacy core's parameters of an account (``n``: the cohort size, where they need it);
        their ``epsilon`` is the mechanism's own statement of the account's whole cost."""
        raise NotImplementedError

    def check_servable(self, dataset: str, sensitivity: int) -> None:
        """Raise ValueError (naming ``dataset``) if the mechanism cannot serve a dataset counted at
        ``sensitivity`` samples per patient."""

    def start_state(self, params: AccountParams) -> SVT2State:
        """A new account's state: fresh secret noisy thresholds."""
        raise NotImplementedError

    def decide(
        self,
        params: AccountParams,
        state: SVT2State,
        fresh: Fresh,
        source: PMWSource | None,
        limit: int | None = None,
    ) -> Run:
        """The mechanism run over ``fresh`` from the saved ``state``; it halts when the positives
        spent reach ``limit`` (``params.c`` by default: a shared sanitiser's caller has a quota)."""
        raise NotImplementedError

    def spent(self, params: AccountParams, positives: int) -> float:
        """The epsilon an account with these parameters has spent after ``positives`` TOPs."""
        raise NotImplementedError

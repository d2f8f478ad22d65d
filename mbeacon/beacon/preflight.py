"""What a configuration will serve, checked before anything is served: ``mbeacon config check``,
``mbeacon serve`` and ``mbeacon reload`` refuse the same mistakes. A worker refuses to boot only on
what would make its answers wrong; what :func:`store_problems` finds it logs and serves past, since
a worker that failed to boot would take the running beacon down with it.

The checks that need no ledger (the store, the dataset tables, the priors) run first, so a
configuration that cannot serve never creates a ledger on its way to failing.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from mbeacon.beacon.config import TIERS, ConfigError, ServiceConfig
from mbeacon.beacon.sanitisers import sanitiser_of

if TYPE_CHECKING:
    from mbeacon.beacon.engine import AnswerEngine
    from mbeacon.beacon.ledger import Ledger


def near_miss(name: str, known: Iterable[str]) -> str | None:
    """The known name ``name`` most likely misspells (a typo, a case slip), or None."""
    known = list(known)
    by_case = {k.casefold(): k for k in known}
    if name.casefold() in by_case:
        return by_case[name.casefold()]
    found = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return found[0] if found else None


def check_tables(config: ServiceConfig, served: list[str]) -> None:
    """:class:`ConfigError` for a ``[datasets.X]`` table that names no dataset of the store.

    Such a table protects nothing, and the dataset it was meant for is served at ``[defaults]``: a
    misspelt id would silently serve a cohort at a weaker promise than the operator wrote down."""
    unknown = sorted(set(config.datasets) - set(served))
    if not unknown:
        return
    lines = []
    for name in unknown:
        guess = near_miss(name, served)
        hint = f" (did you mean [datasets.{guess}]?)" if guess else ""
        lines.append(f"[datasets.{name}] names no dataset of the store {config.store}{hint}")
    listing = ", ".join(served) if served else "none"
    raise ConfigError("; ".join(lines) + f"; the store's datasets: {listing}")


def store_problems(engine: AnswerEngine) -> list[str]:
    """What ``mbeacon serve``, ``config check`` and ``reload`` refuse and a worker only logs: a
    ``[datasets.X]`` table that names no dataset, and datasets not served because their file holds
    another's samples."""
    problems = []
    try:
        check_tables(engine.config, engine.store.ids())
    except ConfigError as error:
        problems.append(str(error))
    engine.dataset_ids()  # lists the store, and finds the datasets it does not serve
    problems += [f"{reason} (it is not served)" for reason in engine.refused.values()]
    return problems


@dataclass(frozen=True)
class DatasetPlan:
    """How one dataset will be served: what ``mbeacon config check`` prints."""

    dataset: str
    mechanism: str
    epsilon: float | None
    c: int | None
    threshold: int | None
    quota: int | None
    scope: str
    tier: str
    prior: str | None
    configured: bool  # its own [datasets.X] table, or [defaults]


@dataclass
class LedgerState:
    """What the configured ledger is, as far as it can be read without creating or changing it."""

    where: str
    exists: bool
    version: int | None = None
    latest: int | None = None
    users_by_tier: dict[str, int] = field(default_factory=dict)


def plan(engine: AnswerEngine) -> list[DatasetPlan]:
    """Every dataset of the store as the engine will serve it (after :meth:`AnswerEngine.check`)."""
    plans = []
    for dataset in engine.dataset_ids():
        policy = engine.config.policy(dataset)
        spends = sanitiser_of(policy).spends_budget
        plans.append(
            DatasetPlan(
                dataset=dataset,
                mechanism=policy.mechanism,
                epsilon=policy.epsilon if spends else None,
                c=policy.c if spends else None,
                threshold=policy.threshold if spends else None,
                quota=getattr(policy, "quota", None),
                scope=policy.scope,
                tier=policy.tier,
                prior=engine.prior_name(dataset) if spends else None,
                configured=dataset in engine.config.datasets,
            )
        )
    return plans


def ledger_state(config: ServiceConfig, ledger: Ledger | None) -> LedgerState:
    """The ledger's schema version and active users per tier, read only (``ledger`` None: the
    configured SQLite file does not exist yet; serving creates it)."""
    from mbeacon.beacon.ledger import schema

    where = config.database_url.split("@")[-1]  # no password in what is printed
    if ledger is None:
        return LedgerState(where=where, exists=False, latest=schema.LATEST)
    state = LedgerState(where=where, exists=True, version=schema.current_version(ledger.db),
                        latest=schema.LATEST)  # fmt: skip
    if state.version:
        now = datetime.now(UTC).isoformat()
        for user in ledger.users():
            if user.revoked is None and (user.expires is None or user.expires > now):
                state.users_by_tier[user.tier] = state.users_by_tier.get(user.tier, 0) + 1
    return state


def _holding(users_by_tier: dict[str, int], tier: str) -> int:
    """Active users whose tier reaches ``tier``."""
    rank = TIERS.index(tier)
    return sum(n for t, n in users_by_tier.items() if t in TIERS and TIERS.index(t) >= rank)


def ledger_problems(state: LedgerState) -> list[str]:
    """What stops the ledger from serving (a newer schema than this MBeacon knows)."""
    if state.version is not None and state.latest is not None and state.version > state.latest:
        return [
            f"the ledger {state.where} has schema version {state.version}, newer than this MBeacon's "
            f"{state.latest}: upgrade MBeacon before serving it"
        ]
    return []


def who_may_ask(config: ServiceConfig, tier: str, users_by_tier: dict[str, int] | None) -> str:
    """Who may query a dataset of ``tier``, in words (with the number of active users who hold it)."""
    anonymous = tier == "PUBLIC" and config.anonymous == "shared"
    words = "anyone (anonymous callers share one budget)" if anonymous else f"users of tier {tier} or above"
    if users_by_tier is None:
        return words
    holding = _holding(users_by_tier, tier)
    return f"{words}: {holding} active user{'' if holding == 1 else 's'}"


def coherence_notes(config: ServiceConfig, plans: list[DatasetPlan], state: LedgerState) -> list[str]:
    """Settings that serve but are probably not what the operator meant."""
    notes = []
    if not state.exists:
        notes.append(f"the ledger {state.where} does not exist yet: `mbeacon serve` creates it")
    elif state.version is not None and state.latest is not None and state.version < state.latest:
        notes.append(f"the ledger {state.where} is at schema version {state.version}: serving migrates "
                     f"it to {state.latest}")  # fmt: skip
    for p in plans:
        anonymous = p.tier == "PUBLIC" and config.anonymous == "shared"
        if state.exists and not anonymous and _holding(state.users_by_tier, p.tier) == 0:
            notes.append(f"dataset {p.dataset!r} (tier {p.tier}): no active user may ask it yet "
                         "(mbeacon users add NAME --tier ...)")  # fmt: skip
        if p.tier == "PUBLIC" and config.anonymous == "refuse":
            notes.append(f"dataset {p.dataset!r} is PUBLIC but anonymous = \"refuse\": only users with a "
                         "key may ask it")  # fmt: skip
    return notes

"""The operator's use cases, one implementation each, called by the CLI and the admin API alike.

Adding, rotating and revoking users, and setting and resetting a holder's budget: each checks its
input by the same rules (:mod:`mbeacon.beacon.holders` for names, the dataset policy's model for budget
parameters), writes through the ledger (which audits every change with its ``actor``) and fails with
the kinds of :mod:`mbeacon.beacon.errors`, which each interface words for its reader.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator
from pydantic.fields import FieldInfo

from mbeacon.beacon.budget import Account, AccountParams
from mbeacon.beacon.config import ServiceConfig, Tier
from mbeacon.beacon.errors import InvalidRequest, UnknownTarget
from mbeacon.beacon.holders import NAME_PATTERN, Holder, canonical_name
from mbeacon.beacon.keys import expiry_at
from mbeacon.beacon.ledger import Ledger
from mbeacon.beacon.ledger.ledger import KEEP, ROLES
from mbeacon.beacon.sanitisers import account_params, sanitiser_of
from mbeacon.beacon.sanitisers.policy import PolicyBase
from mbeacon.pydantic_errors import describe


class NewUser(BaseModel):
    """A user to create: the admin API's request body, and what ``mbeacon users add`` builds."""

    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(pattern=NAME_PATTERN)
    tier: Tier = "REGISTERED"
    role: str = Field("researcher", pattern=f"^({'|'.join(ROLES)})$")
    group: str | None = Field(None, pattern=NAME_PATTERN)
    expires: str | None = Field(
        None,
        description="When the key stops working: an ISO date or time in the future (UTC unless it says).",
    )

    @field_validator("expires")
    @classmethod
    def _expiry(cls, value: str | None) -> str | None:
        """Stored as one form (ISO, UTC), so that it compares and shows the same everywhere."""
        return None if value is None else expiry_at(value).isoformat()

    @field_validator("name", "group", mode="before")
    @classmethod
    def _canonical(cls, value: object) -> object:
        """Every spelling of a name is the name (:func:`~mbeacon.beacon.holders.canonical_name`)."""
        return canonical_name(value) if isinstance(value, str) else value


#: The policy fields an operator may override per holder and dataset.
OVERRIDABLE = ("epsilon", "c", "threshold", "variant", "count_epsilon")


def _optional(name: str) -> tuple[Any, FieldInfo]:
    """A dataset policy field as an optional change: the policy's own type and bounds, default None."""
    field = PolicyBase.model_fields[name]
    optional: Any = field.annotation | None  # type: ignore[operator]  # a runtime type, not a static one
    return optional, FieldInfo.merge_field_infos(field, default=None)


#: A budget override's parameters, each optional; bounds and types are the dataset policy's own.
BudgetChange: type[BaseModel] = create_model(
    "BudgetChange",
    __config__=ConfigDict(extra="forbid", strict=True),
    __doc__="Parameters for a holder's next account on a dataset; the dataset's policy fills the rest.",
    **{name: _optional(name) for name in OVERRIDABLE},  # type: ignore[call-overload]
)


@dataclass(frozen=True)
class Override:
    """A budget override as set: its parameters, and whether the holder's account is open now (then
    the account keeps the parameters it was promised until a reset)."""

    holder: Holder
    dataset: str
    params: AccountParams
    account_open: bool


def validated_user(**fields: Any) -> NewUser:
    """:class:`NewUser` from keyword fields; :class:`InvalidRequest` with the first problem."""
    try:
        return NewUser.model_validate(fields)
    except ValidationError as error:
        raise InvalidRequest(describe(error, whole="user", limit=1)) from None


def add_user(ledger: Ledger, new: NewUser, *, actor: str) -> str:
    """Create the user and return their key, shown this once (the ledger keeps only a salted hash)."""
    return ledger.add_user(
        new.name, tier=new.tier, role=new.role, group=new.group, actor=actor, expires=new.expires
    )


def rotate_key(ledger: Ledger, name: str, *, actor: str, expires: datetime | str | None = KEEP) -> str:
    """A new key for a user (named in any spelling; a revoked one is reinstated); the old one stops
    working at once. ``expires``: when the new key stops (None: never; :data:`KEEP`: the user's)."""
    when = expires.astimezone(UTC).isoformat() if isinstance(expires, datetime) else expires
    return ledger.rotate_key(canonical_name(name), actor=actor, expires=when)


def revoke_user(ledger: Ledger, name: str, *, actor: str) -> None:
    """Revoke the user's key (named in any spelling); their budget accounts stay in the ledger, and
    the name is never given out again."""
    ledger.revoke_user(canonical_name(name), actor=actor)


def check_dataset(dataset: str, datasets: Collection[str]) -> None:
    """:class:`UnknownTarget` unless ``dataset`` is one of the store's ``datasets``."""
    if dataset not in datasets:
        raise UnknownTarget(f"no dataset {dataset[:70]!r} in the store")


def override_budget(
    config: ServiceConfig,
    ledger: Ledger,
    holder: Holder,
    dataset: str,
    change: BaseModel | dict,
    *,
    actor: str,
) -> Override:
    """Parameters for the holder's next account on ``dataset``: the dataset's policy with ``change``
    applied, validated as a whole policy (so an override can never be what the file could not say)."""
    if isinstance(change, dict):
        try:
            change = BudgetChange.model_validate(change)
        except ValidationError as error:
            raise InvalidRequest(describe(error, whole="budget", limit=1)) from None
    values = {key: value for key, value in change.model_dump().items() if value is not None}
    try:
        current = config.policy(dataset)
        policy = sanitiser_of(current).policy_model.model_validate({**current.model_dump(), **values})
    except ValidationError as error:
        raise InvalidRequest(describe(error, whole="budget", limit=1)) from None
    params = account_params(policy, sensitivity=_served_bound(config, dataset, policy))
    account_open = ledger.set_override(str(holder), dataset, params, actor=actor)
    return Override(holder, dataset, params, account_open)


def _served_bound(config: ServiceConfig, dataset: str, policy: PolicyBase) -> int:
    """The contribution bound the service counts ``dataset`` at (contribution.py), for a new account."""
    from mbeacon.beacon.contribution import sensitivity_of
    from mbeacon.store.cohorts import CohortStore
    from mbeacon.store.errors import DataError

    try:
        info = CohortStore(config.store).info(dataset)
    except DataError:  # no store here (an offline ledger): the dataset's policy, or 1
        return policy.contribution_bound or 1
    return sensitivity_of(dataset, info, policy).bound


def reset_budget(ledger: Ledger, holder: Holder, dataset: str, *, actor: str) -> bool:
    """Close the holder's account on ``dataset`` (the next query opens a fresh budget); audited.
    True if there was an account to close."""
    return ledger.reset_account(str(holder), dataset, actor=actor)


def budget_accounts(ledger: Ledger, holder: Holder | None) -> list[tuple[Account, int]]:
    """The budget accounts of ``holder`` (everyone's when None), each with its number of answers.

    :class:`UnknownTarget` when the holder has no account and the ledger knows no such user (or no
    user in such a group): an empty list then would read as "a user who has not asked yet", and a
    mistyped name would go unnoticed.
    """
    found = ledger.accounts_and_answers(str(holder) if holder is not None else None)
    if found or holder is None:
        return found
    if holder.kind == "user" and ledger.user(holder.name or "") is None:
        raise UnknownTarget(f"no user {holder.name!r}")
    if holder.kind == "group" and not any(user.group == holder.name for user in ledger.users()):
        raise UnknownTarget(f"no group {holder.name!r} (no user belongs to it)")
    return found

"""Schema-only models of the admin API's responses (the request bodies are the admin module's own
models): what the OpenAPI document's admin components are generated from, and what the tests validate
the admin responses against. The shared pieces (envelope, budget, account parameters) are
:mod:`mbeacon.api.schemas`'."""

# The models mirror the Beacon v2 wire format, whose field names are camelCase.
# ruff: noqa: N815

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from mbeacon.api.admin import NAME_PATTERN
from mbeacon.api.schemas import AccountParameters, AtLeastOne, Budget, Count, Informational
from mbeacon.beacon.config import Tier
from mbeacon.beacon.ledger.ledger import ROLES
from mbeacon.beacon.wire import APPLIES_FROM, AnswerSource

Role = Literal[ROLES]  # type: ignore[valid-type]
AppliesFrom = Literal[APPLIES_FROM]  # type: ignore[valid-type]


class User(BaseModel):
    name: str = Field(pattern=NAME_PATTERN)
    role: Role
    tier: Tier
    group: str | None
    created: str
    revoked: str | None = Field(description="When the key was revoked (null: active).")
    expires: str | None = Field(None, description="When the key stops working (null: never).")


class UserList(BaseModel):
    users: list[User]


class UsersResponse(Informational):
    response: UserList


class OneUser(BaseModel):
    user: User


class UserResponse(Informational):
    response: OneUser


class NewUserAndKey(BaseModel):
    user: User
    key: str = Field(description="The API key: shown this once, never stored in clear.")


class NewUserResponse(Informational):
    response: NewUserAndKey


class Account(Budget):
    budgetHolder: str
    dataset: str
    queries: Count = Field(description="Answers given (cached repeats excluded).")
    opened: str
    parameters: AccountParameters


class AccountList(BaseModel):
    accounts: list[Account]


class AccountsResponse(Informational):
    response: AccountList


class BudgetOverride(BaseModel):
    budgetHolder: str
    dataset: str
    parameters: AccountParameters
    appliesFrom: AppliesFrom


class BudgetOverrideResponse(Informational):
    response: BudgetOverride


class Reset(BaseModel):
    budgetHolder: str
    dataset: str
    reset: bool = Field(description="Whether an account existed (and was deleted).")


class ResetResponse(Informational):
    response: Reset


class AuditEntry(BaseModel):
    id: AtLeastOne
    time: str
    event: str = Field(examples=["query", "refused", "user_add", "user_revoke", "budget_reset"])
    actor: str | None
    principal: str | None = Field(description="The budget holder concerned.")
    dataset: str | None
    query: str | None = Field(description="The query as JSON text (query events).")
    answeredFrom: AnswerSource | None
    cached: bool | None = Field(description="true: a cached answer (query events).")
    detail: str | None


class AuditEntries(BaseModel):
    entries: list[AuditEntry]


class AuditResponse(Informational):
    response: AuditEntries

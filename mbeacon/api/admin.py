"""The admin API (admin keys only): users, budgets and the audit log, as the CLI offers them.

Budget resets need ``{"confirm": true}`` and are written to the audit log with the admin's name.
"""

from __future__ import annotations

import re

from flask import Blueprint, request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from werkzeug.exceptions import NotFound

from mbeacon.api.auth import require_admin
from mbeacon.api.responses import informational
from mbeacon.api.runtime import runtime
from mbeacon.beacon.budget import AccountParams
from mbeacon.beacon.config import DatasetPolicy, Tier
from mbeacon.beacon.query import QueryError

bp = Blueprint("admin", __name__)  # mounted at /api/admin

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$"


HOLDER_PATTERN = r"^(user:|group:)[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$|^global$|^anonymous$"


class NewUser(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(pattern=NAME_PATTERN)
    tier: Tier = "REGISTERED"
    role: str = Field("researcher", pattern="^(researcher|admin)$")
    group: str | None = Field(None, pattern=NAME_PATTERN)


class BudgetChange(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    epsilon: float | None = Field(None, gt=0, le=100, allow_inf_nan=False)
    c: int | None = Field(None, ge=1, le=100_000)
    threshold: int | None = Field(None, ge=1)
    variant: str | None = Field(None, pattern="^(single|redraw)$")
    count_epsilon: float | None = Field(None, ge=0, allow_inf_nan=False)


class Confirm(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    confirm: bool = False


def _body(model: type[BaseModel]) -> BaseModel:
    if not request.get_data():
        data = {}
    elif not request.is_json:
        raise QueryError("send the body as JSON (Content-Type: application/json)")
    else:
        try:
            data = request.get_json(silent=True)
        except RecursionError:  # the JSON decoder's stack, not a server fault
            raise QueryError("request body is nested too deeply") from None
        if data is None:
            raise QueryError("request body is not valid JSON")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise QueryError(_first_error(error, "body")) from None


def _first_error(error: ValidationError, where: str) -> str:
    """``field: message`` of the first validation error (``where`` when it concerns the whole)."""
    first = error.errors()[0]
    return f"{'.'.join(map(str, first['loc'])) or where}: {first['msg']}"


def _check_name(name: str) -> str:
    """A user name from the path: the pattern users are created with (PostgreSQL refuses NUL bytes)."""
    if not re.fullmatch(NAME_PATTERN, name):
        raise NotFound(f"no user {name[:70]!r}")
    return name


@bp.get("/users")
def users():
    require_admin()
    return informational({"users": [u.public() for u in runtime().ledger.users()]})


@bp.post("/users")
def add_user():
    admin = require_admin()
    new = _body(NewUser)
    key = runtime().ledger.add_user(new.name, tier=new.tier, role=new.role, group=new.group,
                                    actor=f"admin:{admin.name}")  # fmt: skip
    return informational({"user": runtime().ledger.user(new.name).public(), "key": key}, status=201)


@bp.post("/users/<name>/revoke")
def revoke_user(name: str):
    admin = require_admin()
    _check_name(name)
    runtime().ledger.revoke_user(name, actor=f"admin:{admin.name}")
    return informational({"user": runtime().ledger.user(name).public()})


def _account_view(account, queries: int) -> dict:
    return {"budgetHolder": account.principal, "dataset": account.dataset, "queries": queries,
            "opened": account.created, **account.budget(), "parameters": account.params.public()}  # fmt: skip


@bp.get("/budget")
def budgets():
    require_admin()
    holder = _holder_argument()
    accounts = runtime().ledger.accounts_and_answers(holder)
    return informational({"accounts": [_account_view(a, queries) for a, queries in accounts]})


def _check_target(holder: str, dataset: str) -> None:
    if not re.fullmatch(HOLDER_PATTERN, holder):
        raise QueryError(
            f"budget holder must be user:NAME, group:NAME, global or anonymous, not {holder[:70]!r}"
        )
    if dataset not in runtime().engine.dataset_ids():
        raise NotFound(f"no dataset {dataset[:70]!r} in the store")


@bp.put("/budget/<holder>/<dataset>")
def set_budget(holder: str, dataset: str):
    admin = require_admin()
    _check_target(holder, dataset)
    change = _body(BudgetChange)
    base = runtime().config.policy(dataset)
    values = {k: v for k, v in change.model_dump().items() if v is not None}
    try:
        policy = DatasetPolicy.model_validate({**base.model_dump(), **values})
    except ValidationError as error:
        raise QueryError(_first_error(error, "budget")) from None
    params = AccountParams.from_policy(policy)
    open_now = runtime().ledger.set_override(holder, dataset, params, actor=f"admin:{admin.name}")
    return informational(
        {
            "budgetHolder": holder,
            "dataset": dataset,
            "parameters": params.public(),
            "appliesFrom": "after budget reset" if open_now else "next query",
        }
    )


@bp.post("/budget/<holder>/<dataset>/reset")
def reset_budget(holder: str, dataset: str):
    admin = require_admin()
    _check_target(holder, dataset)
    if not _body(Confirm).confirm:
        raise QueryError('a reset gives a fresh privacy budget; send {"confirm": true} to do it')
    existed = runtime().ledger.reset_account(holder, dataset, actor=f"admin:{admin.name}")
    return informational({"budgetHolder": holder, "dataset": dataset, "reset": existed})


@bp.get("/audit")
def audit():
    require_admin()
    raw = request.args.get("limit", "100")
    if not re.fullmatch(r"[0-9]{1,5}", raw) or not 1 <= int(raw) <= 10_000:
        raise QueryError("limit must be an integer from 1 to 10000")
    limit = int(raw)
    return informational({"entries": runtime().ledger.audit_log(limit=limit, principal=_holder_argument())})


def _holder_argument() -> str | None:
    """The optional ``holder`` filter, checked like a path's holder (PostgreSQL refuses NUL bytes)."""
    holder = request.args.get("holder")
    if holder is not None and not re.fullmatch(HOLDER_PATTERN, holder):
        raise QueryError(f"holder must be user:NAME, group:NAME, global or anonymous, not {holder[:70]!r}")
    return holder

"""The admin API (admin keys only): users, budgets and the audit log, as the CLI offers them.

Each route is a thin adapter over :mod:`mbeacon.beacon.operations`: it reads the request, calls the
use case with the admin's name as the audited actor, and words the result; failures are mapped to
statuses by the app's error handlers. Budget resets need ``{"confirm": true}``.
"""

from __future__ import annotations

import re

from flask import Blueprint, request
from pydantic import BaseModel, ConfigDict, ValidationError
from werkzeug.exceptions import NotFound

from mbeacon.api.auth import require_admin
from mbeacon.api.bodies import read_json_body
from mbeacon.api.responses import informational
from mbeacon.api.runtime import runtime
from mbeacon.beacon import operations
from mbeacon.beacon.holders import HOLDER_PATTERN, NAME_PATTERN, Holder, canonical_name, is_name
from mbeacon.beacon.operations import BudgetChange, NewUser
from mbeacon.beacon.query import QueryError
from mbeacon.beacon.wire import APPLIES_FROM, MAX_AUDIT_LIMIT
from mbeacon.pydantic_errors import describe

__all__ = ["HOLDER_PATTERN", "NAME_PATTERN", "BudgetChange", "Confirm", "NewUser", "bp"]

bp = Blueprint("admin", __name__)  # mounted at /api/admin
AFTER_RESET, NEXT_QUERY = APPLIES_FROM


class Confirm(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    confirm: bool = False


def _body(model: type[BaseModel]) -> BaseModel:
    """The request's JSON object body (none sent: ``{}``), validated by ``model``."""
    data = read_json_body(empty={})
    if not isinstance(data, dict):
        raise QueryError("request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise QueryError(describe(error, whole="body", limit=1)) from None


def _check_name(name: str) -> str:
    """A user name from the path, in its canonical spelling; 404 for what no user can be called
    (PostgreSQL refuses NUL bytes, so they must not reach the ledger)."""
    canonical = canonical_name(name)
    if not is_name(canonical):
        raise NotFound(f"no user {name[:70]!r}")
    return canonical


def _actor() -> str:
    return f"admin:{require_admin().name}"


@bp.get("/users")
def users():
    require_admin()
    return informational({"users": [u.to_json() for u in runtime().ledger.users()]})


@bp.post("/users")
def add_user():
    actor = _actor()
    new = _body(NewUser)
    key = operations.add_user(runtime().ledger, new, actor=actor)
    return informational({"user": runtime().ledger.user(new.name).to_json(), "key": key}, status=201)


@bp.post("/users/<name>/revoke")
def revoke_user(name: str):
    actor = _actor()
    name = _check_name(name)
    operations.revoke_user(runtime().ledger, name, actor=actor)
    return informational({"user": runtime().ledger.user(name).to_json()})


def _account_view(account, queries: int) -> dict:
    return {"budgetHolder": account.principal, "dataset": account.dataset, "queries": queries,
            "opened": account.created, **account.budget(),
            "parameters": account.params.to_json()}  # fmt: skip


@bp.get("/budget")
def budgets():
    require_admin()
    holder = _holder_argument()
    accounts = runtime().ledger.accounts_and_answers(holder)
    return informational({"accounts": [_account_view(a, queries) for a, queries in accounts]})


def _target(holder: str, dataset: str) -> Holder:
    """The path's holder and dataset, checked before the body is read (a bad target is the answer)."""
    parsed = Holder.parse(holder)
    operations.check_dataset(dataset, runtime().engine.dataset_ids())
    return parsed


@bp.put("/budget/<holder>/<dataset>")
def set_budget(holder: str, dataset: str):
    actor = _actor()
    target = _target(holder, dataset)
    change = _body(BudgetChange)
    done = operations.override_budget(
        runtime().config, runtime().ledger, target, dataset, change, actor=actor
    )
    return informational(
        {
            "budgetHolder": str(done.holder),
            "dataset": dataset,
            "parameters": done.params.to_json(),
            "appliesFrom": AFTER_RESET if done.account_open else NEXT_QUERY,
        }
    )


@bp.post("/budget/<holder>/<dataset>/reset")
def reset_budget(holder: str, dataset: str):
    actor = _actor()
    target = _target(holder, dataset)
    if not _body(Confirm).confirm:
        raise QueryError('a reset gives a fresh privacy budget; send {"confirm": true} to do it')
    existed = operations.reset_budget(runtime().ledger, target, dataset, actor=actor)
    return informational({"budgetHolder": str(target), "dataset": dataset, "reset": existed})


@bp.get("/audit")
def audit():
    require_admin()
    raw = request.args.get("limit", "100")
    if not re.fullmatch(r"[0-9]{1,9}", raw) or not 1 <= int(raw) <= MAX_AUDIT_LIMIT:
        raise QueryError(f"limit must be an integer from 1 to {MAX_AUDIT_LIMIT}")
    limit = int(raw)
    return informational({"entries": runtime().ledger.audit_log(limit=limit, principal=_holder_argument())})


def _holder_argument() -> str | None:
    """The optional ``holder`` filter, checked like a path's holder (PostgreSQL refuses NUL bytes)."""
    holder = request.args.get("holder")
    return None if holder is None else str(Holder.parse(holder, what="holder"))

"""The admin API's paths in the OpenAPI document (users, budgets, the audit log; admin keys only).

Kept beside :mod:`mbeacon.api.openapi_spec` (the researcher-facing paths and the document's prose) so
each module describes one audience's API; the schemas of both come from the pydantic models.
"""

from __future__ import annotations

from typing import Any

from mbeacon.api.admin import HOLDER_PATTERN
from mbeacon.api.openapi_build import BEARER, errors, json_body, ok, operation, path, query
from mbeacon.beacon.wire import MAX_AUDIT_LIMIT


def admin_paths(rate: dict) -> dict:
    """The ``/admin/...`` paths; ``rate`` is the 429 response when the service rate-limits."""
    no_key = "No key, malformed Authorization header, or invalid/revoked key."
    guard = errors({401: no_key, 403: "Not an admin key (researcher keys cannot use the admin API)."})

    def op(operation_id: str, summary: str, success: dict, *, bad: str | None = None,
           more: dict[int, str] | None = None, **extra: Any) -> dict:  # fmt: skip
        responses = {**success, **(errors({400: bad}) if bad else {}), **guard, **errors(more or {})}
        if "body" in extra:
            responses.update(errors({413: None}))
        responses.update({**rate, **errors({503: None})})
        return operation(operation_id, "admin", summary, responses, security=BEARER, **extra)

    holder = path(
        "holder", "Budget holder: `NAME` (the same as `user:NAME`), `group:NAME`, `global` or `anonymous`."
    )
    target = [holder, path("dataset", "Dataset id.")]
    holder_schema = {"type": "string", "pattern": HOLDER_PATTERN}
    no_dataset = {404: "No such dataset in the store."}
    limit = {"type": "integer", "minimum": 1, "maximum": MAX_AUDIT_LIMIT, "default": 100}
    return {
        "/admin/users": {
            "get": op("adminListUsers", "List users", {"200": ok("Every user.", "UsersResponse")}),
            "post": op(
                "adminAddUser",
                "Create a user and mint their API key",
                {"201": ok("The new user and their key (shown only this once).", "NewUserResponse")},
                bad="The body does not validate.",
                more={409: "A user of that name exists (revoked users too)."},
                body=json_body("NewUser", "The new user."),
            ),
        },
        "/admin/users/{name}/revoke": {
            "parameters": [path("name", "User name.")],
            "post": op(
                "adminRevokeUser",
                "Revoke a user's key (idempotent)",
                {"200": ok("The user, now revoked.", "UserResponse")},
                more={404: "No user of that name."},
            ),
        },
        "/admin/budget": {
            "get": op(
                "adminListBudgets",
                "List budget accounts",
                {"200": ok("Budget accounts (opened by a first query).", "AccountsResponse")},
                bad="holder is not a budget holder.",
                parameters=[query("holder", holder_schema, "Only this budget holder's accounts.")],
            )
        },
        "/admin/budget/{holder}/{dataset}": {
            "parameters": target,
            "put": op(
                "adminSetBudget",
                "Set the budget parameters of a holder's next account on a dataset",
                {"200": ok("The parameters and when they apply.", "BudgetOverrideResponse")},
                bad="The body does not validate, the budget holder is malformed, or count_epsilon is not "
                "below epsilon.",
                more=no_dataset,
                description="Unset fields keep the dataset's policy. An open account keeps the parameters it "
                "was opened under: the new ones apply after a budget reset.",
                body=json_body("BudgetChange", "Parameter changes.", required=False),
            ),
        },
        "/admin/budget/{holder}/{dataset}/reset": {
            "parameters": target,
            "post": op(
                "adminResetBudget",
                "Give a holder a fresh budget on a dataset (audited)",
                {"200": ok("Whether an account existed.", "ResetResponse")},
                bad='The body is not {"confirm": true}, or the budget holder is malformed.',
                more=no_dataset,
                body=json_body("Confirm", 'Explicit confirmation: {"confirm": true}.'),
            ),
        },
        "/admin/audit": {
            "get": op(
                "adminAudit",
                "Read the audit log, newest first",
                {"200": ok("Audit entries.", "AuditResponse")},
                bad=f"limit is not an integer from 1 to {MAX_AUDIT_LIMIT}, or holder is not a budget holder.",
                parameters=[
                    query("limit", limit, f"Most entries to return (1 to {MAX_AUDIT_LIMIT})."),
                    query("holder", holder_schema, "Only entries about this budget holder."),
                ],
            )
        },
    }

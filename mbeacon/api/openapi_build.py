"""The small builders the OpenAPI document's operations are written with: operations, parameters,
request bodies and responses (errors by status code, each with the headers it carries)."""

from __future__ import annotations

from typing import Any

JSON = "application/json"
REF = "#/components/schemas/{model}"
BEARER: list[dict] = [{"bearerAuth": []}]

_ERROR_HEADERS = {401: ("WWW-Authenticate",), 429: ("Retry-After",), 503: ("Retry-After",)}
_ERROR_TEXT = {
    400: "Bad request: the parameters or the body do not validate; `errorMessage` names the field.",
    401: "Missing, malformed, invalid or revoked API key, or a token that does not verify.",
    403: "The key may not do this.",
    404: "Not found.",
    409: "Conflict with the current state.",
    413: "The request body is larger than the server accepts.",
    429: "Rate limit exceeded: retry after `Retry-After` seconds.",
    503: "The privacy ledger is unavailable; nothing was answered or spent. Retry after `Retry-After` s.",
}


def ref(name: str) -> dict:
    """A reference to the schema component ``name``."""
    return {"$ref": REF.format(model=name)}


def headers(*names: str) -> dict:
    """References to the response headers ``names``, besides the X-Request-ID every response carries."""
    return {name: {"$ref": f"#/components/headers/{name}"} for name in ("X-Request-ID", *names)}


def ok(description: str, schema: dict | str, *, media: str = JSON) -> dict:
    """A success response; ``schema`` is a schema or the name of a schema component."""
    schema = ref(schema) if isinstance(schema, str) else schema
    return {"description": description, "headers": headers(), "content": {media: {"schema": schema}}}


def errors(why: dict[int, str | None]) -> dict:
    """Error responses by status code, e.g. ``{400: "why", 503: None}`` (None: the usual description)."""
    return {
        str(code): {
            "description": text or _ERROR_TEXT[code],
            "headers": headers(*_ERROR_HEADERS.get(code, ())),
            "content": {JSON: {"schema": ref("BeaconErrorResponse")}},
        }
        for code, text in why.items()
    }


def operation(
    operation_id: str,
    tag: str,
    summary: str,
    responses: dict,
    *,
    description: str | None = None,
    security: list[dict] | None = None,
    parameters: list[dict] | None = None,
    body: dict | None = None,
) -> dict:
    op: dict[str, Any] = {"operationId": operation_id, "tags": [tag], "summary": summary}
    if description:
        op["description"] = description
    if parameters:
        op["parameters"] = parameters
    if body:
        op["requestBody"] = body
    if security is not None:
        op["security"] = security
    op["responses"] = responses
    return op


def query(name: str, schema: dict, description: str) -> dict:
    """An optional query-string parameter; an array is written comma-separated (``a,b``)."""
    parameter = {"name": name, "in": "query", "required": False, "description": description, "schema": schema}
    if schema.get("type") == "array":
        parameter.update(style="form", explode=False)
    return parameter


def path(name: str, description: str) -> dict:
    """A path parameter: one non-empty path segment."""
    schema = {"type": "string", "minLength": 1, "pattern": "^[^/]+$"}
    return {"name": name, "in": "path", "required": True, "description": description, "schema": schema}


def json_body(component: str, description: str, *, required: bool = True) -> dict:
    """A JSON request body whose schema is the component ``component``."""
    return {"required": required, "description": description, "content": {JSON: {"schema": ref(component)}}}

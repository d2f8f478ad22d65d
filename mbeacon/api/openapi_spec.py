"""The OpenAPI 3.1 document of the service (``GET /api/openapi.json``).

Written by hand, as Python literals, from what the routes really accept and return: the request
models of :mod:`mbeacon.beacon.query` and :mod:`mbeacon.api.admin`, the envelopes of
:mod:`mbeacon.api.responses` and the error handlers of :mod:`mbeacon.api`. Patterns are taken from
the pydantic models themselves so that the document cannot drift from the validation. Settings that
change what the server accepts (``max_batch``, ``anonymous``, ``max_body_bytes``) come from the
service configuration: the running app's, or the defaults outside an app context.

``tests/test_openapi.py`` checks that the document is valid OpenAPI 3.1 and covers every route.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from mbeacon import __version__
from mbeacon.api.admin import HOLDER_PATTERN, NAME_PATTERN
from mbeacon.beacon.config import TIERS, ServiceConfig
from mbeacon.beacon.query import DATASET_PATTERN, PROBE_PATTERN, RequestParameters

JSON = "application/json"
GRANULARITIES = ["boolean", "count", "record"]
INCLUDE_RESULTSETS = ["ALL", "HIT", "MISS", "NONE"]
ANSWER_SOURCES = ["prior", "data", "refused"]
MAX_START = 2**31 - 1
MAX_DATASET_IDS = 100
MAX_AUDIT_LIMIT = 10_000
BEARER: list[dict] = [{"bearerAuth": []}]
_BUDGET_FIELDS = ("positivesUsed", "positivesTotal", "epsilonSpent", "epsilonTotal")


def _pattern(model: type[BaseModel], field: str) -> str:
    """The regular expression pydantic checks ``model.field`` against."""
    for item in model.model_fields[field].metadata:
        pattern = getattr(item, "pattern", None)
        if pattern:
            return pattern
    raise LookupError(f"{model.__name__}.{field} has no pattern")


# --- small builders ------------------------------------------------------------------------------


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(properties: dict, required: list[str] | None = None, **extra: Any) -> dict:
    """A JSON object schema; ``required=None`` means every listed property is always present."""
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    needed = list(properties) if required is None else required
    if needed:
        schema["required"] = needed
    schema.update(extra)
    return schema


def _typed(kind: str | list[str], description: str | None = None, **extra: Any) -> dict:
    schema: dict[str, Any] = {"type": kind, **extra}
    if description:
        schema["description"] = description
    return schema


def _string(description: str | None = None, **extra: Any) -> dict:
    return _typed("string", description, **extra)


def _nullable_string(description: str | None = None) -> dict:
    return _typed(["string", "null"], description)


def _number(description: str | None = None, **extra: Any) -> dict:
    return _typed("number", description, **extra)


def _boolean(description: str | None = None, **extra: Any) -> dict:
    return _typed("boolean", description, **extra)


def _int(minimum: int | None = 0, description: str | None = None, **extra: Any) -> dict:
    return _typed("integer", description, **({"minimum": minimum} if minimum is not None else {}), **extra)


def _enum(values: list | tuple, description: str | None = None, **extra: Any) -> dict:
    return _typed("string", description, enum=list(values), **extra)


def _informational(response: dict) -> dict:
    """The envelope of informational responses: ``{"meta": ..., "response": ...}``."""
    return _obj({"meta": _ref("InformationalMeta"), "response": response})


def _headers(*names: str) -> dict:
    return {name: {"$ref": f"#/components/headers/{name}"} for name in ("X-Request-ID", *names)}


def _ok(description: str, schema: dict, *, media: str = JSON) -> dict:
    return {"description": description, "headers": _headers(), "content": {media: {"schema": schema}}}


_ERROR_HEADERS = {401: ("WWW-Authenticate",), 429: ("Retry-After",), 503: ("Retry-After",)}
_ERROR_TEXT = {
    400: "Bad request: the parameters or the body do not validate; `errorMessage` names the field.",
    401: "Missing, malformed, invalid or revoked API key.",
    403: "The key may not do this.",
    404: "Not found.",
    409: "Conflict with the current state.",
    413: "The request body is larger than the server accepts.",
    429: "Rate limit exceeded: retry after `Retry-After` seconds.",
    503: "The privacy ledger is unavailable; nothing was answered or spent. Retry after `Retry-After` s.",
}


def _errors(why: dict[int, str | None]) -> dict:
    """Error responses by status code, e.g. ``{400: "why", 503: None}`` (None: the usual description)."""
    out = {}
    for code, text in why.items():
        out[str(code)] = {
            "description": text or _ERROR_TEXT[code],
            "headers": _headers(*_ERROR_HEADERS.get(code, ())),
            "content": {JSON: {"schema": _ref("BeaconErrorResponse")}},
        }
    return out


def _operation(
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


def _query(name: str, schema: dict, description: str, **extra: Any) -> dict:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
        **extra,
    }


def _path(name: str, description: str) -> dict:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string", "minLength": 1, "pattern": "^[^/]+$"},
    }


def _json_body(schema: dict, description: str, *, required: bool = True) -> dict:
    return {"required": required, "description": description, "content": {JSON: {"schema": schema}}}


# --- schemas -------------------------------------------------------------------------------------


def _envelope_schemas() -> dict:
    schema_per_entity = _obj(
        {"entityType": _string(), "schema": _string()},
        required=[],
        description="A schema used for an entity type (Beacon `SchemasPerEntity`).",
    )
    return {
        "SchemaPerEntity": schema_per_entity,
        "InformationalMeta": _obj(
            {
                "beaconId": _string("The beacon's id (a reversed domain name)."),
                "apiVersion": _string("Beacon API version of the response.", examples=["v2.0.0"]),
                "returnedSchemas": {"type": "array", "items": _ref("SchemaPerEntity")},
            },
            description="Beacon `beaconInformationalResponseMeta`.",
        ),
        "ReceivedRequestSummary": _obj(
            {
                "apiVersion": _string(),
                "requestedSchemas": {"type": "array", "items": {"type": "object"}},
                "pagination": _obj({"skip": _int(), "limit": _int()}),
                "requestedGranularity": _enum(GRANULARITIES),
                "includeResultsetResponses": _enum(INCLUDE_RESULTSETS),
            },
            required=["apiVersion", "requestedSchemas", "pagination", "requestedGranularity"],
            description="The request as the beacon understood it (Beacon `beaconReceivedRequestSummary`).",
        ),
        "ResponseMeta": {
            "allOf": [_ref("InformationalMeta")],
            "type": "object",
            "properties": {
                "returnedGranularity": _enum(GRANULARITIES, "May be coarser than the requested one."),
                "receivedRequestSummary": _ref("ReceivedRequestSummary"),
            },
            "required": ["returnedGranularity", "receivedRequestSummary"],
            "description": "Beacon `beaconResponseMeta`.",
        },
        "Budget": _obj(
            {
                "positivesUsed": _int(description="Answers taken from the data so far (SVT² positives)."),
                "positivesTotal": _int(1, "c: the number of answers the data may give in all."),
                "epsilonSpent": _number("Privacy loss spent so far.", minimum=0),
                "epsilonTotal": _number("The whole privacy budget (epsilon).", exclusiveMinimum=0),
            },
            description="A budget holder's privacy budget on one dataset.",
        ),
        "BeaconErrorResponse": _obj(
            {
                "meta": _ref("ResponseMeta"),
                "error": _obj(
                    {
                        "errorCode": _int(400, "The HTTP status code.", maximum=599),
                        "errorMessage": _string("What went wrong; safe to show anyone."),
                    }
                ),
                "info": _obj(
                    {"dataset": _string("The dataset whose budget is exhausted.")},
                    required=[],
                    allOf=[_ref("Budget")],
                    description="Only with 429 for an exhausted privacy budget: the dataset and its budget.",
                ),
            },
            required=["meta", "error"],
            description="Beacon `beaconErrorResponse`.",
        ),
    }


def _framework_schemas() -> dict:
    entry_type = _obj(
        {
            "id": _string(),
            "name": _string(),
            "description": _string(),
            "partOfSpecification": _string(),
            "ontologyTermForThisType": _obj({"id": _string(), "label": _string()}),
            "defaultSchema": _obj(
                {
                    "id": _string(),
                    "name": _string(),
                    "referenceToSchemaDefinition": _string(format="uri"),
                    "schemaVersion": _string(),
                }
            ),
            "aCollectionOf": {"type": "array", "items": _obj({"id": _string(), "name": _string()})},
            "nonFilteredQueriesAllowed": {"type": "boolean"},
        },
        required=["id", "name", "partOfSpecification", "ontologyTermForThisType", "defaultSchema"],
    )
    endpoint_set = _obj(
        {
            "entryType": _string(),
            "rootUrl": _string(format="uri"),
            "openAPIEndpointsDefinition": _string(format="uri"),
            "endpoints": {
                "type": "object",
                "additionalProperties": _obj({"returnedEntryType": _string(), "url": _string()}),
            },
        },
        required=["entryType", "rootUrl"],
    )
    privacy = _obj(
        {
            "mechanism": _enum(["svt2", "none"], "`none`: unprotected raw answers (evaluations only)."),
            "epsilon": _number("The whole privacy budget of a budget holder.", exclusiveMinimum=0),
            "epsilon1": _number("Epsilon of the noisy threshold pair.", minimum=0),
            "epsilon2": _number("Epsilon of the query noise.", minimum=0),
            "countEpsilon": _number("Part of epsilon spent on noisy counts (0: no counts).", minimum=0),
            "c": _int(1, "Positives: how many answers the data may give per budget holder."),
            "threshold": _int(1, "T: a dataset answers yes when at least T patients are in the range."),
            "variant": _enum(["single", "redraw"]),
            "scope": _enum(["user", "group", "global"], "Who shares one budget."),
            "onExhausted": _enum(["refuse", "prior"], "What happens once the c positives are spent."),
            "tier": _enum(TIERS, "The tier a caller needs to see and query the dataset."),
        },
        description="The published protection of a dataset (never its noisy thresholds).",
    )
    dataset = _obj(
        {
            "id": _string(pattern=DATASET_PATTERN),
            "name": _string(),
            "description": _string(),
            "createDateTime": _string(),
            "info": _obj(
                {
                    "patients": _int(description="Cohort size N (public)."),
                    "probes": _int(),
                    "tissue": _string(),
                    "disease": _string(),
                    "assembly": _string(),
                    "hasProbePositions": _boolean("Whether queries by referenceName + start work."),
                    "privacy": _ref("DatasetPrivacy"),
                }
            ),
        }
    )
    return {
        "InfoResponse": _informational(
            _obj(
                {
                    "id": _string(),
                    "name": _string(),
                    "apiVersion": _string(),
                    "environment": _enum(["prod", "test", "dev", "staging"]),
                    "version": _string("The MBeacon software version."),
                    "description": _string(),
                    "organization": _obj({"id": _string(), "name": _string()}),
                    "welcomeUrl": _string(format="uri"),
                    "info": _obj({"openapi": _string(format="uri"), "documentation": _string(format="uri")}),
                }
            )
        ),
        "ServiceInfo": _obj(
            {
                "id": _string(),
                "name": _string(),
                "type": _obj({"group": _string(), "artifact": _string(), "version": _string()}),
                "description": _string(),
                "organization": _obj({"name": _string(), "url": _string(format="uri")}),
                "documentationUrl": _string(format="uri"),
                "environment": _enum(["prod", "test", "dev", "staging"]),
                "version": _string(),
            },
            description="GA4GH service-info 1.0.0.",
        ),
        "EntryTypeDefinition": entry_type,
        "ConfigurationResponse": _informational(
            _obj(
                {
                    "$schema": _string(),
                    "maturityAttributes": _obj({"productionStatus": _enum(["PROD", "TEST", "DEV"])}),
                    "securityAttributes": _obj(
                        {
                            "defaultGranularity": _enum(GRANULARITIES),
                            "securityLevels": {"type": "array", "items": _enum(TIERS)},
                        }
                    ),
                    "entryTypes": {"type": "object", "additionalProperties": _ref("EntryTypeDefinition")},
                }
            )
        ),
        "MapResponse": _informational(
            _obj(
                {
                    "$schema": _string(),
                    "endpointSets": {"type": "object", "additionalProperties": endpoint_set},
                }
            )
        ),
        "EntryTypesResponse": _informational(
            _obj({"entryTypes": {"type": "object", "additionalProperties": _ref("EntryTypeDefinition")}})
        ),
        "FilteringTermsResponse": _informational(
            _obj(
                {
                    "filteringTerms": {"type": "array", "items": {"type": "object"}, "maxItems": 0},
                    "resources": {"type": "array", "items": {"type": "object"}, "maxItems": 0},
                },
                description="Always empty: methylation queries take no ontology filters.",
            )
        ),
        "DatasetPrivacy": privacy,
        "Dataset": dataset,
        "DatasetsResponse": _obj(
            {
                "meta": _ref("ResponseMeta"),
                "responseSummary": _obj({"exists": _boolean(), "numTotalResults": _int()}),
                "response": _obj({"collections": {"type": "array", "items": _ref("Dataset")}}),
            },
            description="Beacon `beaconCollectionsResponse`.",
        ),
    }


def _start_schema() -> dict:
    return _int(0, "0-based position (Beacon v2 convention).", maximum=MAX_START)


def _request_parameters() -> dict:
    probe = {
        "type": ["string", "null"],
        "pattern": PROBE_PATTERN,
        "description": "The CpG probe, e.g. an Illumina 450K/EPIC id such as cg00000029.",
    }
    reference = {
        "type": ["string", "null"],
        "pattern": _pattern(RequestParameters, "referenceName"),
        "description": "Chromosome of the CpG (referenceName + start instead of probeId).",
    }
    start = {
        "anyOf": [
            _start_schema(),
            {"type": "array", "items": _start_schema(), "minItems": 1, "maxItems": 1},
            {"type": "null"},
        ],
        "description": "0-based position of the CpG (a one-item array is accepted too).",
    }

    def bound(which: str, default: int) -> dict:
        return {
            "type": ["number", "null"],
            "minimum": 0,
            "maximum": 1,
            "description": f"{which} of the beta-value range (default {default}).",
        }

    return {
        "type": "object",
        "description": (
            "One methylation query: is there a dataset with at least T patients whose beta value at "
            "the probe lies in [minValue, maxValue]? Name the probe by `probeId` or by `referenceName` + "
            "`start` (resolved through the cohort's probe manifest), not both. minValue must not exceed "
            "maxValue. `datasetIds` defaults to every dataset the caller may query."
        ),
        "properties": {
            "probeId": probe,
            "referenceName": reference,
            "start": start,
            "minValue": bound("Lower bound", 0),
            "maxValue": bound("Upper bound", 1),
            "datasetIds": {
                "type": ["array", "null"],
                "maxItems": MAX_DATASET_IDS,
                "items": _string(pattern=DATASET_PATTERN),
                "description": "Datasets to ask (default: every dataset available to the caller).",
            },
        },
        "additionalProperties": False,
        "oneOf": [
            {
                "title": "by probe id",
                "required": ["probeId"],
                "properties": {
                    "probeId": {"type": "string"},
                    "referenceName": {"type": "null"},
                    "start": {"type": "null"},
                },
            },
            {
                "title": "by position",
                "required": ["referenceName", "start"],
                "properties": {
                    "probeId": {"type": "null"},
                    "referenceName": {"type": "string"},
                    "start": {"not": {"type": "null"}},
                },
            },
        ],
        "examples": [
            {"probeId": "cg00000029", "minValue": 0.6, "maxValue": 0.8, "datasetIds": ["demo-cohort"]}
        ],
    }


def _methylation_schemas(max_batch: int) -> dict:
    query = _obj(
        {
            "requestParameters": {
                "oneOf": [
                    _ref("RequestParameters"),
                    {
                        "type": "array",
                        "items": _ref("RequestParameters"),
                        "minItems": 1,
                        "maxItems": max_batch,
                    },
                ],
                "description": f"One query, or a batch of 1 to {max_batch} queries answered in order.",
            },
            "requestedGranularity": _enum(GRANULARITIES, default="boolean"),
            "includeResultsetResponses": _enum(INCLUDE_RESULTSETS, default="HIT"),
            "testMode": _boolean(default=False),
        },
        required=["requestParameters"],
        description="Other Beacon query fields (filters, pagination) are accepted and ignored.",
    )
    result_info = _obj(
        {
            "answeredFrom": _enum(
                ANSWER_SOURCES,
                "`prior`: from the public prior (free); `data`: from the data (spent one of the c "
                "positives); `refused`: not answered, the budget is exhausted (exists is false).",
            ),
            "cached": _boolean("A repeat of an earlier identical query: the same answer, at no cost."),
            "probeId": _nullable_string("The probe answered (null: a position that maps to no probe)."),
            "range": {
                "type": "array",
                "prefixItems": [_number(minimum=0, maximum=1), _number(minimum=0, maximum=1)],
                "items": False,
                "minItems": 2,
                "description": "[minValue, maxValue] as answered.",
            },
            "positivesUsed": _int(),
            "positivesTotal": _int(1),
            "epsilonSpent": _number(minimum=0),
            "epsilonTotal": _number(exclusiveMinimum=0),
            "budgetExhausted": {"const": True, "description": "Present when the budget ran out."},
            "queryIndex": _int(description="Position of the query in a batch (batches only)."),
            "testMode": {"const": True, "description": "A test-mode answer: from the prior, no budget."},
        },
        required=["answeredFrom", "cached", "probeId", "range"],
        anyOf=[{"required": list(_BUDGET_FIELDS)}, {"required": ["testMode"]}],
        description="Budget fields after the answer; a test-mode answer has `testMode` instead.",
    )
    result_set = _obj(
        {
            "id": _string("The dataset."),
            "setType": {"const": "dataset"},
            "exists": _boolean(),
            "resultsCount": _int(description="A noisy count with `count` granularity, else 0."),
            "results": {"type": "array", "items": {"type": "object"}, "maxItems": 0},
            "info": _ref("ResultSetInfo"),
        }
    )
    response = _obj(
        {
            "meta": _ref("ResponseMeta"),
            "responseSummary": _obj(
                {
                    "exists": _boolean("Whether any (query, dataset) pair was answered yes."),
                    "numTotalResults": _int(description="Sum of counts (count granularity, single query)."),
                },
                required=["exists"],
            ),
            "response": _obj({"resultSets": {"type": "array", "items": _ref("ResultSet")}}),
            "info": _obj(
                {
                    "budgets": {
                        "type": "object",
                        "additionalProperties": {"anyOf": [_ref("Budget"), _ref("TestModeBudget")]},
                    },
                    "refused": _int(description="Pairs refused because the budget is exhausted."),
                    "queries": _int(1, "Number of queries in the request."),
                }
            ),
        },
        description="Beacon `beaconResultsetsResponse`: one result set per (query, dataset) pair kept by "
        "includeResultsetResponses.",
    )
    budget_detail = {
        "allOf": [_ref("Budget")],
        "type": "object",
        "properties": {
            "budgetHolder": _string("`user:NAME`, `group:NAME`, `global` or `anonymous`."),
            "scope": _enum(["user", "group", "global"]),
            "onExhausted": _enum(["refuse", "prior"]),
            "mechanism": _enum(["svt2", "none"]),
            "epsilon1": _number(minimum=0),
            "epsilon2": _number(minimum=0),
            "countEpsilon": _number(minimum=0),
            "threshold": _int(1),
            "variant": _enum(["single", "redraw"]),
        },
        "required": [
            "budgetHolder",
            "scope",
            "onExhausted",
            "mechanism",
            "epsilon1",
            "epsilon2",
            "countEpsilon",
            "threshold",
            "variant",
        ],
    }
    return {
        "TestModeBudget": _obj(
            {"testMode": {"const": True}},
            additionalProperties=False,
            description="In test mode no budget is read or spent.",
        ),
        "RequestParameters": _request_parameters(),
        "BeaconRequestBody": _obj(
            {
                "meta": _obj(
                    {
                        "apiVersion": _string(default="v2.0.0"),
                        "requestedSchemas": {"type": "array", "items": {"type": "object"}},
                    },
                    required=[],
                ),
                "query": query,
            },
            required=["query"],
            description="The Beacon v2 request body (`meta` is optional here).",
        ),
        "ResultSetInfo": result_info,
        "ResultSet": result_set,
        "MethylationResponse": response,
        "BudgetDetail": budget_detail,
        "BudgetResponse": _informational(
            _obj(
                {
                    "user": _string("The caller (`anonymous` without a key)."),
                    "tier": _enum(TIERS),
                    "budgets": {"type": "object", "additionalProperties": _ref("BudgetDetail")},
                }
            )
        ),
    }


def _admin_schemas() -> dict:
    user = _obj(
        {
            "name": _string(pattern=NAME_PATTERN),
            "role": _enum(["researcher", "admin"]),
            "tier": _enum(TIERS),
            "group": _nullable_string(),
            "created": _string(),
            "revoked": _nullable_string("When the key was revoked (null: active)."),
        }
    )
    parameters = _obj(
        {
            "mechanism": _enum(["svt2", "none"]),
            "epsilon": _number(exclusiveMinimum=0),
            "epsilon1": _number(minimum=0),
            "epsilon2": _number(minimum=0),
            "countEpsilon": _number(minimum=0),
            "c": _int(1),
            "threshold": _int(1),
            "variant": _enum(["single", "redraw"]),
        },
        description="The public SVT² parameters of a budget account (frozen when it opened).",
    )
    account = {
        "allOf": [_ref("Budget")],
        "type": "object",
        "properties": {
            "budgetHolder": _string(),
            "dataset": _string(),
            "queries": _int(description="Answers given (cached repeats excluded)."),
            "opened": _string(),
            "parameters": _ref("AccountParameters"),
        },
        "required": ["budgetHolder", "dataset", "queries", "opened", "parameters"],
    }
    audit_entry = _obj(
        {
            "id": _int(1),
            "time": _string(),
            "event": _string(examples=["query", "refused", "user_add", "user_revoke", "budget_reset"]),
            "actor": _nullable_string(),
            "principal": _nullable_string("The budget holder concerned."),
            "dataset": _nullable_string(),
            "query": _nullable_string("The query as JSON text (query events)."),
            "answeredFrom": {"type": ["string", "null"], "enum": [*ANSWER_SOURCES, None]},
            "cached": {"type": ["boolean", "null"], "description": "true: a cached answer (query events)."},
            "detail": _nullable_string(),
        }
    )
    optional_number = {"type": ["number", "null"]}
    optional_int = {"type": ["integer", "null"]}
    return {
        "User": user,
        "UsersResponse": _informational(_obj({"users": {"type": "array", "items": _ref("User")}})),
        "UserResponse": _informational(_obj({"user": _ref("User")})),
        "NewUser": _obj(
            {
                "name": _string(pattern=NAME_PATTERN),
                "tier": _enum(TIERS, default="REGISTERED"),
                "role": _enum(["researcher", "admin"], default="researcher"),
                "group": {
                    "type": ["string", "null"],
                    "pattern": NAME_PATTERN,
                    "description": "Budget group (datasets with scope = group share one budget).",
                },
            },
            required=["name"],
            additionalProperties=False,
        ),
        "NewUserResponse": _informational(
            _obj(
                {"user": _ref("User"), "key": _string("The API key: shown this once, never stored in clear.")}
            )
        ),
        "AccountParameters": parameters,
        "Account": account,
        "AccountsResponse": _informational(_obj({"accounts": {"type": "array", "items": _ref("Account")}})),
        "BudgetChange": _obj(
            {
                "epsilon": {**optional_number, "exclusiveMinimum": 0, "maximum": 100},
                "c": {**optional_int, "minimum": 1, "maximum": 100_000},
                "threshold": {**optional_int, "minimum": 1},
                "variant": {"type": ["string", "null"], "enum": ["single", "redraw", None]},
                "count_epsilon": {**optional_number, "minimum": 0},
            },
            required=[],
            additionalProperties=False,
            description="Changes to the dataset's policy for this holder's next account; count_epsilon "
            "must stay below epsilon.",
        ),
        "BudgetOverrideResponse": _informational(
            _obj(
                {
                    "budgetHolder": _string(),
                    "dataset": _string(),
                    "parameters": _ref("AccountParameters"),
                    "appliesFrom": _enum(["after budget reset", "next query"]),
                }
            )
        ),
        "ResetRequest": _obj({"confirm": {"const": True}}, additionalProperties=False),
        "ResetResponse": _informational(
            _obj(
                {
                    "budgetHolder": _string(),
                    "dataset": _string(),
                    "reset": _boolean("Whether an account existed (and was deleted)."),
                }
            )
        ),
        "AuditEntry": audit_entry,
        "AuditResponse": _informational(_obj({"entries": {"type": "array", "items": _ref("AuditEntry")}})),
    }


# --- paths ---------------------------------------------------------------------------------------


def _framework_paths(rate: dict) -> dict:
    def info_op(operation_id: str, summary: str, schema: str) -> dict:
        return {
            "get": _operation(operation_id, "framework", summary, {"200": _ok(summary, _ref(schema)), **rate})
        }

    datasets = _operation(
        "listDatasets",
        "framework",
        "The datasets the caller may query, with their published privacy parameters",
        {
            "200": _ok(
                "Datasets visible to the caller's tier (anonymous callers: PUBLIC).", _ref("DatasetsResponse")
            ),
            **_errors({401: "The Authorization header is malformed or the key is invalid or revoked."}),
            **rate,
            **_errors({503: "The privacy ledger is unavailable (only when a key is sent)."}),
        },
        description="No key needed; with a researcher key the datasets of the caller's tier are listed "
        "too. An admin key counts as anonymous here.",
        security=[{}, *BEARER],
    )
    return {
        "/": info_op("getRoot", "Beacon information (same as /info)", "InfoResponse"),
        "/info": info_op("getInfo", "Beacon information", "InfoResponse"),
        "/service-info": info_op("getServiceInfo", "GA4GH service-info", "ServiceInfo"),
        "/configuration": info_op("getConfiguration", "Beacon configuration", "ConfigurationResponse"),
        "/map": info_op("getMap", "Beacon map of endpoints", "MapResponse"),
        "/entry_types": info_op("getEntryTypes", "Entry types", "EntryTypesResponse"),
        "/filtering_terms": info_op("getFilteringTerms", "Filtering terms (none)", "FilteringTermsResponse"),
        "/datasets": {"get": datasets},
    }


def _methylation_get_parameters() -> list[dict]:
    return [
        _query("probeId", _string(pattern=PROBE_PATTERN), "The CpG probe (or referenceName + start)."),
        _query(
            "referenceName",
            _string(pattern=_pattern(RequestParameters, "referenceName")),
            "Chromosome, with start, instead of probeId.",
        ),
        _query("start", _start_schema(), "0-based CpG position, with referenceName."),
        _query("minValue", _number(minimum=0, maximum=1), "Lower bound of the beta-value range (default 0)."),
        _query("maxValue", _number(minimum=0, maximum=1), "Upper bound of the beta-value range (default 1)."),
        _query(
            "datasetIds",
            {"type": "array", "maxItems": MAX_DATASET_IDS, "items": _string(pattern=DATASET_PATTERN)},
            "Comma-separated dataset ids (default: every dataset available to the caller).",
            style="form",
            explode=False,
        ),
        _query(
            "requestedGranularity",
            _enum(GRANULARITIES, default="boolean"),
            "`count` is honoured only for CONTROLLED callers on datasets with noisy counts.",
        ),
        _query(
            "includeResultsetResponses",
            _enum(INCLUDE_RESULTSETS, default="HIT"),
            "Which result sets to list.",
        ),
        _query("apiVersion", _string(default="v2.0.0"), "Beacon API version the client expects (echoed)."),
        _query("testMode", _boolean(default=False), "Beacon testMode flag (`true` or `1`)."),
    ]


_ANSWERS = (
    "Each (query, dataset) pair is answered by SVT²: either from the public prior (`answeredFrom: prior`, "
    "free) or from the data (`answeredFrom: data`, spending one of the budget holder's c positives). "
    "An identical query asked again returns the identical cached answer for free (`cached: true`). "
    "When the positives are spent, a dataset with `onExhausted = refuse` refuses (429, or "
    "`answeredFrom: refused` for the rest of a batch that ran out part-way), one with `prior` answers "
    "from the prior."
)


def _methylation_paths(config: ServiceConfig, rate: dict) -> dict:
    security = BEARER + ([{}] if config.anonymous == "shared" else [])
    key_401 = (
        "Missing key (this beacon requires one), malformed Authorization header, or invalid/revoked key."
        if config.anonymous != "shared"
        else "Malformed Authorization header, or invalid/revoked key."
    )
    refusals = _errors(
        {
            401: key_401,
            403: "An admin key (admin keys cannot query data), or a dataset that does not exist or is not "
            "available to the caller's tier.",
        }
    )
    too_many = _errors(
        {
            429: "Rate limit exceeded (with `Retry-After`), or the privacy budget of a dataset is exhausted "
            "and its policy refuses (no `Retry-After`; `info` names the dataset and its budget).",
            503: None,
        }
    )
    ok = _ok("Answers, with their provenance and the budgets after the request.", _ref("MethylationResponse"))
    get = _operation(
        "queryMethylationGet",
        "methylation",
        "Ask one methylation range query",
        {
            "200": ok,
            **_errors(
                {
                    400: "Invalid or unknown query parameter, no probe (or both a probe and a position), "
                    "minValue greater than maxValue."
                }
            ),
            **refusals,
            **too_many,
        },
        description=_ANSWERS,
        security=security,
        parameters=_methylation_get_parameters(),
    )
    post = _operation(
        "queryMethylationPost",
        "methylation",
        "Ask one methylation query or a batch (Beacon v2 request body)",
        {
            "200": ok,
            **_errors(
                {
                    400: "The body is not JSON (or not sent as application/json), does not validate, or "
                    f"holds an empty batch or more than {config.max_batch} queries."
                }
            ),
            **refusals,
            **_errors({413: f"The body is larger than {config.max_body_bytes} bytes."}),
            **too_many,
        },
        description=_ANSWERS + " A batch is answered in order, in one transaction; each result set carries "
        "its `queryIndex`.",
        security=security,
        body=_json_body(_ref("BeaconRequestBody"), "The Beacon v2 request body."),
    )
    budget = _operation(
        "getBudget",
        "methylation",
        "The caller's privacy budget on every dataset they may query",
        {
            "200": _ok("Budgets (an account not opened yet shows its full budget).", _ref("BudgetResponse")),
            **_errors({401: key_401, 403: "An admin key (admin keys have no budget)."}),
            **rate,
            **_errors({503: None}),
        },
        security=security,
    )
    return {"/methylation": {"get": get, "post": post}, "/budget": {"get": budget}}


def _docs_paths(rate: dict) -> dict:
    return {
        "/openapi.json": {
            "get": _operation(
                "getOpenApi",
                "docs",
                "This OpenAPI 3.1 document",
                {"200": _ok("The OpenAPI document.", {"type": "object"}), **rate},
            )
        },
        "/docs": {
            "get": _operation(
                "getDocs",
                "docs",
                "A short guide for researchers, with a query form",
                {"200": _ok("An HTML page.", {"type": "string"}, media="text/html"), **rate},
            )
        },
    }


def _admin_paths(rate: dict) -> dict:
    guard = _errors(
        {
            401: "No key, malformed Authorization header, or invalid/revoked key.",
            403: "Not an admin key (researcher keys cannot use the admin API).",
        }
    )
    tail = {**rate, **_errors({503: None})}
    too_large = _errors({413: None})

    def op(
        operation_id: str,
        summary: str,
        ok: dict,
        *,
        bad: str | None = None,
        more: dict[int, str] | None = None,
        **extra: Any,
    ) -> dict:
        responses = {**ok, **(_errors({400: bad}) if bad else {}), **guard, **_errors(more or {})}
        if "body" in extra:
            responses.update(too_large)
        return _operation(operation_id, "admin", summary, {**responses, **tail}, security=BEARER, **extra)

    holder = _path("holder", "Budget holder: `user:NAME`, `group:NAME`, `global` or `anonymous`.")
    dataset = _path("dataset", "Dataset id.")
    holder_schema = _string(pattern=HOLDER_PATTERN)
    return {
        "/admin/users": {
            "get": op("adminListUsers", "List users", {"200": _ok("Every user.", _ref("UsersResponse"))}),
            "post": op(
                "adminAddUser",
                "Create a user and mint their API key",
                {"201": _ok("The new user and their key (shown only this once).", _ref("NewUserResponse"))},
                bad="The body does not validate.",
                more={409: "A user of that name exists (revoked users too)."},
                body=_json_body(_ref("NewUser"), "The new user."),
            ),
        },
        "/admin/users/{name}/revoke": {
            "parameters": [_path("name", "User name.")],
            "post": op(
                "adminRevokeUser",
                "Revoke a user's key (idempotent)",
                {"200": _ok("The user, now revoked.", _ref("UserResponse"))},
                more={404: "No user of that name."},
            ),
        },
        "/admin/budget": {
            "get": op(
                "adminListBudgets",
                "List budget accounts",
                {"200": _ok("Budget accounts (opened by a first query).", _ref("AccountsResponse"))},
                bad="holder is not a budget holder.",
                parameters=[_query("holder", holder_schema, "Only this budget holder's accounts.")],
            )
        },
        "/admin/budget/{holder}/{dataset}": {
            "parameters": [holder, dataset],
            "put": op(
                "adminSetBudget",
                "Set the budget parameters of a holder's next account on a dataset",
                {"200": _ok("The parameters and when they apply.", _ref("BudgetOverrideResponse"))},
                bad="The body does not validate, the budget holder is malformed, or count_epsilon is not "
                "below epsilon.",
                more={404: "No such dataset in the store."},
                description="Unset fields keep the dataset's policy. An open account keeps the parameters it "
                "was opened under: the new ones apply after a budget reset.",
                body=_json_body(_ref("BudgetChange"), "Parameter changes.", required=False),
            ),
        },
        "/admin/budget/{holder}/{dataset}/reset": {
            "parameters": [holder, dataset],
            "post": op(
                "adminResetBudget",
                "Give a holder a fresh budget on a dataset (audited)",
                {"200": _ok("Whether an account existed.", _ref("ResetResponse"))},
                bad='The body is not {"confirm": true}, or the budget holder is malformed.',
                more={404: "No such dataset in the store."},
                body=_json_body(_ref("ResetRequest"), "Explicit confirmation."),
            ),
        },
        "/admin/audit": {
            "get": op(
                "adminAudit",
                "Read the audit log, newest first",
                {"200": _ok("Audit entries.", _ref("AuditResponse"))},
                bad="limit is not an integer, or holder is not a budget holder.",
                parameters=[
                    _query(
                        "limit",
                        _int(0, default=100),
                        f"Most entries to return (capped at {MAX_AUDIT_LIMIT}).",
                    ),
                    _query("holder", holder_schema, "Only entries about this budget holder."),
                ],
            )
        },
    }


_DESCRIPTION = """\
A privacy-preserving GA4GH Beacon v2 for DNA methylation. A query asks whether a dataset has at least
T patients whose beta value at a CpG probe lies in [minValue, maxValue]; every answer is sanitised by
SVT² against a public prior and charged to the caller's privacy budget (see `/methylation`).

Authentication: `Authorization: Bearer <API key>`. Researcher keys query data; admin keys use the
admin API only. Every `/api` request counts against a per-key (or per-address) rate limit of
{rate} requests a minute (429 with `Retry-After`). Every response carries `X-Request-ID` (a client's
own `X-Request-ID` request header is echoed). Errors are Beacon error responses.

Outside `/api`, at the server root: `GET /livez` (liveness, `{{"status": "ok"}}`), `GET /readyz`
(readiness: 200, or 503 naming the failing part) and `GET /metrics` (Prometheus text; {metrics}).
"""


def _current_config() -> ServiceConfig:
    from flask import current_app, has_app_context

    if has_app_context() and "MBEACON" in current_app.config:
        return current_app.config["MBEACON"].config
    return ServiceConfig()


def openapi_document(server_url: str, config: ServiceConfig | None = None) -> dict:
    """The OpenAPI 3.1 document for a service whose API lives at ``server_url`` (ending in ``/api``).

    ``config``: the service configuration; by default the running app's (or the defaults).
    """
    config = config or _current_config()
    rate = _errors({429: None}) if config.rate_limit_per_minute > 0 else {}
    description = _DESCRIPTION.format(
        rate=config.rate_limit_per_minute or "unlimited",
        metrics="public" if config.metrics_public else "admin key",
    )
    return {
        "openapi": "3.1.0",
        "info": {
            "title": config.beacon_name,
            "version": __version__,
            "summary": "Privacy-preserving GA4GH Beacon v2 for DNA methylation (SVT²)",
            "description": description,
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "servers": [{"url": server_url}],
        "tags": [
            {"name": "framework", "description": "Beacon v2 framework endpoints (informational)."},
            {"name": "methylation", "description": "Methylation queries and the caller's budget."},
            {"name": "docs", "description": "This document and the researcher guide."},
            {"name": "admin", "description": "Users, budgets and the audit log (admin keys only)."},
        ],
        "paths": {
            **_framework_paths(rate),
            **_methylation_paths(config, rate),
            **_docs_paths(rate),
            **_admin_paths(rate),
        },
        "components": {
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "mbk_<key id>_<secret>",
                    "description": "An API key from the operator (`mbeacon users add`) or the admin API.",
                }
            },
            "headers": {
                "X-Request-ID": {
                    "description": "Request id (the client's, or a new one).",
                    "schema": _string(),
                },
                "Retry-After": {
                    "description": "Seconds to wait before retrying.",
                    "schema": _string(pattern="^[0-9]+$"),
                },
                "WWW-Authenticate": {
                    "description": "The authentication scheme: Bearer.",
                    "schema": _string(),
                },
            },
            "schemas": {
                **_envelope_schemas(),
                **_framework_schemas(),
                **_methylation_schemas(config.max_batch),
                **_admin_schemas(),
            },
        },
    }

"""The ``components`` of the OpenAPI document, generated from the pydantic models.

Request bodies are the models the routes validate with (:mod:`mbeacon.beacon.query`,
:mod:`mbeacon.api.admin`); responses are the schema-only models of :mod:`mbeacon.api.schemas` and
:mod:`mbeacon.api.admin_schemas`. Each model is a component named as its class, the models it nests
(pydantic's ``$defs``) components beside it. The one part that depends on the configuration, the
batch limit, is set here.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, models_json_schema

from mbeacon.api import admin_schemas, schemas
from mbeacon.api.admin import BudgetChange, Confirm, NewUser
from mbeacon.api.openapi_build import REF, query, ref
from mbeacon.beacon.query import BeaconRequestBody, GetOptions, Pagination, RequestParameters

REQUESTS: tuple[type[BaseModel], ...] = (RequestParameters, BeaconRequestBody, NewUser, BudgetChange, Confirm)
RESPONSES: tuple[type[BaseModel], ...] = (
    schemas.BeaconErrorResponse,
    schemas.InfoResponse,
    schemas.ServiceInfo,
    schemas.ConfigurationResponse,
    schemas.MapResponse,
    schemas.EntryTypesResponse,
    schemas.FilteringTermsResponse,
    schemas.DatasetsResponse,
    schemas.MethylationResponse,
    schemas.BudgetResponse,
    admin_schemas.UsersResponse,
    admin_schemas.UserResponse,
    admin_schemas.NewUserResponse,
    admin_schemas.AccountsResponse,
    admin_schemas.BudgetOverrideResponse,
    admin_schemas.ResetResponse,
    admin_schemas.AuditResponse,
)


class _Generator(GenerateJsonSchema):
    """pydantic's JSON schemas without what says nothing to a reader of the document: a title on every
    field (the name, capitalised) and ``default: null`` on a field that is never null (one a response
    may leave out)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def default_schema(self, schema: Any) -> dict:
        json_schema = super().default_schema(schema)
        if json_schema.get("default", ...) is None and not _nullable(json_schema):
            del json_schema["default"]
        return json_schema


def _nullable(schema: dict) -> bool:
    kinds = schema.get("type")
    return (
        kinds == "null"
        or (isinstance(kinds, list) and "null" in kinds)
        or any(_nullable(option) for option in schema.get("anyOf", ()))
    )


@functools.cache
def _generated() -> dict[str, dict]:
    models = [(model, "validation") for model in (*REQUESTS, *RESPONSES)]
    _, top = models_json_schema(models, ref_template=REF, schema_generator=_Generator)
    found: dict[str, dict] = top["$defs"]
    for name, schema in found.items():
        if schema.get("title") == name:
            del schema["title"]
        if "description" in schema:  # a docstring's line breaks are not the description's
            schema["description"] = " ".join(schema["description"].split())
    return found


def component_schemas(max_batch: int) -> dict[str, dict]:
    """Every schema component, for a service that answers batches of up to ``max_batch`` queries."""
    found = copy.deepcopy(_generated())
    ids = found["RequestParameters"]["properties"]["datasetIds"]["anyOf"][0]
    found["RequestParameters"]["properties"]["datasets"] = {
        "oneOf": [ids, {"type": "object", "properties": {"datasetIds": ids}, "required": ["datasetIds"],
                        "additionalProperties": False}],
        "description": "The datasets to ask, as other Beacon implementations spell them (a list of ids, "
        "or `{datasetIds: [...]}`); with datasetIds or `query.datasets`, all must name the same datasets.",
    }  # fmt: skip
    found["BeaconQuery"]["properties"]["requestParameters"] = {
        "oneOf": [
            ref("RequestParameters"),
            {"type": "array", "items": ref("RequestParameters"), "minItems": 1, "maxItems": max_batch},
        ],
        "description": f"One query, or a batch of 1 to {max_batch} queries answered in order. Left "
        "out (or naming only datasetIds): an unfiltered request, answered from public metadata.",
    }
    return found


@functools.cache
def _query_string_fields() -> dict[str, dict]:
    request = RequestParameters.model_json_schema(schema_generator=_Generator)["properties"]
    options = GetOptions.model_json_schema(schema_generator=_Generator)["properties"]
    test_mode = BeaconRequestBody.model_json_schema(schema_generator=_Generator)["$defs"]["BeaconQuery"]
    pages = Pagination.model_json_schema(schema_generator=_Generator)["properties"]
    filters = {
        "type": "string",
        "maxLength": 0,
        "description": "Beacon filters, comma-separated: methylation queries take none (see "
        "/filtering_terms for what can be asked), so only an empty value is accepted.",
    }
    datasets = {
        "type": "array",
        "items": {"type": "string"},
        "description": "Same as datasetIds (the "
        "spelling other Beacon implementations send); both given must name the same datasets.",
    }
    schema = {"type": "string", "description": "A schema name, echoed in `requestedSchemas`."}
    return {
        **request,
        "datasets": datasets,
        **options,
        "testMode": test_mode["properties"]["testMode"],
        **pages,
        "filters": filters,
        "requestedSchema": schema,
    }  # fmt: skip


def query_string_parameters(prose: dict[str, str]) -> list[dict]:
    """The GET query parameters (a query's parameters, and the options besides it), described by
    ``prose`` where the query string differs from the body, else as the body's fields are."""
    return [
        query(name, _one_value(field), prose.get(name) or field.get("description", ""))
        for name, field in _query_string_fields().items()
    ]


def _one_value(field: dict) -> dict:
    """A field's schema as a query string holds it: never null, and of its forms the first (a single
    value, not a list of one)."""
    one_value = next(form for form in field.get("anyOf", [field]) if form.get("type") != "null")
    schema = {key: value for key, value in one_value.items() if key not in ("description", "default")}
    if field.get("default") is not None:
        schema["default"] = field["default"]
    return copy.deepcopy(schema)


HEADERS = {
    "X-Request-ID": {"description": "Request id (the client's, or a new one).", "schema": {"type": "string"}},
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
    },
    "WWW-Authenticate": {"description": "The authentication scheme: Bearer.", "schema": {"type": "string"}},
}

SECURITY_SCHEMES = {
    "bearerAuth": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "mbk_<key id>_<secret>, or an OIDC access token (JWT)",
        "description": "An API key from the operator (`mbeacon users add`) or the admin API, or, where the "
        "beacon trusts an OIDC provider, that provider's access token for this beacon (GA4GH Passport "
        "visas in it or in its userinfo open the CONTROLLED datasets they grant).",
    }
}


def components(max_batch: int) -> dict:
    """The document's ``components``: security schemes, headers and the schemas."""
    return {
        "securitySchemes": copy.deepcopy(SECURITY_SCHEMES),
        "headers": copy.deepcopy(HEADERS),
        "schemas": component_schemas(max_batch),
    }

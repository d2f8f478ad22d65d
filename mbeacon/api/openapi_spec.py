"""The OpenAPI 3.1 document of the service (``GET /api/openapi.json``): its paths, operations and prose.

The schemas are generated from the pydantic models (:mod:`mbeacon.api.openapi_components`), so the
document cannot drift from the validation. What the configuration changes (``max_batch``, ``anonymous``,
``max_body_bytes``, the rate limit) comes from the running app's configuration, or the defaults.
``tests/test_openapi.py`` checks that the document is valid OpenAPI 3.1, covers every route, and
describes the responses the server really gives.
"""

from __future__ import annotations

from mbeacon import __version__
from mbeacon.api.openapi_admin import admin_paths
from mbeacon.api.openapi_build import BEARER, errors, json_body, ok, operation, path, query
from mbeacon.api.openapi_components import components, query_string_parameters
from mbeacon.beacon.config import ServiceConfig


def _framework_paths(rate: dict) -> dict:
    def info(operation_id: str, summary: str, schema: str) -> dict:
        return {"get": operation(operation_id, "framework", summary, {"200": ok(summary, schema), **rate})}

    listing = [
        query("skip", {"type": "integer", "minimum": 0, "default": 0}, "Pages to skip."),
        query("limit", {"type": "integer", "minimum": 0, "default": 10}, "Page size (0: all)."),
        query("datasetIds", {"type": "array", "items": {"type": "string"}}, "Only these datasets."),
        query("datasets", {"type": "array", "items": {"type": "string"}}, "Same as datasetIds."),
        query("testMode", {"type": "boolean"}, "Beacon testMode flag (echoed)."),
        query("requestedSchema", {"type": "string"}, "A schema name (echoed in requestedSchemas)."),
        query("apiVersion", {"type": "string"}, "Beacon API version (echoed)."),
        query("filters", {"type": "string", "maxLength": 0}, "Beacon filters: none are taken."),
    ]
    listing_body = json_body(
        "BeaconRequestBody",
        "A Beacon request body: `query.pagination`, `meta.requestedSchemas`, `query.testMode` and the "
        "datasets to list (`requestParameters.datasetIds`, `requestParameters.datasets`, "
        "`query.datasets.datasetIds`) are read; no other request parameter is taken (400).",
        required=False,
    )
    listing_errors = {
        **errors({400: None, 401: "The Authorization header is malformed or the key is invalid or revoked.",
                  403: "A named dataset does not exist or is not available to the caller's tier."}),
        **rate,
        **errors({503: "The privacy ledger is unavailable (only when a key is sent)."}),
    }  # fmt: skip

    def listed(operation_id: str, summary: str, schema: str, description: str) -> dict:
        page = {"200": ok(summary, schema), **listing_errors}
        get = operation(operation_id, "framework", summary, page, description=description,
                        security=[{}, *BEARER], parameters=listing)  # fmt: skip
        post = operation(operation_id + "Post", "framework", summary, {**page, **errors({413: None})},
                         description=description, security=[{}, *BEARER], body=listing_body)  # fmt: skip
        return {"get": get, "post": post}

    datasets = listed(
        "listDatasets",
        "The datasets the caller may query, with their published privacy parameters",
        "DatasetsResponse",
        "No key needed; with a researcher key the datasets of the caller's tier are listed too. An admin "
        "key counts as anonymous here. Paged by skip/limit (pages of `limit`); `numTotalResults` counts "
        "every dataset listed.",
    )
    terms = listed(
        "getFilteringTerms",
        "What a researcher can ask by: dataset attributes, probe platforms and genes",
        "FilteringTermsResponse",
        "Of the datasets the caller may see. Queries take no Beacon filters (refused, named); these terms "
        "say what the request parameters (`geneId`) and the datasets' attributes can be. Paged by "
        "skip/limit; `info.numTotalResults` counts every term.",
    )
    schema_doc = operation(
        "getResultSchema",
        "framework",
        "The JSON Schema of what an entry type returns (named by /entry_types)",
        {"200": ok("A JSON Schema (draft 2020-12).", {"type": "object"}), **errors({404: None}), **rate},
        parameters=[path("name", "The entry type: methylation or dataset.")],
    )
    one = operation(
        "getDataset",
        "framework",
        "One dataset the caller may query, with its published privacy parameters",
        {
            "200": ok("The dataset, as /datasets lists it.", "DatasetsResponse"),
            **errors(
                {
                    401: "The Authorization header is malformed or the key is invalid or revoked.",
                    403: "The dataset does not exist or is not available to the caller's tier (one "
                    "answer for both).",
                }
            ),
            **rate,
            **errors({503: "The privacy ledger is unavailable (only when a key is sent)."}),
        },
        description="No key needed for a PUBLIC dataset; as /datasets, an admin key counts as anonymous.",
        security=[{}, *BEARER],
        parameters=[path("dataset", "The dataset id (see /datasets).")],
    )
    return {
        "/": info("getRoot", "Beacon information (same as /info)", "InfoResponse"),
        "/info": info("getInfo", "Beacon information", "InfoResponse"),
        "/service-info": info("getServiceInfo", "GA4GH service-info", "ServiceInfo"),
        "/configuration": info("getConfiguration", "Beacon configuration", "ConfigurationResponse"),
        "/map": info("getMap", "Beacon map of endpoints", "MapResponse"),
        "/entry_types": info("getEntryTypes", "Entry types", "EntryTypesResponse"),
        "/filtering_terms": terms,
        "/schemas/{name}.json": {"get": schema_doc},
        "/datasets": datasets,
        "/datasets/{dataset}": {"get": one},
    }


# What a GET parameter means where the query string says it differently from the body's field.
_GET_PROSE = {
    "probeId": "The CpG probe (or referenceName + start, or geneId).",
    "referenceName": "Chromosome, with start (+ end), instead of probeId: the probes there, each one query.",
    "start": "0-based CpG position, with referenceName (alone: one base).",
    "end": "With referenceName + start: end of the 0-based half-open region [start, end).",
    "datasetIds": "Comma-separated dataset ids (default: every dataset available to the caller).",
    "testMode": "Beacon testMode flag (`true` or `1`).",
    "skip": "Beacon pagination: pages to skip. Validated and echoed; no records are returned, so it "
    "changes no answer.",
    "limit": "Beacon pagination: page size (0: all). Validated and echoed; no records are returned, so "
    "it changes no answer.",
}


_ANSWERS = (
    "Each (query, dataset) pair is answered by SVT²: either from the public prior (`answeredFrom: prior`, "
    "free) or from the data (`answeredFrom: data`, spending one of the budget holder's c positives). "
    "An identical query asked again returns the identical cached answer for free (`cached: true`). "
    "When the positives are spent, a dataset with `onExhausted = refuse` refuses (429, or "
    "`answeredFrom: refused` for the rest of a batch that ran out part-way), one with `prior` answers "
    "from the prior. A result set's `exists` is the answer (no records are returned); its "
    "`resultsCount`, marked `countPrecision: imprecise`, is the noisy count at count granularity, else "
    "the dataset's public threshold T for a yes and 0 for a no. Filters are refused (see "
    "/filtering_terms for what can be asked); `skip`/`limit`, `testMode` and `requestedSchemas` are "
    "echoed in `receivedRequestSummary` with the filters and the queries as answered. A request that "
    "names no query is answered from public metadata (each dataset's size), free."
)


def _methylation_paths(config: ServiceConfig, rate: dict) -> dict:
    security = BEARER + ([{}] if config.anonymous == "shared" else [])
    key_401 = (
        "Missing key (this beacon requires one), malformed Authorization header, or invalid/revoked key."
        if config.anonymous != "shared"
        else "Malformed Authorization header, or invalid/revoked key."
    )
    forbidden = "An admin key (admin keys cannot query data), or a dataset that does not exist or is not "
    forbidden += "available to the caller's tier."
    refusals = errors({401: key_401, 403: forbidden})
    exhausted = "Rate limit exceeded (with `Retry-After`), or the privacy budget of a dataset is exhausted "
    exhausted += "and its policy refuses (no `Retry-After`; `info` names the dataset and its budget)."
    too_many = errors({429: exhausted, 503: None})
    answers = ok("Answers, with their provenance and the budgets after the request.", "MethylationResponse")
    bad_get = "Invalid or unknown query parameter, no probe (or both a probe and a position), minValue "
    bad_get += "greater than maxValue, filters, or skip/limit out of bounds; a region or gene that no "
    bad_get += "dataset's annotation resolves, of another assemblyId, or of more probes than allowed."
    bad_post = "The body is not JSON (or not sent as application/json), does not validate (filters "
    bad_post += f"included), or holds an empty batch or more than {config.max_batch} queries."
    get = operation(
        "queryMethylationGet",
        "methylation",
        "Ask one methylation range query",
        {"200": answers, **errors({400: bad_get}), **refusals, **too_many},
        description=_ANSWERS,
        security=security,
        parameters=query_string_parameters(_GET_PROSE),
    )
    post = operation(
        "queryMethylationPost",
        "methylation",
        "Ask one methylation query or a batch (Beacon v2 request body)",
        {
            "200": answers,
            **errors({400: bad_post}),
            **refusals,
            **errors({413: f"The body is larger than {config.max_body_bytes} bytes."}),
            **too_many,
        },
        description=_ANSWERS + " A batch is answered in order, in one transaction; each result set carries "
        "its `queryIndex`.",
        security=security,
        body=json_body("BeaconRequestBody", "The Beacon v2 request body."),
    )
    budget = operation(
        "getBudget",
        "methylation",
        "The caller's privacy budget on every dataset they may query",
        {
            "200": ok("Budgets (an account not opened yet shows its full budget).", "BudgetResponse"),
            **errors({401: key_401, 403: "An admin key (admin keys have no budget)."}),
            **rate,
            **errors({503: None}),
        },
        security=security,
    )
    dataset = path("dataset", "The dataset to ask (see /datasets).")
    one_get = {**get, "operationId": "queryDatasetMethylationGet", "summary": "Ask one dataset one "
               "methylation range query", "parameters": [dataset, *get["parameters"]]}  # fmt: skip
    one_post = {**post, "operationId": "queryDatasetMethylationPost", "summary": "Ask one dataset one "
                "methylation query or a batch", "parameters": [dataset]}  # fmt: skip
    one_description = (
        " The same as /methylation with `datasetIds` set to this dataset (the same answers, the same "
        "cache); a query's own `datasetIds` may only name this dataset."
    )
    one_get["description"] = get["description"] + one_description
    one_post["description"] = post["description"] + one_description
    return {
        "/methylation": {"get": get, "post": post},
        "/datasets/{dataset}/methylation": {"get": one_get, "post": one_post},
        "/budget": {"get": budget},
    }


def _docs_paths(rate: dict) -> dict:
    document = ok("The OpenAPI document.", {"type": "object"})
    page = ok("An HTML page.", {"type": "string"}, media="text/html")
    guide = "The researcher page: ask questions, see the prior, the answer, its source and the budget"
    dataset = query("datasetId", {"type": "string"}, "A dataset the caller may query (see /datasets).")
    no_key = errors(
        {401: "The Authorization header is malformed or the key is invalid or revoked.",
         503: "The privacy ledger is unavailable (only when a key is sent)."}
    )  # fmt: skip
    refused = errors({400: "A parameter is missing, malformed or unknown; `errorMessage` names it.",
                      403: "The dataset does not exist or is not available to the caller."})  # fmt: skip
    curve = {"type": "object", "required": ["datasetId", "probeId", "edges", "probabilities", "range"]}
    prior = operation(
        "getPriorCurve",
        "docs",
        "The public prior of one probe (binned on [0, 1]) and its probability of [minValue, maxValue]",
        {"200": ok("The prior's bins and range; no cohort data.", curve), **refused, **no_key, **rate},
        description="What the dataset's SVT² compares the data with: public, free, no budget spent. A probe "
        "the prior lacks is answered by the uniform prior (`model: uniform`).",
        security=[{}, *BEARER],
        parameters=[
            dataset,
            query("probeId", {"type": "string"}, "A probe of the dataset."),
            query("minValue", {"type": "number", "minimum": 0, "maximum": 1}, "Lower bound (default 0)."),
            query("maxValue", {"type": "number", "minimum": 0, "maximum": 1}, "Upper bound (default 1)."),
        ],
    )
    probes = operation(
        "getProbeSuggestions",
        "docs",
        "Probe ids of a dataset starting with a prefix (the probe list is public)",
        {"200": ok("Up to 20 probe ids, sorted.", {"type": "object"}), **refused, **no_key, **rate},
        security=[{}, *BEARER],
        parameters=[dataset, query("prefix", {"type": "string"}, "The start of the probe ids.")],
    )
    asset = path("asset", "`swagger-ui.css`, `swagger-ui-bundle.js`, `reference.js` or `reference.css`.")
    file = ok("The file.", {"type": "string"}, media="text/javascript")
    file["content"]["text/css"] = {"schema": {"type": "string"}}
    files = {"200": file, **errors({404: None}), **rate}
    return {
        "/openapi.json": {
            "get": operation("getOpenApi", "docs", "This OpenAPI 3.1 document", {"200": document, **rate})
        },
        "/docs": {"get": operation("getDocs", "docs", guide, {"200": page, **rate})},
        "/prior": {"get": prior},
        "/prior/probes": {"get": probes},
        "/reference": {
            "get": operation("getReference", "docs", "This document in Swagger UI", {"200": page, **rate})
        },
        "/reference/{asset}": {
            "get": operation(
                "getReferenceAsset", "docs", "A file of the API reference page", files, parameters=[asset]
            )
        },
    }


_DESCRIPTION = """\
A privacy-preserving GA4GH Beacon v2 for DNA methylation. A query asks whether a dataset has at least
T patients whose beta value at a CpG probe lies in [minValue, maxValue]; every answer is sanitised by
SVT² against a public prior and charged to the caller's privacy budget (see `/methylation`).

Authentication: `Authorization: Bearer <API key>`, or `Bearer <OIDC access token>` from a provider
the beacon trusts. Researcher keys and tokens query data; admin keys use the admin API only. Every
`/api` request counts against a per-key (or per-address) rate limit of {rate} requests a minute (429
with `Retry-After`). Every response carries `X-Request-ID` (a client's own `X-Request-ID` request
header is echoed). Errors are Beacon error responses.

Outside `/api`, at the server root: `GET /livez` (liveness, `{{"status": "ok"}}`), `GET /readyz`
(readiness: 200, or 503 naming the failing part) and `GET /metrics` (Prometheus text; {metrics}).
"""

_TAGS = {
    "framework": "Beacon v2 framework endpoints (informational).",
    "methylation": "Methylation queries and the caller's budget.",
    "docs": "This document, the researcher page (with the public prior of a probe) and the API reference.",
    "admin": "Users, budgets and the audit log (admin keys only).",
}


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
    rate = errors({429: None}) if config.rate_limit_per_minute > 0 else {}
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
        "tags": [{"name": name, "description": text} for name, text in _TAGS.items()],
        "paths": {
            **_framework_paths(rate),
            **_methylation_paths(config, rate),
            **_docs_paths(rate),
            **admin_paths(rate),
        },
        "components": components(config.max_batch),
    }

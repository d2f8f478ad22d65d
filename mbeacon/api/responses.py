"""Beacon v2 response envelopes: meta sections, result sets and the error body.

Everything here is shaped by the GA4GH Beacon v2 framework schemas (``beacon-v2/framework/json``) and
described by the schema-only models of :mod:`mbeacon.api.schemas` (from which the OpenAPI document is
generated); the builders here stay plain dict code because they are the hot path of every answer.
``tests/test_api_schemas.py`` validates every endpoint's responses, errors included, against both.
"""

from __future__ import annotations

from typing import Any

from flask import current_app, jsonify
from flask.wrappers import Response

from mbeacon.beacon.answers import AnswerSet
from mbeacon.beacon.query import MethylationQuery, ParsedRequest
from mbeacon.beacon.wire import (
    API_VERSION,
    DEFAULT_GRANULARITY,
    DEFAULT_LIMIT,
    DEFAULT_SKIP,
    ENTRY_TYPE,
    METHYLATION_SCHEMA_ID,
)

METHYLATION_SCHEMA = {"entityType": ENTRY_TYPE, "schema": METHYLATION_SCHEMA_ID}
IMPRECISE, EXACT = "imprecise", "exact"
"""Beacon v2.2 ``countPrecision``: a noisy count (or an answer's meaning) / a public exact count."""


def beacon_id() -> str:
    return current_app.config["MBEACON"].config.beacon_id


def informational_meta(schemas: list[dict] | None = None) -> dict:
    return {"beaconId": beacon_id(), "apiVersion": API_VERSION, "returnedSchemas": schemas or []}


def request_summary(
    granularity: str = DEFAULT_GRANULARITY,
    include: str | None = None,
    api_version: str = API_VERSION,
    *,
    skip: int = DEFAULT_SKIP,
    limit: int = DEFAULT_LIMIT,
    parameters: dict | None = None,
    schemas: list[dict] | tuple[dict, ...] = (),
    test_mode: bool = False,
) -> dict:
    """Beacon `receivedRequestSummary`: the request as the beacon understood it.

    ``filters`` is always the empty list: a request with filters is refused, so every request
    answered had none. ``parameters`` is the ``requestParameters`` echo (:func:`echo_parameters`);
    ``schemas`` the ``requestedSchemas`` and ``test_mode`` the ``testMode`` of the request.
    """
    summary: dict[str, Any] = {
        "apiVersion": api_version,
        "requestedSchemas": list(schemas),
        "filters": [],
        "pagination": {"skip": skip, "limit": limit},
        "requestedGranularity": granularity,
    }
    if include is not None:
        summary["includeResultsetResponses"] = include
    if parameters is not None:
        summary["requestParameters"] = parameters
    if test_mode:
        summary["testMode"] = True
    return summary


def _canonical(query: MethylationQuery) -> dict:
    """The query as answered: its canonical description, with ``datasetIds`` when they were named."""
    echo = query.describe()
    if query.datasets is not None:
        echo["datasetIds"] = list(query.datasets)
    return echo


def echo_parameters(request: ParsedRequest) -> dict:
    """The ``requestParameters`` echo: each query in its canonical form (so every spelling of one
    question gets one response), under the entry type's name.

    The framework schema of this echo is an object whose values are objects, so one query is
    ``{"methylation": {...}}`` and a batch ``{"methylation": {"queries": [{...}, ...]}}`` (in order,
    as ``queryIndex`` counts them), not the list a batch is sent as.
    """
    if request.batch:
        return {ENTRY_TYPE: {"queries": [_canonical(query) for query in request.queries]}}
    return {ENTRY_TYPE: _canonical(request.queries[0])}


def response_meta(returned_granularity: str, summary: dict, schemas: list[dict] | None = None) -> dict:
    """Beacon ``beaconResponseMeta``; ``testMode`` is set when the request was a test-mode one."""
    meta = {
        **informational_meta(schemas),
        "returnedGranularity": returned_granularity,
        "receivedRequestSummary": summary,
    }
    if summary.get("testMode"):
        meta["testMode"] = True
    return meta


def informational(response: dict, *, status: int = 200, schemas: list[dict] | None = None) -> Response:
    out = jsonify({"meta": informational_meta(schemas), "response": response})
    out.status_code = status
    return out


def error(status: int, message: str, *, info: dict | None = None, headers: dict | None = None) -> Response:
    """The Beacon error body (``beaconErrorResponse``); ``message`` must be safe to show anyone."""
    body: dict[str, Any] = {
        "meta": response_meta(DEFAULT_GRANULARITY, request_summary()),
        "error": {"errorCode": status, "errorMessage": message},
    }
    if info:
        body["info"] = info
    out = jsonify(body)
    out.status_code = status
    for name, value in (headers or {}).items():
        out.headers[name] = value
    return out


def _keep(exists: bool, answered_from: str, include: str) -> bool:
    """``includeResultsetResponses``; a refused query is neither hit nor miss and is always listed."""
    if include == "NONE":
        return False
    if include == "ALL" or answered_from == "refused":
        return True
    return exists if include == "HIT" else not exists


def methylation_response(request: ParsedRequest, result: AnswerSet, thresholds: dict[str, int]) -> dict:
    """A ``beaconResultsetsResponse``: one result set per (query, dataset), with its provenance.

    Every ``resultsCount`` is marked ``countPrecision: imprecise`` (Beacon v2.2): a count is noisy, and
    a yes/no answer claims a count only as its meaning, "at least T patients" (``resultsCount`` T, the
    dataset's public threshold ``thresholds[dataset]``) or "fewer" (0), never a record count of 0 for a
    yes.
    """
    include, queries, batch = request.include, request.queries, request.batch
    # Each result set is a copy of its dataset's template, keys already in their order, with its own
    # values set: copying a dict is cheaper than building it key by key, and a batch lists up to
    # max_batch x datasets result sets.
    templates: dict[str, tuple[dict, dict]] = {}
    for dataset, budget in result.budgets.items():
        info = dict.fromkeys(("answeredFrom", "cached", "probeId", "range"))
        info.update(budget)
        outer = {"id": dataset, "setType": "dataset", "exists": None, "resultsCount": 0,
                 "countPrecision": IMPRECISE, "results": None}  # fmt: skip
        templates[dataset] = (outer, info)
    result_sets = []
    append = result_sets.append
    for answer in result.answers:
        if include != "ALL" and not _keep(answer.exists, answer.answered_from, include):
            continue
        query = queries[answer.query_index]
        outer, info = templates[answer.dataset]
        info = info.copy()
        info["answeredFrom"] = answer.answered_from
        info["cached"] = answer.cached
        info["probeId"] = answer.probe
        info["range"] = [query.lo, query.hi]
        if answer.exhausted:
            info["budgetExhausted"] = True
        if batch:
            info["queryIndex"] = answer.query_index
        result_set = outer.copy()
        result_set["exists"] = answer.exists
        if answer.count is not None:
            result_set["resultsCount"] = answer.count
        elif answer.exists:
            result_set["resultsCount"] = thresholds[answer.dataset]
        result_set["results"] = []
        result_set["info"] = info
        append(result_set)
    summary: dict[str, Any] = {"exists": any(a.exists for a in result.answers)}
    # a total of patients over datasets; not over several probes of one region or gene (a patient would
    # be counted once per probe), so those give none, as a batch gives none
    answers = result.answers
    one_each = len({a.dataset for a in answers}) == len(answers)
    if not request.batch and one_each and answers:
        summary["numTotalResults"] = sum(
            a.count if a.count is not None else thresholds[a.dataset] if a.exists else 0 for a in answers
        )
        summary["countPrecision"] = IMPRECISE
    return {
        "meta": response_meta(
            result.granularity,
            request_summary(
                request.granularity,
                request.include,
                request.api_version,
                skip=request.skip,
                limit=request.limit,
                parameters=echo_parameters(request),
                schemas=request.requested_schemas,
                test_mode=request.test_mode,
            ),
            [METHYLATION_SCHEMA],
        ),
        "responseSummary": summary,
        "response": {"resultSets": result_sets},
        "info": {
            "budgets": result.budgets,
            "refused": result.refused,
            # the probe queries answered and charged: a gene or region counts each of its probes
            "queries": len(request.queries) if result.queries is None else result.queries,
        },
    }


def unfiltered_response(request: ParsedRequest, patients: dict[str, int]) -> dict:
    """The answer to a request that names nothing to ask (the framework's minimal request body): a
    result set per dataset it names (or the caller may query), ``exists`` when the dataset holds
    patients, its public cohort size as an exact count. From metadata: no budget is read or spent."""
    result_sets = [
        {"id": dataset, "setType": "dataset", "exists": n > 0, "resultsCount": n, "countPrecision": EXACT,
         "results": []}
        for dataset, n in patients.items()
        if _keep(n > 0, "prior", request.include)
    ]  # fmt: skip
    summary = request_summary(request.granularity, request.include, request.api_version, skip=request.skip,
                              limit=request.limit, schemas=request.requested_schemas,
                              test_mode=request.test_mode)  # fmt: skip
    returned = "boolean" if request.granularity == "boolean" else "count"
    return {
        "meta": response_meta(returned, summary, [METHYLATION_SCHEMA]),
        "responseSummary": {
            "exists": any(n > 0 for n in patients.values()),
            "numTotalResults": sum(patients.values()),
            "countPrecision": EXACT,
        },
        "response": {"resultSets": result_sets},
        "info": {
            "budgets": {},
            "refused": 0,
            "queries": 0,
            "unfiltered": True,
            "message": "no query was named: this lists the datasets and their sizes; name a probeId, "
            "a region (referenceName, start, end) or a geneId to ask about methylation",
        },
    }

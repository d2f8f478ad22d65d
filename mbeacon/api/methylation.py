"""The methylation entry type's endpoints (GET and POST, single queries and batches): all datasets the
caller may query (``/api/methylation``) or one (``/api/datasets/{id}/methylation``); and the caller's
own budget (``GET /api/budget``).

The per-dataset route is ``/api/methylation`` with ``datasetIds=[id]``: the same parsing, the same
canonical query, so the same cache entry and the same answer, and the same 403 for a dataset the
caller may not query.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter

from flask import Blueprint, jsonify, request

from mbeacon.api import metrics
from mbeacon.api.auth import principal
from mbeacon.api.bodies import read_json_body
from mbeacon.api.responses import informational, methylation_response, unfiltered_response
from mbeacon.api.runtime import runtime
from mbeacon.beacon.answers import DatasetUnavailable
from mbeacon.beacon.query import ParsedRequest, QueryError, parse_args, parse_body
from mbeacon.beacon.request_shapes import (
    normalise_args,
    normalise_body,
    parse_unfiltered_args,
    parse_unfiltered_body,
    unfiltered,
    unfiltered_args,
)
from mbeacon.beacon.wire import DATASET_PATTERN

bp = Blueprint("methylation", __name__)


def _answer(caller, parsed):
    rt = runtime()
    if parsed.unfiltered:
        return _unfiltered(caller, parsed)
    if parsed.test_mode:  # Beacon v2 test mode: virtual answers, from the public prior, free
        result = rt.engine.answer_from_prior(caller, parsed.queries)
        thresholds = {dataset: rt.config.policy(dataset).threshold for dataset in result.budgets}
        return jsonify(methylation_response(parsed, result, thresholds))
    result = rt.engine.answer(caller, parsed.queries, parsed.granularity)
    thresholds = {dataset: rt.config.policy(dataset).threshold for dataset in result.budgets}
    for (dataset, source), count in Counter((a.dataset, a.answered_from) for a in result.answers).items():
        metrics.answers(dataset, source).inc(count)
    for dataset, spent in result.positives_spent.items():
        if spent:
            metrics.positives(dataset).inc(spent)
    if result.refused:
        metrics.REFUSALS.labels("budget_exhausted").inc(result.refused)
    return jsonify(methylation_response(parsed, result, thresholds))


def _unfiltered(caller, parsed):
    """A request that names nothing to ask: which of the datasets it names (or that the caller may
    query) the beacon holds, and their public sizes; from metadata, so nothing is spent."""
    engine = runtime().engine
    visible = engine.visible(caller)
    named = parsed.datasets
    for dataset in named or ():
        if dataset not in visible:
            raise DatasetUnavailable(f"dataset {dataset!r} does not exist or is not available to you")
    datasets = list(named) if named is not None else visible
    patients = {dataset: engine.cohort(dataset).info.patients for dataset in datasets}
    return jsonify(unfiltered_response(parsed, patients))


def parse_get() -> ParsedRequest:
    """The GET request in any of the spellings :mod:`mbeacon.beacon.request_shapes` reads."""
    args, schemas = normalise_args(request.args)
    if unfiltered_args(args):
        return parse_unfiltered_args(args, schemas)
    return dataclasses.replace(parse_args(args), requested_schemas=tuple(schemas))


def parse_post() -> ParsedRequest:
    """The POST body in any of the spellings :mod:`mbeacon.beacon.request_shapes` reads."""
    body, schemas = normalise_body(read_json_body("the Beacon request body"))
    if unfiltered(body):
        return parse_unfiltered_body(body, schemas)
    parsed = parse_body(body, max_batch=runtime().config.max_batch)
    return dataclasses.replace(parsed, requested_schemas=tuple(schemas))


@bp.get("/methylation")
def methylation_get():
    caller = principal(for_query=True)  # authenticate first: no validation details to strangers
    return _answer(caller, parse_get())


@bp.post("/methylation")
def methylation_post():
    caller = principal(for_query=True)
    return _answer(caller, parse_post())


def _one_dataset(dataset: str, parsed: ParsedRequest, where: str) -> ParsedRequest:
    """``parsed`` asked of ``dataset`` only: a query's own ``datasetIds`` may only repeat it."""
    if not re.fullmatch(DATASET_PATTERN, dataset):
        raise QueryError(f"datasetId (path): not a dataset id: {dataset[:70]!r}")
    only = (dataset,)
    if parsed.unfiltered:
        if parsed.datasets not in (None, only):
            raise QueryError(f"datasetIds: this route asks dataset {dataset!r} only; leave datasetIds out")
        return dataclasses.replace(parsed, datasets=only)
    for i, query in enumerate(parsed.queries):
        if query.datasets not in (None, only):
            field = f"{where}[{i}].datasetIds" if parsed.batch else f"{where}.datasetIds".lstrip(".")
            raise QueryError(f"{field}: this route asks dataset {dataset!r} only; leave datasetIds out")
    queries = [dataclasses.replace(query, datasets=only) for query in parsed.queries]
    return dataclasses.replace(parsed, queries=queries)


@bp.get("/datasets/<dataset>/methylation")
def dataset_methylation_get(dataset: str):
    caller = principal(for_query=True)
    return _answer(caller, _one_dataset(dataset, parse_get(), ""))


@bp.post("/datasets/<dataset>/methylation")
def dataset_methylation_post(dataset: str):
    caller = principal(for_query=True)
    return _answer(caller, _one_dataset(dataset, parse_post(), "query.requestParameters"))


@bp.get("/budget")
def budget():
    """The caller's budget on every dataset they may query (thresholds never leave the ledger)."""
    rt = runtime()
    caller = principal(for_query=True)
    budgets = {}
    for dataset in rt.engine.visible(caller):
        policy = rt.config.policy(dataset)
        budgets[dataset] = {
            "budgetHolder": caller.budget_holder(policy.scope),
            "scope": policy.scope,
            "onExhausted": policy.on_exhausted,
            **rt.engine.budget_of(caller, dataset),
        }
    return informational({"user": caller.name, "tier": caller.tier, "budgets": budgets})

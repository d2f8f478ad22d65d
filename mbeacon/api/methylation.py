"""The methylation entry type's endpoint (GET and POST, single queries and batches) and the
caller's own budget (``GET /api/budget``)."""

from __future__ import annotations

from collections import Counter

from flask import Blueprint, jsonify, request

from mbeacon.api import metrics
from mbeacon.api.auth import principal
from mbeacon.api.bodies import read_json_body
from mbeacon.api.responses import informational, methylation_response
from mbeacon.api.runtime import runtime
from mbeacon.beacon.query import parse_args, parse_body

bp = Blueprint("methylation", __name__)


def _answer(caller, parsed):
    rt = runtime()
    if parsed.test_mode:  # Beacon v2 test mode: virtual answers, from the public prior, free
        return jsonify(methylation_response(parsed, rt.engine.answer_from_prior(caller, parsed.queries)))
    result = rt.engine.answer(caller, parsed.queries, parsed.granularity)
    for (dataset, source), count in Counter((a.dataset, a.answered_from) for a in result.answers).items():
        metrics.answers(dataset, source).inc(count)
    for dataset, spent in result.positives_spent.items():
        if spent:
            metrics.positives(dataset).inc(spent)
    if result.refused:
        metrics.REFUSALS.labels("budget_exhausted").inc(result.refused)
    return jsonify(methylation_response(parsed, result))


@bp.get("/methylation")
def methylation_get():
    caller = principal(for_query=True)  # authenticate first: no validation details to strangers
    return _answer(caller, parse_args(request.args))


@bp.post("/methylation")
def methylation_post():
    caller = principal(for_query=True)
    body = read_json_body("the Beacon request body")
    return _answer(caller, parse_body(body, max_batch=runtime().config.max_batch))


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

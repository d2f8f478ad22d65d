"""``methylation_response`` builds each result set from a per-dataset template; the document must be
the one built key by key (the reference below, the function as it was): same keys, order and values.
And it must be what the schema-only model of the OpenAPI document (``schemas.MethylationResponse``)
describes, for every shape of answer.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from beacon_schemas import conforms, validate
from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mbeacon.api import schemas
from mbeacon.api.responses import (
    METHYLATION_SCHEMA,
    _keep,
    methylation_response,
    response_meta,
)
from mbeacon.beacon.answers import Answer, AnswerSet
from mbeacon.beacon.query import MethylationQuery, ParsedRequest
from mbeacon.beacon.wire import MAX_LIMIT, MAX_SKIP

_APP = Flask(__name__)
_APP.config["MBEACON"] = SimpleNamespace(config=SimpleNamespace(beacon_id="org.example.beacon"))


def echoed(query: MethylationQuery) -> dict:
    """A query's ``requestParameters`` echo, written out field by field."""
    if query.probe is not None:
        echo: dict[str, Any] = {"probeId": query.probe}
    else:
        echo = {"referenceName": query.chromosome, "start": query.start}
    echo.update(minValue=query.lo, maxValue=query.hi)
    if query.datasets is not None:
        echo["datasetIds"] = list(query.datasets)
    return echo


DATASETS = ["demo-cohort", "controlled-cohort", "third"]
THRESHOLDS = {dataset: 3 + i for i, dataset in enumerate(DATASETS)}


def told(answer: Answer) -> int:
    """The patients an answer tells: its noisy count, else T for a yes and 0 for a no."""
    if answer.count is not None:
        return answer.count
    return THRESHOLDS[answer.dataset] if answer.exists else 0


def reference(request: ParsedRequest, result: AnswerSet) -> dict:
    """The response built key by key, one dict literal per result set."""
    result_sets = []
    for answer in result.answers:
        if not _keep(answer.exists, answer.answered_from, request.include):
            continue
        query = request.queries[answer.query_index]
        info: dict[str, Any] = {
            "answeredFrom": answer.answered_from,
            "cached": answer.cached,
            "probeId": answer.probe,
            "range": [query.lo, query.hi],
            **result.budgets[answer.dataset],
        }
        if answer.exhausted:
            info["budgetExhausted"] = True
        if request.batch:
            info["queryIndex"] = answer.query_index
        result_sets.append(
            {
                "id": answer.dataset,
                "setType": "dataset",
                "exists": answer.exists,
                "resultsCount": told(answer),
                "countPrecision": "imprecise",
                "results": [],
                "info": info,
            }
        )
    summary: dict[str, Any] = {"exists": any(a.exists for a in result.answers)}
    several_probes = len({a.dataset for a in result.answers}) < len(result.answers)  # a region or gene
    if not request.batch and not several_probes and result.answers:
        summary["numTotalResults"] = sum(told(a) for a in result.answers)
        summary["countPrecision"] = "imprecise"
    received: dict[str, Any] = {
        "apiVersion": request.api_version,
        "requestedSchemas": list(request.requested_schemas),
        "filters": [],
        "pagination": {"skip": request.skip, "limit": request.limit},
        "requestedGranularity": request.granularity,
        "includeResultsetResponses": request.include,
        "requestParameters": {
            "methylation": {"queries": [echoed(q) for q in request.queries]}
            if request.batch
            else echoed(request.queries[0])
        },
    }
    if request.test_mode:
        received["testMode"] = True
    return {
        "meta": response_meta(result.granularity, received, [METHYLATION_SCHEMA]),
        "responseSummary": summary,
        "response": {"resultSets": result_sets},
        "info": {"budgets": result.budgets, "refused": result.refused, "queries": len(request.queries)},
    }


budgets = st.fixed_dictionaries(
    {
        "positivesUsed": st.integers(0, 20),
        "positivesTotal": st.integers(1, 20),
        "epsilonSpent": st.floats(0, 10),
        "epsilonTotal": st.floats(0.1, 10),
        "mechanism": st.sampled_from(["svt2", "none"]),
    },
    optional={"threshold": st.integers(0, 9), "variant": st.sampled_from(["redraw", "listing"])},
)
# The budgets the engine gives: the four budget fields, or the test-mode marker.
served_budgets = st.fixed_dictionaries(
    {
        "positivesUsed": st.integers(0, 20),
        "positivesTotal": st.integers(1, 20),
        "epsilonSpent": st.floats(0, 10),
        "epsilonTotal": st.floats(1e-6, 10),
    }
) | st.just({"testMode": True})


@st.composite
def cases(draw, budgets: st.SearchStrategy[dict] = budgets) -> tuple[ParsedRequest, AnswerSet]:
    n = draw(st.integers(1, 6))
    bounds = draw(st.lists(st.tuples(st.floats(0, 0.5), st.floats(0.5, 1)), min_size=n, max_size=n))
    named = st.none() | st.lists(st.sampled_from(DATASETS), min_size=1, unique=True).map(
        lambda d: tuple(sorted(d))
    )
    queries = [
        MethylationQuery(f"cg{i:08d}", None, None, lo, hi, draw(named))
        if draw(st.booleans())
        else MethylationQuery(None, "chr1", draw(st.integers(0, 2**31 - 1)), lo, hi, draw(named))
        for i, (lo, hi) in enumerate(bounds)
    ]
    datasets = draw(st.lists(st.sampled_from(DATASETS), min_size=1, max_size=3, unique=True))
    answers = [
        Answer(
            i,
            dataset,
            draw(st.none() | st.just(queries[i].probe)),
            draw(st.booleans()),
            draw(st.sampled_from(["prior", "data", "refused"])),
            draw(st.none() | st.integers(0, 100)),
            draw(st.booleans()),
            draw(st.booleans()),
        )
        for i in range(n)
        for dataset in datasets
        if draw(st.integers(0, 5))
    ]
    request = ParsedRequest(
        queries,
        draw(st.sampled_from(["boolean", "count", "record"])),
        draw(st.sampled_from(["ALL", "HIT", "MISS", "NONE"])),
        draw(st.booleans()),
        draw(st.sampled_from(["v2.0.0", "v2.1"])),
        draw(st.booleans()),
        draw(st.integers(0, MAX_SKIP)),
        draw(st.integers(0, MAX_LIMIT)),
        draw(st.sampled_from([(), ({"entityType": "methylation", "schema": "x"},), ({"schema": "y"},)])),
    )
    result = AnswerSet(
        answers,
        {d: draw(budgets) for d in datasets},
        draw(st.sampled_from(["boolean", "count"])),
        refused=draw(st.integers(0, 3)),
    )
    return request, result


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_the_response_is_the_one_built_key_by_key(case) -> None:
    request, result = case
    with _APP.app_context():
        ours, expected = methylation_response(request, result, THRESHOLDS), reference(request, result)
    assert json.dumps(ours) == json.dumps(expected)  # keys, their order and values
    assert ours == expected


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(served_budgets))
def test_the_response_conforms_to_its_model(case) -> None:
    request, result = case
    with _APP.app_context():
        document = methylation_response(request, result, THRESHOLDS)
    conforms(document, schemas.MethylationResponse)
    validate(document, "responses/beaconResultsetsResponse.json")  # the echoes included


def test_result_sets_share_no_mutable_part() -> None:
    queries = [
        MethylationQuery("cg1", None, None, 0.1, 0.2, None),
        MethylationQuery("cg2", None, None, 0.3, 0.4, None),
    ]
    budget = {"positivesUsed": 1, "positivesTotal": 5, "epsilonSpent": 0.1, "epsilonTotal": 1.0}
    answers = [Answer(i, "d", q.probe, True, "data", None) for i, q in enumerate(queries)]
    request = ParsedRequest(queries, "boolean", "ALL", True)
    with _APP.app_context():
        document = methylation_response(request, AnswerSet(answers, {"d": budget}, "boolean"), {"d": 2})
    first, second = document["response"]["resultSets"]
    assert first is not second and first["info"] is not second["info"]
    assert first["results"] is not second["results"]
    first["info"]["positivesUsed"] = 99
    first["results"].append("x")
    assert second["info"]["positivesUsed"] == 1 and second["results"] == [] and budget["positivesUsed"] == 1
    assert (first["info"]["queryIndex"], second["info"]["queryIndex"]) == (0, 1)
    assert (first["info"]["range"], second["info"]["range"]) == ([0.1, 0.2], [0.3, 0.4])

"""Beacon v2 conventions (issue 17, item 5), against a real ``mbeacon serve`` (gunicorn) over HTTP:

* ``/api/datasets/{id}`` and ``/api/datasets/{id}/methylation``: the latter is ``/api/methylation``
  with ``datasetIds=[id]``, so the two routes share one cache entry per question, and a dataset the
  caller may not see gets the same 403;
* filters are refused on GET (``filters``) and POST (``query.filters``) alike with a 400 that names
  them, spending nothing; an empty list is accepted;
* ``skip``/``limit`` are validated (GET and POST the same bounds) and echoed as ``pagination``;
  ``requestParameters`` (canonical) and ``filters`` are echoed in ``receivedRequestSummary``;
* a yes tells its meaning as a count (``resultsCount`` T, never 0), marked ``countPrecision: imprecise``;
* CORS: the configured origins only, a preflight answered, no credentials, never on the admin API.

Every 200 and every error is validated against the official Beacon v2 schemas. The parsers' rules for
``skip``/``limit`` and ``filters`` are property-tested in process (hypothesis).
"""

from __future__ import annotations

import json
import shutil

import httpx
import pytest
from beacon_schemas import validate
from hypothesis import given, settings
from hypothesis import strategies as st
from servers import BeaconServer

from mbeacon.beacon.config import ConfigError, ServiceConfig, load_config
from mbeacon.beacon.ledger import Ledger
from mbeacon.beacon.query import QueryError, parse_args, parse_body
from mbeacon.beacon.wire import DEFAULT_LIMIT, DEFAULT_SKIP, MAX_LIMIT, MAX_SKIP
from mbeacon.store.cohorts import CohortStore
from mbeacon.store.demo import DEMO_DATASET, ensure_demo

PROBE = "cg00000029"  # a probe id (the parsers do not look it up)
ALLOWED = "https://ui.example.org"
OTHER = "https://evil.example.com"
RESULTSETS = "responses/beaconResultsetsResponse.json"
COLLECTIONS = "responses/beaconCollectionsResponse.json"
ERROR = "responses/beaconErrorResponse.json"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A gunicorn server (1 worker x 2 threads) on a copy of the demo store, CORS for ``ALLOWED``:
    (server, researcher key, admin key, a probe of the demo cohort)."""
    tmp = tmp_path_factory.mktemp("conventions")
    demo = ensure_demo(tmp_path_factory.getbasetemp() / "demo-store")
    store = tmp / "store"
    shutil.copytree(demo.store, store)
    url = f"sqlite:///{tmp}/ledger.sqlite3"
    ledger = Ledger.open(url)
    key, admin = ledger.add_user("alice"), ledger.add_user("ops", role="admin")
    ledger.close()
    config = tmp / "beacon.toml"
    config.write_text(
        f"store = {json.dumps(str(store))}\n"
        f"database_url = {json.dumps(url)}\n"
        f"default_prior = {json.dumps(demo.prior)}\n"
        "rate_limit_per_minute = 0\n"
        f"cors_origins = [{json.dumps(ALLOWED)}]\n"
        "[defaults]\nc = 1000\nepsilon = 5.0\n"
    )
    probe = str(CohortStore(store).open(DEMO_DATASET).probe_ids[0])
    with BeaconServer(config, tmp, workers=1, threads=2) as running:
        yield running, key, admin, probe


def _get(server, path: str, key: str | None = None, **kwargs) -> httpx.Response:
    running = server[0]
    headers = {**kwargs.pop("headers", {}), **({"Authorization": f"Bearer {key}"} if key else {})}
    return httpx.get(running.url + path, headers=headers, timeout=30, **kwargs)


def _post(server, path: str, key: str | None, body: dict, **kwargs) -> httpx.Response:
    running = server[0]
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(running.url + path, json=body, headers=headers, timeout=30, **kwargs)


def _budget(server) -> dict:
    response = _get(server, "/api/budget", server[1])
    assert response.status_code == 200, response.text
    return response.json()["response"]["budgets"]


def _refused(response: httpx.Response, status: int, field: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    validate(body, ERROR)
    message = body["error"]["errorMessage"]
    assert field in message, message
    return message


def _answer(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    body = response.json()
    validate(body, RESULTSETS)
    return body


def _body(parameters, **query) -> dict:
    return {"meta": {"apiVersion": "v2.0.0"}, "query": {"requestParameters": parameters, **query}}


# --- the dataset routes ----------------------------------------------------------------------------


def test_one_dataset_is_the_collection_datasets_lists(server) -> None:
    key = server[1]
    listed = _get(server, "/api/datasets", key).json()["response"]["collections"]
    response = _get(server, f"/api/datasets/{DEMO_DATASET}", key)
    assert response.status_code == 200, response.text
    validate(response.json(), COLLECTIONS)
    assert response.json()["response"]["collections"] == [c for c in listed if c["id"] == DEMO_DATASET]
    assert response.json()["responseSummary"] == {"exists": True, "numTotalResults": 1}


def test_a_dataset_the_caller_may_not_see_is_the_403_of_a_query(server) -> None:
    probe = server[3]
    key = server[1]
    before = _budget(server)
    query = _get(server, "/api/methylation", key, params={"probeId": probe, "datasetIds": "no-such-cohort"})
    message = _refused(query, 403, "no-such-cohort")
    assert _refused(_get(server, "/api/datasets/no-such-cohort", key), 403, "no-such-cohort") == message
    one = _get(server, "/api/datasets/no-such-cohort/methylation", key, params={"probeId": probe})
    assert _refused(one, 403, "no-such-cohort") == message
    posted = _post(server, "/api/datasets/no-such-cohort/methylation", key, _body({"probeId": probe}))
    assert _refused(posted, 403, "no-such-cohort") == message
    # anonymous callers see PUBLIC datasets only; the demo is REGISTERED: the same words as a stranger's id
    hidden = _refused(_get(server, f"/api/datasets/{DEMO_DATASET}"), 403, DEMO_DATASET)
    assert hidden == message.replace("no-such-cohort", DEMO_DATASET)
    assert _budget(server) == before


def test_the_dataset_route_and_datasetids_are_one_question(server) -> None:
    probe = server[3]
    key = server[1]
    params = {"probeId": probe, "minValue": "0.35", "maxValue": "0.9", "includeResultsetResponses": "ALL"}
    item = {"probeId": probe, "minValue": 0.35, "maxValue": 0.9}
    first = _answer(_get(server, f"/api/datasets/{DEMO_DATASET}/methylation", key, params=params))
    spent = _budget(server)[DEMO_DATASET]["positivesUsed"]
    again = [
        _get(server, "/api/methylation", key, params={**params, "datasetIds": DEMO_DATASET}),
        _post(server, "/api/methylation", key,
              _body({**item, "datasetIds": [DEMO_DATASET]}, includeResultsetResponses="ALL")),
        _post(server, f"/api/datasets/{DEMO_DATASET}/methylation", key,
              _body(item, includeResultsetResponses="ALL")),
        _get(server, f"/api/datasets/{DEMO_DATASET}/methylation", key,
             params={**params, "datasetIds": DEMO_DATASET}),
    ]  # fmt: skip
    (answer,) = first["response"]["resultSets"]
    assert answer["id"] == DEMO_DATASET and answer["info"]["cached"] is False
    for response in again:
        body = _answer(response)
        (repeat,) = body["response"]["resultSets"]
        assert repeat["info"]["cached"] is True
        assert {**repeat, "info": {**repeat["info"], "cached": False}} == answer
        assert body["meta"]["receivedRequestSummary"] == first["meta"]["receivedRequestSummary"]
    assert _budget(server)[DEMO_DATASET]["positivesUsed"] == spent  # the repeats were free


def test_the_dataset_route_refuses_other_datasetids(server) -> None:
    probe = server[3]
    key = server[1]
    before = _budget(server)
    path = f"/api/datasets/{DEMO_DATASET}/methylation"
    _refused(_get(server, path, key, params={"probeId": probe, "datasetIds": "other"}), 400, "datasetIds")
    batch = [{"probeId": probe}, {"probeId": probe, "datasetIds": [DEMO_DATASET, "other"]}]
    _refused(_post(server, path, key, _body(batch)), 400, "query.requestParameters[1].datasetIds")
    _refused(
        _get(server, "/api/datasets/bad%20id/methylation", key, params={"probeId": probe}), 400, "bad id"
    )
    assert _budget(server) == before


# --- filters, pagination and the echo --------------------------------------------------------------


def test_filters_are_refused_on_get_and_post_and_cost_nothing(server) -> None:
    probe = server[3]
    key = server[1]
    before = _budget(server)
    get = _get(server, "/api/methylation", key, params={"probeId": probe, "filters": "NCIT:C3262"})
    post = _post(server, "/api/methylation", key, _body({"probeId": probe}, filters=[{"id": "NCIT:C3262"}]))
    one = _post(server, f"/api/datasets/{DEMO_DATASET}/methylation", key,
                _body({"probeId": probe}, filters=["NCIT:C3262"]))  # fmt: skip
    get_text = _refused(get, 400, "filters")
    assert _refused(post, 400, "query.filters") == _refused(one, 400, "query.filters")
    assert get_text.split(": ", 1)[1] == _refused(post, 400, "filters").split(": ", 1)[1]  # one reason
    assert "/api/filtering_terms" in get_text
    assert _budget(server) == before
    terms = _get(server, "/api/filtering_terms").json()["response"]
    assert terms["filteringTerms"] == []
    # no filters, spelt as nothing, an empty value or an empty list: accepted, echoed as []
    for response in (
        _get(server, "/api/methylation", key, params={"probeId": probe, "filters": ""}),
        _post(server, "/api/methylation", key, _body({"probeId": probe}, filters=[])),
        _post(server, "/api/methylation", key, _body({"probeId": probe})),
    ):
        assert _answer(response)["meta"]["receivedRequestSummary"]["filters"] == []


def test_skip_and_limit_are_validated_and_echoed(server) -> None:
    probe = server[3]
    key = server[1]
    paged = {"probeId": probe, "skip": "2", "limit": "5"}
    get = _answer(_get(server, "/api/methylation", key, params=paged))
    body = _body({"probeId": probe}, pagination={"skip": 2, "limit": 5})
    post = _answer(_post(server, "/api/methylation", key, body))
    default = _answer(_get(server, "/api/methylation", key, params={"probeId": probe}))
    assert get["meta"]["receivedRequestSummary"]["pagination"] == {"skip": 2, "limit": 5}
    assert post["meta"]["receivedRequestSummary"]["pagination"] == {"skip": 2, "limit": 5}
    assert default["meta"]["receivedRequestSummary"]["pagination"] == {
        "skip": DEFAULT_SKIP,
        "limit": DEFAULT_LIMIT,
    }
    # pagination pages records, and none are returned: the answer is the same
    assert get["response"] == post["response"] == default["response"]
    before = _budget(server)
    for name, value in (("limit", "-1"), ("skip", "x"), ("limit", str(MAX_LIMIT + 1)), ("skip", "1e3")):
        _refused(_get(server, "/api/methylation", key, params={"probeId": probe, name: value}), 400, name)
    for pagination in ({"limit": -1}, {"skip": "2"}, {"limit": MAX_LIMIT + 1}, {"skip": 1.5}):
        (name,) = pagination
        response = _post(server, "/api/methylation", key, _body({"probeId": probe}, pagination=pagination))
        _refused(response, 400, f"query.pagination.{name}")
    assert _budget(server) == before


def test_request_parameters_are_echoed_as_answered(server) -> None:
    probe = server[3]
    key = server[1]
    get = _answer(_get(server, "/api/methylation", key, params={"probeId": probe, "maxValue": "0.5"}))
    post = _answer(_post(server, "/api/methylation", key, _body({"maxValue": 0.5, "probeId": probe})))
    expected = {"methylation": {"probeId": probe, "minValue": 0.0, "maxValue": 0.5}}
    assert get["meta"]["receivedRequestSummary"]["requestParameters"] == expected
    assert post["meta"]["receivedRequestSummary"] == get["meta"]["receivedRequestSummary"]
    # other spellings of one question: one echo (the canonical form), one summary
    spelt = _answer(_get(server, "/api/methylation", key, params={"probeId": probe, "minValue": "-0",
                                                                  "maxValue": "5e-1"}))  # fmt: skip
    assert spelt["meta"]["receivedRequestSummary"] == get["meta"]["receivedRequestSummary"]
    twice = {"probeId": probe, "maxValue": 0.5, "datasetIds": [DEMO_DATASET, DEMO_DATASET]}
    echoed = _answer(_post(server, "/api/methylation", key, _body(twice)))["meta"]["receivedRequestSummary"]
    assert echoed["requestParameters"] == {
        "methylation": {**expected["methylation"], "datasetIds": [DEMO_DATASET]}
    }
    batch = [{"probeId": probe, "minValue": 0.25}, {"probeId": probe, "datasetIds": [DEMO_DATASET]}]
    body = _answer(_post(server, "/api/methylation", key, _body(batch)))
    assert body["meta"]["receivedRequestSummary"]["requestParameters"] == {
        "methylation": {
            "queries": [
                {"probeId": probe, "minValue": 0.25, "maxValue": 1.0},
                {"probeId": probe, "minValue": 0.0, "maxValue": 1.0, "datasetIds": [DEMO_DATASET]},
            ]
        }
    }


def test_a_boolean_answer_tells_its_meaning_as_an_imprecise_count(server) -> None:
    """A yes means "at least T patients": it never claims ``resultsCount: 0`` (framework: the number of
    results), and every count is marked ``countPrecision: imprecise`` (Beacon v2.2)."""
    probe = server[3]
    key = server[1]
    body = _answer(_get(server, "/api/methylation", key,
                        params={"probeId": probe, "includeResultsetResponses": "ALL"}))  # fmt: skip
    assert body["meta"]["returnedGranularity"] == "boolean"
    datasets = {c["id"]: c["info"]["privacy"]["threshold"]
                for c in _get(server, "/api/datasets", key).json()["response"]["collections"]}  # fmt: skip
    sets = body["response"]["resultSets"]
    assert sets
    for result_set in sets:
        assert result_set["results"] == [] and result_set["countPrecision"] == "imprecise"
        assert result_set["resultsCount"] == (datasets[result_set["id"]] if result_set["exists"] else 0)
    summary = body["responseSummary"]
    assert summary["numTotalResults"] == sum(r["resultsCount"] for r in sets)
    assert summary["countPrecision"] == "imprecise"
    assert (summary["numTotalResults"] > 0) == summary["exists"]
    declared = _get(server, "/api/entry_types").json()["response"]["entryTypes"]["methylation"]["description"]
    assert "resultsCount" in declared and "countPrecision" in declared


# --- CORS ------------------------------------------------------------------------------------------


def _cors(response: httpx.Response) -> dict[str, str]:
    return {k.lower(): v for k, v in response.headers.items() if k.lower().startswith("access-control-")}


def test_cors_preflight_and_answers_for_the_configured_origin(server) -> None:
    running, key, admin, probe = server
    preflight = httpx.options(
        running.url + "/api/methylation",
        headers={"Origin": ALLOWED, "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization, content-type"},
        timeout=30,
    )  # fmt: skip
    assert preflight.status_code == 200, preflight.text
    headers = _cors(preflight)
    assert headers["access-control-allow-origin"] == ALLOWED
    assert "POST" in headers["access-control-allow-methods"]
    assert {"authorization", "content-type"} <= {
        h.strip().lower() for h in headers["access-control-allow-headers"].split(",")
    }
    assert int(headers["access-control-max-age"]) > 0
    assert "access-control-allow-credentials" not in headers  # a key is the script's, never the browser's

    answer = _get(server, "/api/methylation", key, params={"probeId": probe}, headers={"Origin": ALLOWED})
    headers = _cors(answer)
    assert headers["access-control-allow-origin"] == ALLOWED
    assert "X-Request-ID" in headers["access-control-expose-headers"]
    assert "origin" in answer.headers.get("vary", "").lower()
    assert "access-control-allow-credentials" not in headers
    assert key not in json.dumps(dict(answer.headers)) and key not in answer.text
    refused = _get(server, "/api/methylation", key, params={"probeId": "x!"}, headers={"Origin": ALLOWED})
    assert refused.status_code == 400 and _cors(refused)["access-control-allow-origin"] == ALLOWED

    # another origin, no origin, the admin API, the server root: no CORS header at all
    for response in (
        _get(server, "/api/methylation", key, params={"probeId": probe}, headers={"Origin": OTHER}),
        httpx.options(running.url + "/api/methylation", timeout=30,
                      headers={"Origin": OTHER, "Access-Control-Request-Method": "POST"}),
        _get(server, "/api/methylation", key, params={"probeId": probe}),
        _get(server, "/api/admin/users", admin, headers={"Origin": ALLOWED}),
        httpx.options(running.url + "/api/admin/users", timeout=30,
                      headers={"Origin": ALLOWED, "Access-Control-Request-Method": "GET"}),
        _get(server, "/livez", headers={"Origin": ALLOWED}),
    ):  # fmt: skip
        assert _cors(response) == {}, (response.request.url, response.headers)


def test_cors_is_off_by_default(make_app) -> None:
    app = make_app()
    assert app.config["MBEACON"].config.cors_origins == []
    response = app.test_client().options(
        "/api/methylation", headers={"Origin": ALLOWED, "Access-Control-Request-Method": "POST"}
    )
    assert not [name for name, _ in response.headers if name.lower().startswith("access-control-")]


EXTRA_PROBES = 10
POLICY = {"c": 5, "epsilon": 1.0}
DATASETS = {DEMO_DATASET: POLICY}


@pytest.mark.parametrize(
    ("origins", "kept"),
    [
        (["https://UI.example.org"], ["https://ui.example.org"]),
        (["http://localhost:8080", "http://[::1]:3000"], ["http://localhost:8080", "http://[::1]:3000"]),
        (["*"], ["*"]),
    ],
)
def test_cors_origins_setting(origins: list[str], kept: list[str]) -> None:
    assert ServiceConfig(cors_origins=origins).cors_origins == kept


@pytest.mark.parametrize(
    "origins",
    [["https://ui.example.org/"], ["ui.example.org"], ["https://a.org/path"], ["*", "https://a.org"]],
)
def test_cors_origins_setting_refuses_what_is_not_an_origin(origins: list[str]) -> None:
    with pytest.raises(ConfigError, match="cors_origins"):
        load_config(None, env={}, overrides={"cors_origins": origins})


def test_cors_origins_from_the_environment() -> None:
    env = {"MBEACON_CORS_ORIGINS": "https://a.example.org, http://localhost:8080"}
    assert load_config(None, env=env).cors_origins == ["https://a.example.org", "http://localhost:8080"]


# --- the parsers: GET and POST agree ---------------------------------------------------------------


def _outcome(parse) -> tuple[int, int] | str:
    try:
        parsed = parse()
    except QueryError as error:
        return str(error)
    return parsed.skip, parsed.limit


@settings(max_examples=300, deadline=None)
@given(st.integers(-5, MAX_SKIP + 5) | st.sampled_from([0, MAX_SKIP, MAX_LIMIT]), st.booleans())
def test_get_and_post_take_the_same_skip_and_limit(value: int, is_skip: bool) -> None:
    name, maximum = ("skip", MAX_SKIP) if is_skip else ("limit", MAX_LIMIT)
    get = _outcome(lambda: parse_args({"probeId": PROBE, name: str(value)}))
    post = _outcome(lambda: parse_body(_body({"probeId": PROBE}, pagination={name: value}), max_batch=10))
    if 0 <= value <= maximum:
        expected = (value, DEFAULT_LIMIT) if is_skip else (DEFAULT_SKIP, value)
        assert get == post == expected
    else:
        assert isinstance(get, str) and get.startswith(f"{name}:"), get
        assert isinstance(post, str) and post.startswith(f"body.query.pagination.{name}:"), post


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=12))
def test_a_get_page_number_is_decimal_digits(text: str) -> None:
    outcome = _outcome(lambda: parse_args({"probeId": PROBE, "limit": text}))
    if text.isascii() and text.isdigit() and int(text) <= MAX_LIMIT:
        assert outcome == (DEFAULT_SKIP, int(text))
    else:
        assert isinstance(outcome, str) and outcome.startswith("limit:"), outcome


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=8) | st.dictionaries(st.text(max_size=4), st.text(max_size=4)), max_size=3))
def test_filters_only_when_there_are_none(filters: list) -> None:
    post = _outcome(lambda: parse_body(_body({"probeId": PROBE}, filters=filters), max_batch=10))
    text = ",".join(f for f in filters if isinstance(f, str))
    get = _outcome(lambda: parse_args({"probeId": PROBE, "filters": text}))
    if filters:
        assert isinstance(post, str) and post.startswith("body.query.filters:"), post
    else:
        assert post == (DEFAULT_SKIP, DEFAULT_LIMIT)
    if [term for term in text.split(",") if term]:
        assert isinstance(get, str) and get.startswith("filters:"), get
    else:
        assert get == (DEFAULT_SKIP, DEFAULT_LIMIT)

"""Hostile input over HTTP: every bad request gets a clear 4xx in the Beacon error schema and loses nothing.

Fast part (Flask test client): oversized bodies, huge batches, deeply nested JSON, invalid JSON, wrong
content types, unicode and NUL probe ids, NaN/Infinity, negative and reversed ranges, wrong types,
unknown datasets, repeated GET parameters. For each: the status, a message naming what is wrong, a
valid ``beaconErrorResponse``, and a ledger (accounts, spent budget, audit log) exactly as before.

Slow part (``--runslow``, a real gunicorn server on loopback): schemathesis generates at least 1,000
requests from ``/api/openapi.json`` (positive and negative data; with the right key, the other role's
key, no key and a forged key). No response may be a 5xx (503 included: the ledger is up), every
non-2xx JSON body must be a Beacon error, schemathesis's conformance checks (status codes, content
types, headers, response schemas) must pass, and the server log must hold no traceback. The body-size
limit is checked against gunicorn too.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections import Counter
from typing import Any

import httpx
import pytest
from beacon_schemas import validate
from flask import Flask

from mbeacon.store.demo import DEMO_DATASET

DEMO = DEMO_DATASET
CONTROLLED = "controlled-cohort"
EXTRA_PROBES = 50
POLICY = {"c": 5, "epsilon": 1.0}
DATASETS = {DEMO: {**POLICY}, CONTROLLED: {**POLICY, "tier": "CONTROLLED"}}
ERROR = "responses/beaconErrorResponse.json"
PROBE = "cg00042144"  # a probe of the demo cohort
LIMIT = 512 * 1024  # max_body_bytes: the 100,000-deep bodies (up to 400 kB) fit under it
FORGED_KEY = "mbk_0123456789ab_" + "A" * 43


def bearer(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def body(params: Any, **query: Any) -> dict:
    return {"meta": {"apiVersion": "v2.0.0"}, "query": {"requestParameters": params, **query}}


def raw(text: str | bytes, content_type: str = "application/json") -> dict:
    """Test-client arguments sending ``text`` verbatim."""
    return {"data": text, "content_type": content_type}


def nested(depth: int, opener: str = "[", closer: str = "]", inner: str = "") -> str:
    return opener * depth + inner + closer * depth


def assert_beacon_error(status: int, data: Any, expected: int, message: str | None = None) -> str:
    """A Beacon error with status and code ``expected``; returns its message (``message``: a regex)."""
    assert status == expected, json.dumps(data)[:500]
    validate(data, ERROR)
    assert data["error"]["errorCode"] == expected
    text = data["error"]["errorMessage"]
    assert text and "Traceback" not in text
    if message is not None:
        assert re.search(message, text), f"{text!r} does not match {message!r}"
    return text


def ledger_state(app: Flask) -> tuple[list, int]:
    """Everything a request may spend or record: each account's counters and thresholds, and the audit log."""
    ledger = app.config["MBEACON"].ledger
    accounts = sorted(
        (a.principal, a.dataset, answers, repr(a.state), json.dumps(a.budget(), sort_keys=True))
        for a, answers in ledger.accounts_and_answers()
    )
    return accounts, len(ledger.audit_log(limit=10_000))


@pytest.fixture
def served(make_app) -> tuple[Flask, str, str]:
    """An app, a researcher key and an admin key; one answered query has opened the researcher's account."""
    app = make_app(rate_limit_per_minute=0, max_body_bytes=LIMIT)
    ledger = app.config["MBEACON"].ledger
    key, admin = ledger.add_user("alice"), ledger.add_user("ops", role="admin")
    response = app.test_client().get("/api/methylation", query_string={"probeId": PROBE}, headers=bearer(key))
    assert response.status_code == 200, response.get_data(as_text=True)
    assert ledger_state(app)[0], "the first query should have opened an account"
    return app, key, admin


def refused(app: Flask, send, expected: int, message: str) -> str:
    """Send a request (``send(client)``), check the Beacon error, and that the ledger did not change."""
    before = ledger_state(app)
    response = send(app.test_client())
    text = assert_beacon_error(response.status_code, response.get_json(), expected, message)
    assert ledger_state(app) == before, "a refused request changed the ledger (budget, account or audit)"
    return text


# --- POST bodies ---------------------------------------------------------------------------------

_DEEP = 100_000

# A body that asks nothing (no query, no or empty requestParameters; a GET without parameters) is not
# refused: it is the framework's minimal request, answered from metadata (test_network_requests.py).
POST_CASES: dict[str, tuple[dict, int, str]] = {
    "oversized body": (
        raw('{"query": {"requestParameters": {"probeId": "' + "c" * (LIMIT + 1) + '"}}}'),
        413,
        r"(?i)too large|larger|exceeds",
    ),
    "oversized batch body": (
        {"json": body([{"probeId": PROBE, "minValue": 0.5}] * 20_000)},
        413,
        r"(?i)too large|larger|exceeds",
    ),
    "batch above max_batch": (
        {"json": body([{"probeId": PROBE}] * 1001)},
        400,
        r"1001 queries; at most 1000",
    ),
    "empty batch": ({"json": body([])}, 400, r"batch is empty"),
    "100k nested lists": (raw(nested(_DEEP)), 400, r"nested too deeply"),
    "100k nested objects": (raw(nested(_DEEP, '{"":', "}", "1")), 400, r"nested too deeply"),
    "100k nested in requestParameters": (
        raw('{"query": {"requestParameters": ' + nested(_DEEP) + "}}"),
        400,
        r"nested too deeply",
    ),
    "900 nested lists as a query": (
        raw('{"query": {"requestParameters": ' + nested(900) + "}}"),
        400,
        r"requestParameters\[0\]",
    ),
    "900 nested lists in meta": (
        raw(
            '{"meta": {"requestedSchemas": ' + nested(900) + '}, "query": {"requestParameters": '
            '{"probeId": "cg00000029"}}}'
        ),
        400,
        r"meta\.requestedSchemas",
    ),
    "invalid JSON": (raw('{"query": {"requestParameters": {"probeId": "cg1"'), 400, r"not valid JSON"),
    "invalid UTF-8": (
        raw(b'{"query": {"requestParameters": {"probeId": "\xff\xfe"}}}'),
        400,
        r"not valid JSON",
    ),
    "empty JSON body": (raw(""), 400, r"not valid JSON"),
    "huge integer literal": (
        raw('{"query": {"requestParameters": {"referenceName": "chr1", "start": ' + "9" * 5000 + "}}}"),
        400,
        r"not valid JSON|start",
    ),
    "text/plain": (
        raw('{"query": {"requestParameters": {"probeId": "cg1"}}}', "text/plain"),
        400,
        r"Content-Type: application/json",
    ),
    "form body": ({"data": {"probeId": PROBE}}, 400, r"Content-Type: application/json"),
    "no body": ({}, 400, r"Content-Type: application/json"),
    "JSON list": ({"json": [1, 2, 3]}, 400, r"expected a JSON object"),
    "JSON string": ({"json": "query"}, 400, r"expected a JSON object"),
    "JSON null": (raw("null"), 400, r"expected a JSON object"),
    "JSON number": (raw("1e999"), 400, r"expected a JSON object"),
    "requestParameters a string": ({"json": body("cg00000029")}, 400, r"expected an object"),
    "NaN literal": (
        raw('{"query": {"requestParameters": {"probeId": "cg1", "minValue": NaN}}}'),
        400,
        r"minValue: .*finite",
    ),
    "Infinity literal": (
        raw('{"query": {"requestParameters": {"probeId": "cg1", "maxValue": Infinity}}}'),
        400,
        r"maxValue: .*finite",
    ),
    "-Infinity literal": (
        raw('{"query": {"requestParameters": {"probeId": "cg1", "minValue": -Infinity}}}'),
        400,
        r"minValue: .*finite",
    ),
    "1e999 overflows to inf": (
        raw('{"query": {"requestParameters": {"probeId": "cg1", "minValue": 1e999}}}'),
        400,
        r"minValue: .*finite",
    ),
    "negative minValue": (
        {"json": body({"probeId": PROBE, "minValue": -0.1})},
        400,
        r"minValue: .*>= 0|minValue.*greater",
    ),
    "maxValue above 1": (
        {"json": body({"probeId": PROBE, "maxValue": 1.5})},
        400,
        r"maxValue: .*less than or equal to 1",
    ),
    "reversed range": (
        {"json": body({"probeId": PROBE, "minValue": 0.9, "maxValue": 0.1})},
        400,
        r"minValue 0\.9 is greater than maxValue 0\.1",
    ),
    "no probe (only a range)": ({"json": body({"minValue": 0.5, "maxValue": 0.6})}, 400, r"give probeId"),
    "probe and position": (
        {"json": body({"probeId": PROBE, "referenceName": "chr1", "start": 5})},
        400,
        r"not both",
    ),
    "position without start": ({"json": body({"referenceName": "chr1"})}, 400, r"go together"),
    "negative start": ({"json": body({"referenceName": "chr1", "start": -1})}, 400, r"start"),
    "two starts": ({"json": body({"referenceName": "chr1", "start": [1, 2]})}, 400, r"one start"),
    "string for a number": ({"json": body({"probeId": PROBE, "minValue": "0.5"})}, 400, r"minValue"),
    "boolean for a number": ({"json": body({"probeId": PROBE, "minValue": True})}, 400, r"minValue"),
    "list for a number": ({"json": body({"probeId": PROBE, "maxValue": [0.5]})}, 400, r"maxValue"),
    "number for a probe": ({"json": body({"probeId": 29})}, 400, r"probeId"),
    "list for a probe": ({"json": body({"probeId": [PROBE]})}, 400, r"probeId"),
    "string for datasetIds": ({"json": body({"probeId": PROBE, "datasetIds": DEMO})}, 400, r"datasetIds"),
    "bad batch item": (
        {"json": body([{"probeId": PROBE}, {"probeId": PROBE, "minValue": 2}])},
        400,
        r"requestParameters\[1\]\.minValue",
    ),
    "unknown parameter": ({"json": body({"probeId": PROBE, "colour": "blue"})}, 400, r"colour"),
    "bad granularity": (
        {"json": body({"probeId": PROBE}, requestedGranularity="everything")},
        400,
        r"requestedGranularity",
    ),
    "testMode a string": ({"json": body({"probeId": PROBE}, testMode="yes")}, 400, r"testMode"),
    "emoji probe": ({"json": body({"probeId": "cg😀0001"})}, 400, r"probeId"),
    "RTL probe": ({"json": body({"probeId": "\u202ecg00000029"})}, 400, r"probeId"),
    "NUL in probe": ({"json": body({"probeId": "cg\x0000000029"})}, 400, r"probeId"),
    "lone surrogate in probe": (
        raw('{"query": {"requestParameters": {"probeId": "cg\\ud800"}}}'),
        400,
        r"probeId",
    ),
    "very long probe": ({"json": body({"probeId": "cg" + "0" * 10_000})}, 400, r"probeId"),
    "unicode dataset id": (
        {"json": body({"probeId": PROBE, "datasetIds": ["démo"]})},
        400,
        r"not a dataset id",
    ),
    "too many dataset ids": (
        {"json": body({"probeId": PROBE, "datasetIds": [DEMO] * 101})},
        400,
        r"datasetIds",
    ),
    "unknown dataset": (
        {"json": body({"probeId": PROBE, "datasetIds": ["no-such-cohort"]})},
        403,
        r"no-such-cohort",
    ),
    "dataset of a higher tier": (
        {"json": body({"probeId": PROBE, "datasetIds": [CONTROLLED]})},
        403,
        CONTROLLED,
    ),
}


@pytest.mark.parametrize(("request_args", "status", "message"), POST_CASES.values(), ids=POST_CASES.keys())
def test_hostile_post_is_refused_clearly_and_spends_nothing(served, request_args, status, message) -> None:
    app, key, _ = served
    refused(app, lambda c: c.post("/api/methylation", headers=bearer(key), **request_args), status, message)


# --- GET query strings ----------------------------------------------------------------------------

GET_CASES: dict[str, tuple[str, int, str]] = {
    "nan": (f"probeId={PROBE}&minValue=nan", 400, r"minValue: must be a finite number"),
    "NaN": (f"probeId={PROBE}&maxValue=NaN", 400, r"maxValue: must be a finite number"),
    "inf": (f"probeId={PROBE}&maxValue=inf", 400, r"maxValue: must be a finite number"),
    "-Infinity": (f"probeId={PROBE}&minValue=-Infinity", 400, r"minValue: must be a finite number"),
    "1e999": (f"probeId={PROBE}&minValue=1e999", 400, r"minValue: must be a finite number"),
    "not a number": (f"probeId={PROBE}&minValue=half", 400, r"minValue: not a number"),
    "empty number": (f"probeId={PROBE}&minValue=", 400, r"minValue: not a number"),
    "negative": (f"probeId={PROBE}&minValue=-0.5", 400, r"minValue"),
    "above 1": (f"probeId={PROBE}&maxValue=1.0001", 400, r"maxValue"),
    "reversed range": (f"probeId={PROBE}&minValue=0.8&maxValue=0.2", 400, r"greater than maxValue"),
    "no probe": ("minValue=0.5", 400, r"give probeId"),
    "negative start": ("referenceName=chr1&start=-5", 400, r"start: not a 0-based position"),
    "start 2^31": ("referenceName=chr1&start=2147483648", 400, r"start"),
    "start with a decimal": ("referenceName=chr1&start=1.5", 400, r"start"),
    "huge start": ("referenceName=chr1&start=" + "9" * 500, 400, r"start"),
    "emoji probe": ("probeId=cg%F0%9F%98%800001", 400, r"probeId"),
    "RTL probe": ("probeId=%E2%80%AEcg00000029", 400, r"probeId"),
    "NUL probe": ("probeId=cg%0000000029", 400, r"probeId"),
    "UTF-8 encoded surrogate": ("probeId=cg%ED%A0%80", 400, r"probeId"),
    "invalid UTF-8": ("probeId=cg%FF%FE", 400, r"probeId"),
    "very long probe": ("probeId=cg" + "0" * 20_000, 400, r"probeId"),
    "unknown parameter": (f"probeId={PROBE}&colour=blue", 400, r"unknown query parameter 'colour'"),
    "unknown parameter, invalid UTF-8 name": (f"probeId={PROBE}&%FF=1", 400, r"unknown query parameter"),
    "bad granularity": (f"probeId={PROBE}&requestedGranularity=all", 400, r"requestedGranularity"),
    "bad testMode": (f"probeId={PROBE}&testMode=maybe", 400, r"testMode"),
    "bad dataset id": (f"probeId={PROBE}&datasetIds=d%C3%A9mo", 400, r"not a dataset id"),
    "too many dataset ids": (f"probeId={PROBE}&datasetIds=" + ",".join([DEMO] * 101), 400, r"datasetIds"),
    "unknown dataset": (f"probeId={PROBE}&datasetIds=no-such-cohort", 403, r"no-such-cohort"),
    "repeated, second bad": (
        f"probeId={PROBE}&minValue=0.9&minValue=nan&maxValue=0.1",
        400,
        r"greater than maxValue",
    ),
}


@pytest.mark.parametrize(("query", "status", "message"), GET_CASES.values(), ids=GET_CASES.keys())
def test_hostile_get_is_refused_clearly_and_spends_nothing(served, query, status, message) -> None:
    app, key, _ = served
    refused(app, lambda c: c.get("/api/methylation?" + query, headers=bearer(key)), status, message)


def test_repeated_get_parameter_counts_once(served) -> None:
    """A repeated name counts by its first value (as Flask's ``args.get``): not summed, not refused."""
    app, key, _ = served
    client = app.test_client()
    response = client.get(f"/api/methylation?probeId={PROBE}&probeId=cg-bad-%00&minValue=0.25&minValue=nan",
                          headers=bearer(key))  # fmt: skip
    assert response.status_code == 200, response.get_data(as_text=True)
    (result_set,) = [rs for rs in response.get_json()["response"]["resultSets"]] or [None]
    summary = response.get_json()["meta"]["receivedRequestSummary"]
    assert summary["requestedGranularity"] == "boolean"
    if result_set is not None:
        assert result_set["info"]["probeId"] == PROBE and result_set["info"]["range"] == [0.25, 1.0]


# --- authentication and admin routes --------------------------------------------------------------


def test_hostile_credentials_are_401_and_spend_nothing(served) -> None:
    app, _, _ = served
    query = f"/api/methylation?probeId={PROBE}"
    headers = [
        bearer(FORGED_KEY),
        bearer("x" * 10_000),
        {"Authorization": "Bearer"},
        {"Authorization": "Basic YWxpY2U6c2VjcmV0"},
        bearer("mbk_\u00e9\u00e9_\u202e"),
    ]
    for header in headers:
        refused(app, lambda c, h=header: c.get(query, headers=h), 401, r"(?i)key|Bearer")


ADMIN_CASES: dict[str, tuple[str, str, dict, int, str]] = {
    "user: JSON list": ("POST", "/api/admin/users", {"json": [1]}, 400, r"body|dictionary"),
    "user: NUL name": ("POST", "/api/admin/users", {"json": {"name": "a\x00b"}}, 400, r"name"),
    "user: emoji name": ("POST", "/api/admin/users", {"json": {"name": "😀"}}, 400, r"name"),
    "user: not JSON": ("POST", "/api/admin/users", raw("{name"), 400, r"not valid JSON"),
    "user: text/plain": ("POST", "/api/admin/users", raw('{"name": "x"}', "text/plain"), 400, r"JSON"),
    "user: oversized": (
        "POST",
        "/api/admin/users",
        {"json": {"name": "x" * (LIMIT + 1)}},
        413,
        r"(?i)too large|larger|exceeds",
    ),
    "budget: NaN epsilon": (
        "PUT",
        f"/api/admin/budget/user:alice/{DEMO}",
        raw('{"epsilon": NaN}'),
        400,
        r"epsilon",
    ),
    "budget: Infinity count_epsilon": (
        "PUT",
        f"/api/admin/budget/user:alice/{DEMO}",
        raw('{"count_epsilon": Infinity}'),
        400,
        r"finite",
    ),
    "budget: epsilon too small for SVT²": (
        "PUT",
        f"/api/admin/budget/user:alice/{DEMO}",
        {"json": {"epsilon": 1e-300}},
        400,
        r"at least 1e-06",
    ),
    "budget: string c": ("PUT", f"/api/admin/budget/user:alice/{DEMO}", {"json": {"c": "5"}}, 400, r"c"),
    "budget: NUL holder": ("PUT", f"/api/admin/budget/user:%00/{DEMO}", {"json": {}}, 400, r"budget holder"),
    "budget: unknown dataset": (
        "PUT",
        "/api/admin/budget/user:alice/no-such-cohort",
        {"json": {}},
        404,
        r"no-such-cohort",
    ),
    "reset: no confirmation": (
        "POST",
        f"/api/admin/budget/user:alice/{DEMO}/reset",
        {"json": {}},
        400,
        r"confirm",
    ),
    "reset: confirm as a string": (
        "POST",
        f"/api/admin/budget/user:alice/{DEMO}/reset",
        {"json": {"confirm": "true"}},
        400,
        r"confirm",
    ),
    "reset: JSON null": ("POST", f"/api/admin/budget/user:alice/{DEMO}/reset", raw("null"), 400, r"JSON"),
    "audit: limit nan": ("GET", "/api/admin/audit?limit=nan", {}, 400, r"limit"),
    "audit: limit -1": ("GET", "/api/admin/audit?limit=-1", {}, 400, r"limit"),
    "audit: limit 1e999": ("GET", "/api/admin/audit?limit=1e999", {}, 400, r"limit"),
    "revoke: unknown user": ("POST", "/api/admin/users/%F0%9F%98%80/revoke", {}, 404, r"no user"),
}


@pytest.mark.parametrize(("method", "path", "request_args", "status", "message"), ADMIN_CASES.values(),
                         ids=ADMIN_CASES.keys())  # fmt: skip
def test_hostile_admin_request_is_refused_clearly_and_changes_nothing(
    served, method, path, request_args, status, message
) -> None:
    app, _, admin = served
    users = [u.to_json() for u in app.config["MBEACON"].ledger.users()]
    refused(
        app, lambda c: c.open(path, method=method, headers=bearer(admin), **request_args), status, message
    )
    assert [u.to_json() for u in app.config["MBEACON"].ledger.users()] == users


@pytest.mark.parametrize("path", ["/api/admin/users", f"/api/admin/budget/user:alice/{DEMO}/reset"])
def test_deeply_nested_admin_body_is_400(served, path: str) -> None:
    app, _, admin = served
    refused(
        app, lambda c: c.post(path, headers=bearer(admin), **raw(nested(_DEEP))), 400, r"nested too deeply"
    )


# --- the real server ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_server(tmp_path_factory):
    """A gunicorn server (2 workers x 2 threads) on the demo store: (server, researcher key, admin key)."""
    from servers import BeaconServer, write_config

    from mbeacon.beacon.ledger import Ledger
    from mbeacon.store.demo import ensure_demo

    tmp = tmp_path_factory.mktemp("hostile-server")
    demo = ensure_demo(tmp_path_factory.getbasetemp() / "demo-store")
    url = f"sqlite:///{tmp}/ledger.sqlite3"
    ledger = Ledger.open(url)
    key, admin = ledger.add_user("alice"), ledger.add_user("ops", role="admin")
    ledger.close()
    config = write_config(
        tmp / "beacon.toml",
        {
            "store": str(demo.store),
            "database_url": url,
            "default_prior": demo.prior,
            "rate_limit_per_minute": 0,
            "max_body_bytes": LIMIT,
        },
        {"c": 1000, "epsilon": 5.0},
    )
    with BeaconServer(config, tmp, workers=2, threads=2) as server:
        yield server, key, admin, url


@pytest.mark.slow
def test_body_size_limit_holds_on_gunicorn(real_server) -> None:
    """Above ``max_body_bytes``: 413 in the Beacon error schema, also when the client lies about the size."""
    server, key, _, url = real_server
    from mbeacon.beacon.ledger import Ledger

    ledger = Ledger.open(url)
    try:
        before = len(ledger.audit_log(limit=10_000)), sorted(repr(a) for a in ledger.accounts())
        big = json.dumps(body([{"probeId": PROBE, "minValue": 0.5}] * 20_000))
        assert len(big) > LIMIT
        with httpx.Client(base_url=server.url, headers=bearer(key), timeout=60) as client:
            response = client.post(
                "/api/methylation", content=big, headers={"Content-Type": "application/json"}
            )
            assert_beacon_error(response.status_code, response.json(), 413, r"(?i)too large|larger|exceeds")

            def chunked():  # no Content-Length: the limit must hold on the stream itself
                for start in range(0, len(big), 8192):
                    yield big[start : start + 8192].encode()

            try:
                response = client.post("/api/methylation", content=chunked(),
                                       headers={"Content-Type": "application/json"})  # fmt: skip
            except httpx.TransportError:  # the server answered and closed while the upload went on
                response = None
            if response is not None:
                assert_beacon_error(response.status_code, response.json(), 413, r"larger than")
        # still serving, on a new connection: a server may close one on which it refused an upload
        # (RFC 9110, 15.5.14), and a refused body is not read to its end
        with httpx.Client(base_url=server.url, headers=bearer(key), timeout=60) as client:
            response = client.get("/api/methylation", params={"probeId": PROBE})
            assert response.status_code == 200, response.text
        after = len(ledger.audit_log(limit=10_000)), sorted(repr(a) for a in ledger.accounts())
        assert after[0] == before[0] + 1, "only the one valid query may be audited"
    finally:
        ledger.close()
    assert "Traceback" not in server.log()


#: Examples per (operation, generation mode, key); hypothesis stops early on operations without inputs.
EXAMPLES = 20
MIN_REQUESTS = 1000


@pytest.mark.slow
def test_schemathesis_finds_no_server_error(real_server) -> None:
    """Generated requests from the service's own OpenAPI document: no 5xx, Beacon errors, conformance."""
    import requests
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode
    from schemathesis.specs.openapi import checks

    server, key, admin, _ = real_server
    schema = schemathesis.openapi.from_url(f"{server.url}/api/openapi.json")
    conformance = [
        checks.status_code_conformance,
        checks.content_type_conformance,
        checks.response_headers_conformance,
        checks.response_schema_conformance,
    ]
    sent: list[tuple[str, str, int]] = []
    problems: list[str] = []
    session = requests.Session()
    started = time.monotonic()

    def run(operation, mode: GenerationMode, who: str, secret: str | None) -> None:
        @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(case=operation.as_strategy(generation_mode=mode))
        def send(case) -> None:
            if operation.path.endswith("/revoke") and str(case.path_parameters.get("name")) in (
                "alice",
                "ops",
            ):
                case.path_parameters["name"] = "nobody"  # keep the keys this test uses
            headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
            case.headers = {**headers, **bearer(secret)}
            response = case.call(session=session, timeout=60)
            sent.append((operation.label, who, response.status_code))
            where = f"{operation.label} [{mode.value}, {who}] -> {response.status_code}"
            if response.status_code >= 500:
                problems.append(f"{where}: server error {response.text[:300]}")
                return
            if response.status_code >= 300 and "json" in response.headers.get("Content-Type", ""):
                try:
                    assert_beacon_error(response.status_code, response.json(), response.status_code)
                except AssertionError as error:
                    problems.append(f"{where}: not a Beacon error: {error}"[:2000])
            try:
                case.validate_response(response, checks=conformance)
            except BaseException as failure:  # schemathesis raises a FailureGroup (a BaseExceptionGroup)
                if isinstance(failure, KeyboardInterrupt):
                    raise
                problems.append(f"{where}: {failure}"[:3000])

        with contextlib.suppress(Unsatisfiable):  # no negative data for an operation without inputs
            send()

    for result in schema.get_all_operations():
        operation = result.ok()
        is_admin = operation.path.startswith("/admin")
        keys = {"own key": admin if is_admin else key, "other role's key": key if is_admin else admin,
                "no key": None, "forged key": FORGED_KEY}  # fmt: skip
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            for who, secret in keys.items():
                run(operation, mode, who, secret)
    elapsed = time.monotonic() - started
    statuses = Counter(status for _, _, status in sent)
    print(f"schemathesis: {len(sent)} requests in {elapsed:.0f} s; statuses {sorted(statuses.items())}")
    assert not problems, f"{len(problems)} problem(s):\n" + "\n\n".join(dict.fromkeys(problems))
    assert len(sent) >= MIN_REQUESTS, f"only {len(sent)} generated requests"
    assert all(status < 500 for status in statuses), statuses
    assert len({label for label, _, _ in sent}) >= 15, "schemathesis reached too few operations"
    assert {200, 400, 401, 403} <= set(statuses), f"expected answers and refusals, saw {statuses}"
    assert "Traceback" not in server.log(), server.log()[-5000:]

"""Every endpoint's responses, errors included, validate against the GA4GH Beacon v2 framework schemas,
and conform to the service's own schema-only models of them (:mod:`mbeacon.api.schemas`, from which the
OpenAPI document is generated): the fast dict builders and the document describe the same responses.

The schemas are vendored in ``tests/beacon_v2`` (CC0); if they are missing these tests fail
(``beacon_schemas.SchemasMissing``) rather than skip.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from beacon_schemas import SchemasMissing, SchemaViolation, conforms, framework_root, validate
from flask import Flask

from mbeacon.api import admin_schemas, ratelimit, schemas
from mbeacon.store.demo import DEMO_DATASET

DEMO = DEMO_DATASET
CONTROLLED = "controlled-cohort"
EXTRA_PROBES = 200
POLICY = {"mechanism": "svt2", "c": 5, "epsilon": 1.0}
DATASETS = {
    DEMO: {**POLICY},
    CONTROLLED: {**POLICY, "tier": "CONTROLLED", "count_epsilon": 0.2},
}

RESULTSETS = "responses/beaconResultsetsResponse.json"
BOOLEAN = "responses/beaconBooleanResponse.json"
COUNT = "responses/beaconCountResponse.json"
ERROR = "responses/beaconErrorResponse.json"
INFO = "responses/beaconInfoResponse.json"
INFORMATIONAL_META = "responses/sections/beaconInformationalResponseMeta.json"


@pytest.fixture(scope="session", autouse=True)
def schemas_present() -> Path:
    try:
        return framework_root()
    except SchemasMissing as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rate limiter's clock stands still 10 s into a one-minute window (no window turns mid-test)."""
    monkeypatch.setattr(ratelimit, "time", SimpleNamespace(time=lambda: 60 * 16_667 + 10.0))


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def users(app: Flask) -> dict[str, str]:
    ledger = app.config["MBEACON"].ledger
    return {
        "registered": ledger.add_user("alice", tier="REGISTERED"),
        "controlled": ledger.add_user("carol", tier="CONTROLLED"),
        "admin": ledger.add_user("ops", role="admin"),
    }


@pytest.fixture
def probes(app: Flask) -> list[str]:
    return app.config["MBEACON"].engine.cohort(DEMO).probe_ids[:EXTRA_PROBES].tolist()


def body(params, *, granularity: str = "boolean", include: str = "HIT") -> dict:
    return {
        "meta": {"apiVersion": "v2.0.0"},
        "query": {
            "requestParameters": params,
            "requestedGranularity": granularity,
            "includeResultsetResponses": include,
        },
    }


def raw_json(text: str) -> dict:
    """Test-client arguments sending ``text`` verbatim as a JSON body."""
    return {"data": text, "content_type": "application/json"}


def assert_error(response, status: int) -> dict:
    assert response.status_code == status, response.get_data(as_text=True)
    data = response.get_json()
    validate(data, ERROR)
    conforms(data, schemas.BeaconErrorResponse)
    assert data["error"]["errorCode"] == status
    assert data["error"]["errorMessage"]
    return data


# --- the validator itself -----------------------------------------------------------------------


def test_validator_follows_references_and_rejects_bad_documents(app, users) -> None:
    """Guard against a validator that accepts everything (e.g. unresolved ``$ref``s)."""
    good = app.test_client().get("/api/methylation").get_json()  # a 401 error body
    validate(good, ERROR)
    broken = [
        {**good, "error": {"errorMessage": "no code"}},  # BeaconError (in beaconCommonComponents.json)
        {**good, "error": {"errorCode": "401"}},
        {**good, "meta": {**good["meta"], "returnedGranularity": "everything"}},  # Granularity enum
        {"error": good["error"]},
    ]
    for document in broken:
        with pytest.raises(SchemaViolation, match="beaconErrorResponse"):
            validate(document, ERROR)
    with pytest.raises(SchemaViolation, match="exists"):
        validate({**good, "responseSummary": {}, "response": {"resultSets": []}}, RESULTSETS)


def test_the_models_reject_what_they_do_not_describe(app, users, probes) -> None:
    """Guard against models that accept everything (unknown keys dropped, strings read as numbers)."""
    client = app.test_client()
    good = client.get("/api/methylation").get_json()  # a 401 error body
    conforms(good, schemas.BeaconErrorResponse)
    broken = [
        {**good, "extra": 1},
        {**good, "error": {**good["error"], "errorCode": "401"}},
        {**good, "meta": {**good["meta"], "returnedGranularity": "everything"}},
        {"error": good["error"]},
    ]
    for document in broken:
        with pytest.raises(SchemaViolation, match="BeaconErrorResponse"):
            conforms(document, schemas.BeaconErrorResponse)
    params = {"probeId": probes[0], "datasetIds": [DEMO]}
    answer = client.post(
        "/api/methylation", json=body(params, include="ALL"), headers=bearer(users["registered"])
    )
    data = answer.get_json()
    conforms(data, schemas.MethylationResponse)
    info = data["response"]["resultSets"][0]["info"]
    del info["epsilonSpent"]  # neither the whole budget nor testMode
    with pytest.raises(SchemaViolation, match="testMode"):
        conforms(data, schemas.MethylationResponse)


# --- framework endpoints ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "schema", "model"),
    [
        ("/api/", INFO, schemas.InfoResponse),
        ("/api/info", INFO, schemas.InfoResponse),
        ("/api/service-info", "responses/ga4gh-service-info-1-0-0-schema.json", schemas.ServiceInfo),
        ("/api/configuration", "responses/beaconConfigurationResponse.json", schemas.ConfigurationResponse),
        ("/api/map", "responses/beaconMapResponse.json", schemas.MapResponse),
        ("/api/entry_types", "responses/beaconEntryTypesResponse.json", schemas.EntryTypesResponse),
        (
            "/api/filtering_terms",
            "responses/beaconFilteringTermsResponse.json",
            schemas.FilteringTermsResponse,
        ),
        ("/api/datasets", "responses/beaconCollectionsResponse.json", schemas.DatasetsResponse),
    ],
)
@pytest.mark.parametrize("caller", ["anonymous", "registered", "controlled"])
def test_framework_endpoint_validates(app, users, path: str, schema: str, model, caller: str) -> None:
    headers = {} if caller == "anonymous" else bearer(users[caller])
    response = app.test_client().get(path, headers=headers)
    assert response.status_code == 200
    validate(response.get_json(), schema)
    conforms(response.get_json(), model)


def test_methylation_entry_type_is_declared(app) -> None:
    client = app.test_client()
    endpoint_sets = client.get("/api/map").get_json()["response"]["endpointSets"]
    assert endpoint_sets["methylation"]["entryType"] == "methylation"
    assert endpoint_sets["methylation"]["rootUrl"].endswith("/api/methylation")
    entry_types = client.get("/api/entry_types").get_json()["response"]["entryTypes"]
    assert entry_types["methylation"]["id"] == "methylation"
    configuration = client.get("/api/configuration").get_json()["response"]
    assert "methylation" in configuration["entryTypes"]


def test_datasets_lists_the_callers_datasets(app, users) -> None:
    client = app.test_client()
    registered = client.get("/api/datasets", headers=bearer(users["registered"])).get_json()
    controlled = client.get("/api/datasets", headers=bearer(users["controlled"])).get_json()
    assert [c["id"] for c in registered["response"]["collections"]] == [DEMO]
    assert sorted(c["id"] for c in controlled["response"]["collections"]) == sorted([DEMO, CONTROLLED])
    assert controlled["responseSummary"]["numTotalResults"] == 2


# --- methylation: GET and POST ----------------------------------------------------------------


@pytest.mark.parametrize("include", ["ALL", "HIT", "MISS", "NONE"])
def test_get_validates(app, users, probes, include: str) -> None:
    response = app.test_client().get(
        "/api/methylation",
        query_string={"probeId": probes[0], "minValue": 0.5, "includeResultsetResponses": include},
        headers=bearer(users["registered"]),
    )
    assert response.status_code == 200
    data = response.get_json()
    validate(data, RESULTSETS)
    validate(data, BOOLEAN)
    conforms(data, schemas.MethylationResponse)
    assert data["meta"]["returnedGranularity"] == "boolean"
    assert data["meta"]["receivedRequestSummary"]["includeResultsetResponses"] == include


@pytest.mark.parametrize("include", ["ALL", "HIT", "MISS", "NONE"])
def test_post_single_validates(app, users, probes, include: str) -> None:
    params = {"probeId": probes[1], "minValue": 0.2, "maxValue": 0.8, "datasetIds": [DEMO]}
    response = app.test_client().post(
        "/api/methylation", json=body(params, include=include), headers=bearer(users["registered"])
    )
    assert response.status_code == 200
    data = response.get_json()
    validate(data, RESULTSETS)
    validate(data, BOOLEAN)
    conforms(data, schemas.MethylationResponse)
    for result_set in data["response"]["resultSets"]:
        assert result_set["setType"] == "dataset"
        assert include == "ALL" or result_set["exists"] == (include == "HIT")
    if include == "NONE":
        assert data["response"]["resultSets"] == []


@pytest.mark.parametrize("include", ["ALL", "HIT", "MISS", "NONE"])
def test_post_batch_validates(app, users, probes, include: str) -> None:
    params = [{"probeId": p, "minValue": 0.1 * (i % 9)} for i, p in enumerate(probes[:30])]
    response = app.test_client().post(
        "/api/methylation", json=body(params, include=include), headers=bearer(users["controlled"])
    )
    assert response.status_code == 200
    data = response.get_json()
    validate(data, RESULTSETS)
    validate(data, BOOLEAN)
    conforms(data, schemas.MethylationResponse)
    assert data["info"]["queries"] == 30
    if include == "ALL":  # one result set per (query, dataset): both datasets are visible
        assert len(data["response"]["resultSets"]) == 60


@pytest.mark.parametrize("include", ["ALL", "HIT", "MISS", "NONE"])
def test_count_granularity_validates(app, users, probes, include: str) -> None:
    params = {"probeId": probes[2], "minValue": 0.3, "datasetIds": [CONTROLLED]}
    response = app.test_client().post(
        "/api/methylation",
        json=body(params, granularity="count", include=include),
        headers=bearer(users["controlled"]),
    )
    assert response.status_code == 200
    data = response.get_json()
    assert data["meta"]["returnedGranularity"] == "count"
    validate(data, RESULTSETS)
    validate(data, BOOLEAN)
    conforms(data, schemas.MethylationResponse)
    validate(data, COUNT)
    assert data["responseSummary"]["numTotalResults"] >= 0


def test_test_mode_validates(app, users, probes) -> None:
    params = [{"probeId": p, "minValue": 0.5, "datasetIds": [DEMO]} for p in probes[:5]]
    value = body(params, include="ALL")
    value["query"]["testMode"] = True
    response = app.test_client().post("/api/methylation", json=value, headers=bearer(users["registered"]))
    assert response.status_code == 200
    validate(response.get_json(), RESULTSETS)
    validate(response.get_json(), BOOLEAN)
    conforms(response.get_json(), schemas.MethylationResponse)


def test_count_granularity_batch_validates(app, users, probes) -> None:
    params = [{"probeId": p, "maxValue": 0.5, "datasetIds": [CONTROLLED]} for p in probes[:10]]
    response = app.test_client().post(
        "/api/methylation",
        json=body(params, granularity="count", include="ALL"),
        headers=bearer(users["controlled"]),
    )
    data = response.get_json()
    assert data["meta"]["returnedGranularity"] == "count"
    validate(data, RESULTSETS)
    validate(data, BOOLEAN)
    conforms(data, schemas.MethylationResponse)
    assert all(isinstance(rs["resultsCount"], int) for rs in data["response"]["resultSets"])


def test_count_request_downgraded_to_boolean_validates(app, users, probes) -> None:
    params = {"probeId": probes[2], "minValue": 0.3, "datasetIds": [DEMO]}
    response = app.test_client().post(
        "/api/methylation", json=body(params, granularity="count"), headers=bearer(users["registered"])
    )
    data = response.get_json()
    assert data["meta"]["returnedGranularity"] == "boolean"
    assert data["meta"]["receivedRequestSummary"]["requestedGranularity"] == "count"
    validate(data, RESULTSETS)
    validate(data, BOOLEAN)
    conforms(data, schemas.MethylationResponse)


def test_budget_meta_validates(app, users, probes) -> None:
    client = app.test_client()
    client.get("/api/methylation", query_string={"probeId": probes[0]}, headers=bearer(users["registered"]))
    response = client.get("/api/budget", headers=bearer(users["registered"]))
    assert response.status_code == 200
    data = response.get_json()
    validate(data["meta"], INFORMATIONAL_META)
    conforms(data, schemas.BudgetResponse)
    assert set(data["response"]["budgets"]) == {DEMO}


# --- the admin API ---------------------------------------------------------------------------


def test_admin_responses_conform_to_their_models(app, users, probes) -> None:
    client = app.test_client()
    admin = bearer(users["admin"])
    client.get("/api/methylation", query_string={"probeId": probes[0]}, headers=bearer(users["registered"]))
    account = f"/api/admin/budget/user:alice/{DEMO}"
    calls = [
        (client.get("/api/admin/users", headers=admin), admin_schemas.UsersResponse),
        (client.post("/api/admin/users", json={"name": "dave", "group": "lab"}, headers=admin),
         admin_schemas.NewUserResponse),
        (client.post("/api/admin/users/dave/revoke", headers=admin), admin_schemas.UserResponse),
        (client.get("/api/admin/budget", headers=admin), admin_schemas.AccountsResponse),
        (client.put(account, json={"c": 3}, headers=admin), admin_schemas.BudgetOverrideResponse),
        (client.post(account + "/reset", json={"confirm": True}, headers=admin), admin_schemas.ResetResponse),
        (client.put(account, json={"c": 4}, headers=admin), admin_schemas.BudgetOverrideResponse),
        (client.get("/api/admin/audit", headers=admin), admin_schemas.AuditResponse),
    ]  # fmt: skip
    for response, model in calls:
        assert response.status_code in (200, 201), response.get_data(as_text=True)
        validate(response.get_json()["meta"], INFORMATIONAL_META)
        conforms(response.get_json(), model)
    assert calls[3][0].get_json()["response"]["accounts"]  # an account was there to check
    assert {calls[i][0].get_json()["response"]["appliesFrom"] for i in (4, 6)} == {
        "after budget reset",
        "next query",
    }


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "request_args"),
    [
        ("bad JSON", raw_json("{not json")),
        ("not JSON", {"data": "probeId=cg1", "content_type": "text/plain"}),
        ("NaN in body", raw_json('{"query": {"requestParameters": {"probeId": "cg1", "minValue": NaN}}}')),
        (
            "Infinity in body",
            raw_json('{"query": {"requestParameters": {"probeId": "cg1", "maxValue": 1e999}}}'),
        ),
        ("body not an object", {"json": [1, 2, 3]}),
        ("empty batch", {"json": body([])}),
        ("unknown parameter", {"json": body({"probeId": "cg1", "colour": "blue"})}),
        ("min > max", {"json": body({"probeId": "cg1", "minValue": 0.9, "maxValue": 0.1})}),
        ("out of range", {"json": body({"probeId": "cg1", "minValue": 1.5})}),
        ("bad granularity", {"json": body({"probeId": "cg1"}, granularity="everything")}),
    ],
)
def test_post_400(app, users, kind: str, request_args: dict) -> None:
    response = app.test_client().post("/api/methylation", headers=bearer(users["registered"]), **request_args)
    assert_error(response, 400)


@pytest.mark.parametrize(
    "query",
    [
        {"probeId": "cg1", "colour": "blue"},
        {"probeId": "cg1", "minValue": 0.9, "maxValue": 0.1},
        {"probeId": "cg1", "minValue": "nan"},
        {"probeId": "cg1", "maxValue": "inf"},
        {"probeId": "cg1", "minValue": "half"},
        {"minValue": 0.5},
    ],
    ids=["unknown", "min>max", "nan", "inf", "not-a-number", "no-probe"],
)
def test_get_400(app, users, query: dict) -> None:
    response = app.test_client().get(
        "/api/methylation", query_string=query, headers=bearer(users["registered"])
    )
    assert_error(response, 400)


def test_401(app, users, probes) -> None:
    client = app.test_client()
    query = {"probeId": probes[0]}
    assert_error(client.get("/api/methylation", query_string=query), 401)
    assert_error(client.get("/api/budget"), 401)
    bad = "mbk_0123456789ab_" + "A" * 43
    assert_error(client.get("/api/methylation", query_string=query, headers=bearer(bad)), 401)
    assert_error(client.get("/api/methylation", query_string=query, headers=bearer("not-a-key")), 401)
    basic = {"Authorization": "Basic YWxpY2U6c2VjcmV0"}
    assert_error(client.get("/api/methylation", query_string=query, headers=basic), 401)
    app.config["MBEACON"].ledger.revoke_user("alice")
    response = client.get("/api/methylation", query_string=query, headers=bearer(users["registered"]))
    assert_error(response, 401)
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_403(app, users, probes) -> None:
    client = app.test_client()
    query = {"probeId": probes[0]}
    assert_error(client.get("/api/methylation", query_string=query, headers=bearer(users["admin"])), 403)
    assert_error(client.get("/api/budget", headers=bearer(users["admin"])), 403)
    assert_error(client.get("/api/admin/users", headers=bearer(users["registered"])), 403)
    higher = {**query, "datasetIds": CONTROLLED}
    assert_error(
        client.get("/api/methylation", query_string=higher, headers=bearer(users["registered"])), 403
    )
    params = {"probeId": probes[0], "datasetIds": [CONTROLLED]}
    response = client.post("/api/methylation", json=body(params), headers=bearer(users["registered"]))
    assert_error(response, 403)


def test_404_and_405(app, users) -> None:
    client = app.test_client()
    assert_error(client.get("/api/no-such-endpoint"), 404)
    assert_error(client.get("/api/methylation/extra", headers=bearer(users["registered"])), 404)
    assert_error(client.delete("/api/methylation", headers=bearer(users["registered"])), 405)
    assert_error(client.post("/api/info"), 405)
    assert_error(client.put("/api/budget", headers=bearer(users["registered"])), 405)


def test_413(make_app, probes) -> None:
    app = make_app(max_body_bytes=2048)
    key = app.config["MBEACON"].ledger.add_user("alice")
    params = [{"probeId": probes[i % len(probes)], "minValue": 0.5} for i in range(100)]
    response = app.test_client().post("/api/methylation", json=body(params), headers=bearer(key))
    assert_error(response, 413)


def test_429_budget_exhausted(make_app, probes) -> None:
    app = make_app()
    key = app.config["MBEACON"].ledger.add_user("alice")
    client = app.test_client()
    grid = [{"probeId": p, "minValue": round(0.95 + k / 1000, 3)} for k in range(50) for p in probes]
    for start in range(0, len(grid), 500):
        response = client.post("/api/methylation", json=body(grid[start : start + 500]), headers=bearer(key))
        if response.status_code == 429:
            break
        assert response.status_code == 200
    else:
        pytest.fail("the budget was never exhausted")
    data = assert_error(response, 429)
    assert data["info"]["dataset"] == DEMO
    assert data["info"]["positivesUsed"] == data["info"]["positivesTotal"] == POLICY["c"]


def test_429_rate_limited(make_app, frozen_clock) -> None:
    app = make_app(rate_limit_per_minute=2)
    client = app.test_client()
    statuses = [client.get("/api/info").status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    response = client.get("/api/info")
    assert_error(response, 429)
    assert response.headers["Retry-After"] == "50"


def test_503_ledger_unavailable(app, users, probes) -> None:
    """The ledger down: methylation answers are refused with a Beacon error body (and Retry-After)."""
    rt = app.config["MBEACON"]
    rt.ledger.close()
    path = Path(rt.ledger.db.path)
    path.parent.rename(path.parent.with_name(path.parent.name + "-moved"))
    path.parent.write_text("not a directory")
    response = app.test_client().get(
        "/api/methylation", query_string={"probeId": probes[0]}, headers=bearer(users["registered"])
    )
    assert_error(response, 503)
    assert response.headers["Retry-After"]

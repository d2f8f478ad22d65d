"""The OpenAPI document (``/api/openapi.json``) and the researcher guide (``/api/docs``).

The document must be valid OpenAPI 3.1, describe every route under ``/api`` (and nothing else), and
describe what the server really accepts and returns: responses are validated against it here.
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError

from mbeacon.api import create_app
from mbeacon.api.openapi_spec import openapi_document
from mbeacon.beacon.config import ServiceConfig
from mbeacon.beacon.query import RequestParameters
from mbeacon.beacon.wire import MAX_DATASET_IDS, MAX_START
from mbeacon.store.demo import ensure_demo

BASE = "http://beacon.test/api"
IGNORED_METHODS = {"HEAD", "OPTIONS"}
KEY_PATTERN = re.compile(r"mbk_[0-9a-f]{12}_[A-Za-z0-9_-]{43}")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return ensure_demo(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def beacon(demo, tmp_path_factory):
    ledger = tmp_path_factory.mktemp("ledger") / "ledger.sqlite3"
    app = create_app(
        {"store": str(demo.store), "database_url": f"sqlite:///{ledger}", "rate_limit_per_minute": 0}
    )
    ledger_api = app.config["MBEACON"].ledger
    keys = {
        "researcher": ledger_api.add_user("alice", tier="REGISTERED"),
        "admin": ledger_api.add_user("root", role="admin"),
    }
    return app, keys


@pytest.fixture(scope="module")
def document(beacon) -> dict:
    app, _ = beacon
    response = app.test_client().get("/api/openapi.json", base_url="http://beacon.test")
    assert response.status_code == 200
    return response.get_json()


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []


def _resolve(document: dict, ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = document
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def test_document_basics(document):
    assert document["openapi"] == "3.1.0"
    assert document["servers"] == [{"url": BASE}]
    assert document["components"]["securitySchemes"]["bearerAuth"] == {
        **document["components"]["securitySchemes"]["bearerAuth"],
        "type": "http",
        "scheme": "bearer",
    }
    for name in ("RequestParameters", "BeaconRequestBody", "MethylationResponse", "BeaconErrorResponse"):
        assert name in document["components"]["schemas"]
    for ref in _refs(document):
        _resolve(document, ref)  # every reference resolves
    for text in ("/livez", "/readyz", "/metrics"):
        assert text in document["info"]["description"]


def test_document_validates(document):
    validator = pytest.importorskip("openapi_spec_validator")
    validator.validate(document)
    variant = openapi_document(BASE, ServiceConfig(anonymous="shared", max_batch=7, rate_limit_per_minute=0))
    validator.validate(variant)


def _api_routes(app) -> dict[str, set[str]]:
    routes: dict[str, set[str]] = {}
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/api/"):
            continue
        path = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule.rule.removeprefix("/api")) or "/"
        routes.setdefault(path, set()).update(set(rule.methods or ()) - IGNORED_METHODS)
    return routes


def test_every_route_is_documented_and_nothing_else(beacon, document):
    app, _ = beacon
    documented = {
        path: {method.upper() for method in item if method != "parameters"}
        for path, item in document["paths"].items()
    }
    assert _api_routes(app) == documented


def test_operations_are_complete():
    document = openapi_document(BASE, ServiceConfig())
    operation_ids = set()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method == "parameters":
                continue
            assert operation["operationId"] not in operation_ids
            operation_ids.add(operation["operationId"])
            assert any(code.startswith("2") for code in operation["responses"]), (method, path)
            for code, response in operation["responses"].items():
                if code.startswith(("4", "5")):
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/BeaconErrorResponse"}, (
                        method,
                        path,
                        code,
                    )
            if path.startswith("/admin") or path in ("/methylation", "/budget"):
                assert {"bearerAuth": []} in operation["security"], (method, path)
                assert {"401", "403", "503"} <= set(operation["responses"]), (method, path)
            if "requestBody" in operation:
                assert "413" in operation["responses"], (method, path)
            assert "429" in operation["responses"], (method, path)  # the rate limit covers all of /api


def test_document_follows_the_configuration():
    default = openapi_document(BASE, ServiceConfig())
    shared = openapi_document(BASE, ServiceConfig(anonymous="shared", max_batch=7, rate_limit_per_minute=0))
    for document, max_batch in ((default, 1000), (shared, 7)):
        query = _resolve(
            document, document["components"]["schemas"]["BeaconRequestBody"]["properties"]["query"]["$ref"]
        )
        assert query["properties"]["requestParameters"]["oneOf"][1]["maxItems"] == max_batch
    assert {} not in default["paths"]["/methylation"]["get"]["security"]
    assert {} in shared["paths"]["/methylation"]["get"]["security"]
    assert "429" not in shared["paths"]["/info"]["get"]["responses"]


# --- the document describes what the server does -------------------------------------------------


def _schema_for(document: dict, template: str, method: str, response) -> dict:
    operation = document["paths"][template][method]
    documented = operation["responses"]
    assert str(response.status_code) in documented, (
        method,
        template,
        response.status_code,
        response.data[:300],
    )
    content = documented[str(response.status_code)]["content"]
    assert response.mimetype in content, (method, template, response.mimetype)
    return {"components": document["components"], **content[response.mimetype]["schema"]}


def _check(document: dict, client, method: str, url: str, template: str | None = None, **kwargs) -> Any:
    response = getattr(client, method)(url, **kwargs)
    template = template or url.removeprefix("/api").split("?")[0] or "/"
    schema = _schema_for(document, template, method, response)
    assert "X-Request-ID" in response.headers
    if response.mimetype == "application/json":
        jsonschema.Draft202012Validator(schema).validate(response.get_json())
    return response


def test_responses_match_the_document(beacon, document, demo):
    app, keys = beacon
    client = app.test_client()
    researcher = {"Authorization": f"Bearer {keys['researcher']}"}
    admin = {"Authorization": f"Bearer {keys['admin']}"}
    probe = str(app.config["MBEACON"].engine.cohort(demo.dataset).probe_ids[0])
    for path in ("/", "/info", "/service-info", "/configuration", "/map", "/entry_types", "/filtering_terms"):
        _check(document, client, "get", "/api" + path)
    _check(document, client, "get", "/api/docs")
    _check(document, client, "get", "/api/datasets")
    _check(document, client, "get", "/api/datasets", headers=researcher)
    _check(document, client, "get", "/api/datasets", headers={"Authorization": "Bearer nonsense"})
    query = f"/api/methylation?probeId={probe}&maxValue=0.5&includeResultsetResponses=ALL"
    assert _check(document, client, "get", query, headers=researcher).status_code == 200
    assert _check(document, client, "get", query).status_code == 401
    assert _check(document, client, "get", query, headers=admin).status_code == 403
    assert (
        _check(document, client, "get", query + "&datasetIds=elsewhere", headers=researcher).status_code
        == 403
    )
    assert _check(document, client, "get", query + "&bogus=1", headers=researcher).status_code == 400
    batch = {"query": {"requestParameters": [{"probeId": probe}, {"probeId": probe, "minValue": 0.9}]}}
    batch["query"]["includeResultsetResponses"] = "ALL"
    response = _check(document, client, "post", "/api/methylation", json=batch, headers=researcher)
    assert [s["info"]["queryIndex"] for s in response.get_json()["response"]["resultSets"]] == [0, 1]
    assert (
        _check(document, client, "post", "/api/methylation", data="x", headers=researcher).status_code == 400
    )
    assert _check(document, client, "get", "/api/budget", headers=researcher).status_code == 200
    assert _check(document, client, "get", "/api/admin/users", headers=admin).status_code == 200
    assert _check(document, client, "get", "/api/admin/users", headers=researcher).status_code == 403
    assert (
        _check(document, client, "get", "/api/admin/budget?holder=user:alice", headers=admin).status_code
        == 200
    )
    assert _check(document, client, "get", "/api/admin/audit?limit=5", headers=admin).status_code == 200
    new = _check(document, client, "post", "/api/admin/users", json={"name": "bob"}, headers=admin)
    assert new.status_code == 201
    revoke = "/api/admin/users/bob/revoke"
    _check(document, client, "post", revoke, "/admin/users/{name}/revoke", headers=admin)
    override = "/api/admin/budget/user:alice/" + demo.dataset
    _check(
        document, client, "put", override, "/admin/budget/{holder}/{dataset}", json={"c": 3}, headers=admin
    )
    reset = override + "/reset"
    template = "/admin/budget/{holder}/{dataset}/reset"
    assert _check(document, client, "post", reset, template, json={}, headers=admin).status_code == 400
    _check(document, client, "post", reset, template, json={"confirm": True}, headers=admin)


def test_exhausted_budget_and_rate_limit_match_the_document(demo, tmp_path):
    app = create_app(
        {
            "store": str(demo.store),
            "database_url": f"sqlite:///{tmp_path}/ledger.sqlite3",
            "rate_limit_per_minute": 3,
            "datasets": {demo.dataset: {"mechanism": "svt2", "c": 1}},
        }
    )
    key = app.config["MBEACON"].ledger.add_user("carol", tier="REGISTERED")
    client = app.test_client()
    document = openapi_document(BASE, app.config["MBEACON"].config)
    headers = {"Authorization": f"Bearer {key}"}
    probes = [str(p) for p in app.config["MBEACON"].engine.cohort(demo.dataset).probe_ids[:300]]
    batch = {"query": {"requestParameters": [{"probeId": p, "maxValue": 0.05} for p in probes]}}
    first = _check(document, client, "post", "/api/methylation", json=batch, headers=headers)
    assert first.status_code == 200
    second = _check(document, client, "post", "/api/methylation", json=batch, headers=headers)
    if first.get_json()["info"]["budgets"][demo.dataset]["positivesUsed"] == 1:
        assert second.status_code == 429 and "Retry-After" not in second.headers
    for _ in range(4):  # anonymous callers are counted by address, apart from the key
        limited = _check(document, client, "get", "/api/info")
    assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1


@pytest.mark.parametrize(
    "parameters",
    [
        {"probeId": "cg00000029"},
        {"probeId": "cg00000029", "minValue": 0, "maxValue": 1, "datasetIds": ["a", "b.c_d-1"]},
        {"referenceName": "chr1", "start": 69590},
        {"referenceName": "X", "start": [0], "probeId": None},
        {"probeId": "cg00000029", "start": None, "datasetIds": None},
        {},
        {"probeId": "cg1", "referenceName": "chr1", "start": 1},
        {"referenceName": "chr1"},
        {"start": 5},
        {"probeId": "-cg"},
        {"probeId": "c" * 65},
        {"referenceName": "chr23x", "start": 1},
        {"referenceName": "1", "start": -1},
        {"referenceName": "1", "start": MAX_START + 1},
        {"referenceName": "1", "start": [1, 2]},
        {"referenceName": "1", "start": []},
        {"probeId": "cg1", "minValue": 1.5},
        {"probeId": "cg1", "maxValue": -0.1},
        {"probeId": "cg1", "datasetIds": ["ok"] * (MAX_DATASET_IDS + 1)},
        {"probeId": "cg1", "datasetIds": ["bad id"]},
        {"probeId": "cg1", "other": 1},
    ],
)
def test_request_parameters_schema_agrees_with_the_server(document, parameters):
    schema = {"components": document["components"], "$ref": "#/components/schemas/RequestParameters"}
    schema_says = jsonschema.Draft202012Validator(schema).is_valid(parameters)
    try:
        RequestParameters.model_validate(parameters)
        server_says = True
    except ValidationError:
        server_says = False
    assert schema_says == server_says


def test_docs_page(beacon):
    app, keys = beacon
    response = app.test_client().get(
        "/api/docs", base_url="http://beacon.test", headers={"Authorization": f"Bearer {keys['researcher']}"}
    )
    assert response.status_code == 200 and response.mimetype == "text/html"
    page = response.get_data(as_text=True)
    assert f"{BASE}/openapi.json" in page
    assert f"{BASE}/methylation?probeId=" in page and f'-X POST "{BASE}/methylation"' in page
    assert keys["researcher"] not in page and not KEY_PATTERN.search(page)
    assert "localStorage" not in page and "sessionStorage" not in page and "document.cookie" not in page
    own_icon = '<link rel="icon" href="/favicon.svg" type="image/svg+xml">'  # the one file it links
    assert page.count(own_icon) == 1
    linked = re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", page.replace(own_icon, ""), re.I)
    assert not linked  # self-contained
    assert "{{" not in page


def test_docs_page_escapes_the_base_url(beacon):
    from flask import render_template

    app, _ = beacon
    with app.test_request_context("/api/docs"):
        page = render_template("docs.html", base='http://x/"><script>alert(1)</script>')
    assert "<script>alert(1)" not in page

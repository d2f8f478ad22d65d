"""What a Beacon Network sends, against a real ``mbeacon serve`` (gunicorn) over HTTP.

* every dataset spelling the network software sends (bento's ``query.datasets.datasetIds``, the
  production implementation's ``requestParameters.datasets`` list, the framework example's
  ``requestParameters.datasets.datasetIds``, GET ``datasets``) is honoured: a named dataset the caller
  may not see is the 403, never silently widened to every dataset; two spellings that disagree, or a
  malformed one, are a 400 that names them; nothing is spent on a refusal;
* the framework's own request examples: the minimal body is answered (from metadata, free), the
  maximal one refused for its filters with a 400 naming them;
* ``POST /datasets`` and ``/filtering_terms`` (GET and POST) page by ``skip``/``limit`` and echo it;
  ``testMode`` and ``requestedSchemas`` are echoed in the response meta;
* ``/map`` and ``/entry_types`` read as the network backend and the official verifier read them: every
  URL resolves, no two endpoints fold into one, and the default schemas are JSON Schemas the results
  validate against.

Every response is validated against the official Beacon v2 framework schemas. The body normaliser's
rules are property-tested in process (hypothesis).
"""

from __future__ import annotations

import json
import re
import shutil

import httpx
import pytest
from beacon_schemas import framework_root, validate
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from servers import BeaconServer

from mbeacon.beacon.ledger import Ledger
from mbeacon.beacon.query import QueryError
from mbeacon.beacon.request_shapes import normalise_body, parse_listing_args, parse_listing_body
from mbeacon.store.cohorts import CohortStore
from mbeacon.store.demo import DEMO_DATASET, ensure_demo

RESULTSETS = "responses/beaconResultsetsResponse.json"
COLLECTIONS = "responses/beaconCollectionsResponse.json"
TERMS = "responses/beaconFilteringTermsResponse.json"
ERROR = "responses/beaconErrorResponse.json"
MISSING = "not-a-dataset"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(server, researcher key, a probe of the demo cohort, the demo cohort's size)."""
    tmp = tmp_path_factory.mktemp("network")
    demo = ensure_demo(tmp_path_factory.getbasetemp() / "demo-store")
    store = tmp / "store"
    shutil.copytree(demo.store, store)
    url = f"sqlite:///{tmp}/ledger.sqlite3"
    ledger = Ledger.open(url)
    key = ledger.add_user("alice")
    ledger.close()
    config = tmp / "beacon.toml"
    config.write_text(
        f"store = {json.dumps(str(store))}\n"
        f"database_url = {json.dumps(url)}\n"
        f"default_prior = {json.dumps(demo.prior)}\n"
        "rate_limit_per_minute = 0\n"
        "[defaults]\nc = 1000\nepsilon = 5.0\n"
    )
    cohort = CohortStore(store).open(DEMO_DATASET)
    with BeaconServer(config, tmp, workers=1, threads=2) as running:
        yield running, key, str(cohort.probe_ids[0]), cohort.info.patients


def _headers(key: str | None) -> dict:
    return {"Authorization": f"Bearer {key}"} if key else {}


def _post(server, path: str, body, key: str | None = "default") -> httpx.Response:
    key = server[1] if key == "default" else key
    return httpx.post(server[0].url + path, json=body, headers=_headers(key), timeout=30)


def _get(server, path: str, key: str | None = "default", **params) -> httpx.Response:
    key = server[1] if key == "default" else key
    return httpx.get(server[0].url + path, params=params, headers=_headers(key), timeout=30)


def _budget(server) -> dict:
    response = _get(server, "/api/budget")
    assert response.status_code == 200, response.text
    return response.json()["response"]["budgets"]


def _ok(response: httpx.Response, schema: str = RESULTSETS) -> dict:
    assert response.status_code == 200, response.text
    body = response.json()
    validate(body, schema)
    return body


def _refused(response: httpx.Response, status: int, *named: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    validate(body, ERROR)
    message = body["error"]["errorMessage"]
    for name in named:
        assert name in message, (name, message)
    return message


def _query(probe: str, **extra) -> dict:
    return {"probeId": probe, "minValue": 0.3, **extra}


def _spellings(probe: str, ids: list[str]) -> dict[str, dict]:
    """One question, asking ``ids``, in each spelling a network sends."""
    meta = {"apiVersion": "v2.0"}
    bento = {"requestParameters": _query(probe), "datasets": {"datasetIds": ids}}
    return {
        "bento": {"meta": meta, "query": bento},
        "production": {"meta": meta, "query": {"requestParameters": _query(probe, datasets=ids)}},
        "framework": {
            "meta": meta,
            "query": {"requestParameters": _query(probe, datasets={"datasetIds": ids})},
        },
        "mbeacon": {"meta": meta, "query": {"requestParameters": _query(probe, datasetIds=ids)}},
    }


def test_every_dataset_spelling_is_honoured(server) -> None:
    probe = server[2]
    before = _budget(server)
    for body in _spellings(probe, [MISSING]).values():  # honoured: the named dataset, not all
        _refused(_post(server, "/api/methylation", body), 403, MISSING)
    _refused(_get(server, "/api/methylation", probeId=probe, datasets=MISSING), 403, MISSING)
    assert _budget(server) == before  # a refusal spends nothing
    answers = []
    for name, body in _spellings(probe, [DEMO_DATASET]).items():
        every = {**body, "query": {**body["query"], "includeResultsetResponses": "ALL"}}
        answer = _ok(_post(server, "/api/methylation", every))
        assert {s["id"] for s in answer["response"]["resultSets"]} == {DEMO_DATASET}, name
        echoed = answer["meta"]["receivedRequestSummary"]["requestParameters"]["methylation"]
        assert echoed["datasetIds"] == [DEMO_DATASET], name
        answers.append([(s["exists"], s["info"]["cached"]) for s in answer["response"]["resultSets"]])
    # one question however spelt: the first is answered, the others are its cached answer
    assert len({tuple(e for e, _ in a) for a in answers}) == 1 and all(c for _, c in answers[-1])
    get = _ok(_get(server, "/api/methylation", probeId=probe, minValue="0.3", datasets=DEMO_DATASET))
    assert get["meta"]["receivedRequestSummary"]["requestParameters"]["methylation"]["datasetIds"] == [
        DEMO_DATASET
    ]


def test_disagreeing_or_malformed_spellings_are_named(server) -> None:
    probe = server[2]
    before = _budget(server)
    two = {"query": {"requestParameters": _query(probe, datasetIds=[DEMO_DATASET]),
                     "datasets": {"datasetIds": [MISSING]}}}  # fmt: skip
    _refused(_post(server, "/api/methylation", two), 400, "query.datasets.datasetIds",
             "query.requestParameters.datasetIds")  # fmt: skip
    listed = {"query": {"requestParameters": _query(probe), "datasets": [DEMO_DATASET]}}
    _refused(_post(server, "/api/methylation", listed), 400, "query.datasets")
    other = {"query": {"requestParameters": _query(probe, datasets={"ids": [DEMO_DATASET]})}}
    _refused(_post(server, "/api/methylation", other), 400, "query.requestParameters.datasets.ids")
    bad = {"query": {"requestParameters": _query(probe, datasets=["../etc"])}}
    _refused(_post(server, "/api/methylation", bad), 400, "query.requestParameters.datasets[0]")
    batch = {"query": {"requestParameters": [_query(probe), _query(probe, datasets=[DEMO_DATASET])],
                       "datasets": {"datasetIds": [MISSING]}}}  # fmt: skip
    _refused(_post(server, "/api/methylation", batch), 400, "query.requestParameters[1].datasets")
    get = _get(server, "/api/methylation", probeId=probe, datasets=DEMO_DATASET, datasetIds=MISSING)
    _refused(get, 400, "datasets", "datasetIds")
    assert _budget(server) == before


def test_the_frameworks_request_examples(server) -> None:
    """The framework's own MIN example is answered (no 400), free; its MAX example names filters,
    which MBeacon does not take: refused, naming them."""
    examples = framework_root() / "requests" / "examples-fullDocuments"
    minimal = json.loads((examples / "beaconRequestBody-MIN-example.json").read_text())
    maximal = json.loads((examples / "beaconRequestBody-MAX-example.json").read_text())
    before = _budget(server)
    patients = server[3]
    for body in (minimal, {"meta": {"apiVersion": "v2.0"}, "query": {}},
                 {"meta": {"apiVersion": "v2.0"}, "query": {"requestedGranularity": "count"}}):  # fmt: skip
        answer = _ok(_post(server, "/api/methylation", body))
        assert answer["responseSummary"] == {"exists": True, "numTotalResults": patients,
                                             "countPrecision": "exact"}  # fmt: skip
        (result_set,) = answer["response"]["resultSets"]
        assert (result_set["id"], result_set["resultsCount"]) == (DEMO_DATASET, patients)
        assert answer["info"]["unfiltered"] is True and "probeId" in answer["info"]["message"]
    named = _ok(_post(server, "/api/methylation", {"query": {"datasets": {"datasetIds": [DEMO_DATASET]}}}))
    assert [s["id"] for s in named["response"]["resultSets"]] == [DEMO_DATASET]
    _refused(_post(server, "/api/methylation", {"query": {"datasets": {"datasetIds": [MISSING]}}}), 403)
    _ok(_get(server, "/api/methylation"))  # GET without parameters: the same unfiltered answer
    _refused(_post(server, "/api/methylation", maximal), 400, "query.filters")
    _refused(_post(server, "/api/methylation", minimal, key=None), 401)  # still needs a key
    assert _budget(server) == before


def test_test_mode_and_requested_schemas_are_echoed(server) -> None:
    probe = server[2]
    schemas = [{"entityType": "methylation", "schema": "mbeacon-methylation-v1.0.0"}]
    body = {"meta": {"apiVersion": "v2.0", "requestedSchemas": schemas},
            "query": {"requestParameters": _query(probe), "testMode": True}}  # fmt: skip
    answer = _ok(_post(server, "/api/methylation", body))
    assert answer["meta"]["testMode"] is True
    summary = answer["meta"]["receivedRequestSummary"]
    assert summary["testMode"] is True and summary["requestedSchemas"] == schemas
    named = {**body, "meta": {"requestedSchemas": ["mbeacon-methylation-v1.0.0"]}}
    echoed = _ok(_post(server, "/api/methylation", named))["meta"]["receivedRequestSummary"]
    assert echoed["requestedSchemas"] == [{"schema": "mbeacon-methylation-v1.0.0"}]
    get = _ok(_get(server, "/api/methylation", probeId=probe, testMode="true", requestedSchema="x"))
    assert get["meta"]["testMode"] is True and get["meta"]["receivedRequestSummary"]["requestedSchemas"] == [
        {"schema": "x"}
    ]
    plain = _ok(_get(server, "/api/methylation", probeId=probe))
    assert "testMode" not in plain["meta"]
    _refused(_post(server, "/api/methylation", {**body, "meta": {"requestedSchemas": [3]}}), 400,
             "meta.requestedSchemas[0]")  # fmt: skip


def test_datasets_accept_post_and_page(server) -> None:
    everything = _ok(_get(server, "/api/datasets"), COLLECTIONS)
    total = everything["responseSummary"]["numTotalResults"]
    assert total == len(everything["response"]["collections"]) >= 1
    minimal = _ok(_post(server, "/api/datasets", {"meta": {"apiVersion": "v2.0"}, "query": {}}), COLLECTIONS)
    assert minimal["response"] == everything["response"]
    for page in (0, 1):
        body = {"meta": {"apiVersion": "v2.0"}, "query": {"pagination": {"skip": page, "limit": 1}}}
        for response in (_post(server, "/api/datasets", body),
                         _get(server, "/api/datasets", skip=str(page), limit="1")):  # fmt: skip
            paged = _ok(response, COLLECTIONS)
            assert paged["meta"]["receivedRequestSummary"]["pagination"] == {"skip": page, "limit": 1}
            assert paged["responseSummary"]["numTotalResults"] == total
            assert paged["response"]["collections"] == everything["response"]["collections"][page : page + 1]
    named = {"query": {"datasets": {"datasetIds": [DEMO_DATASET]}}}
    assert [
        c["id"] for c in _ok(_post(server, "/api/datasets", named), COLLECTIONS)["response"]["collections"]
    ] == [DEMO_DATASET]
    _refused(_post(server, "/api/datasets", {"query": {"requestParameters": {"datasets": [MISSING]}}}), 403)
    _refused(_post(server, "/api/datasets", {"query": {"requestParameters": {"probeId": "cg1"}}}), 400,
             "query.requestParameters.probeId")  # fmt: skip
    _refused(_post(server, "/api/datasets", {"query": {"pagination": {"skip": -1}}}), 400, "skip")
    _refused(_get(server, "/api/datasets", limit="ten"), 400, "limit")
    _refused(_get(server, "/api/datasets", bogus="1"), 400, "bogus")
    anonymous = _ok(_post(server, "/api/datasets", {}, key=None), COLLECTIONS)
    assert anonymous["responseSummary"]["numTotalResults"] == 0  # the demo cohort is not PUBLIC


def test_filtering_terms_list_what_can_be_asked_and_page(server) -> None:
    everything = _ok(_get(server, "/api/filtering_terms", limit="0"), TERMS)
    terms = everything["response"]["filteringTerms"]
    ids = [t["id"] for t in terms]
    assert everything["info"]["numTotalResults"] == len(terms) == len(set(ids))
    assert {"tissue", "disease"} <= set(ids)
    assert any(i.startswith("platform:") for i in ids)
    genes = [i.removeprefix("geneId:") for i in ids if i.startswith("geneId:")]
    assert genes and genes == sorted(genes)
    gene = genes[0]  # a listed gene is one the beacon answers by geneId
    by_gene = _ok(_post(server, "/api/methylation", {"query": {"requestParameters": {"geneId": gene},
                                                               "testMode": True}}))  # fmt: skip
    assert by_gene["response"]["resultSets"] or by_gene["responseSummary"]["exists"] is False
    for skip, limit in ((0, 2), (1, 2), (3, 1)):
        body = {"meta": {"apiVersion": "v2.0"}, "query": {"pagination": {"skip": skip, "limit": limit}}}
        for response in (_post(server, "/api/filtering_terms", body),
                         _get(server, "/api/filtering_terms", skip=str(skip), limit=str(limit))):  # fmt: skip
            page = _ok(response, TERMS)
            assert page["response"]["filteringTerms"] == terms[skip * limit : (skip + 1) * limit]
            assert page["meta"]["receivedRequestSummary"]["pagination"] == {"skip": skip, "limit": limit}
    anonymous = _ok(_get(server, "/api/filtering_terms", key=None), TERMS)
    assert anonymous["response"]["filteringTerms"] == []  # nothing of a dataset the caller may not see


def _strip_template(url: str) -> str:
    return re.sub(r"\{[^}]*\}", "", url)


def test_map_and_entry_types_read_as_a_network_and_the_verifier_read_them(server) -> None:
    probe = server[2]
    entry_types = _ok(_get(server, "/api/entry_types"), "responses/beaconEntryTypesResponse.json")
    declared = entry_types["response"]["entryTypes"]
    beacon_map = _ok(_get(server, "/api/map"), "responses/beaconMapResponse.json")["response"]
    seen: set[str] = set()
    for name, endpoint_set in beacon_map["endpointSets"].items():
        assert endpoint_set["entryType"] == name and name in declared
        root = endpoint_set["rootUrl"]
        assert root.startswith(server[0].url) and "{" not in root
        assert httpx.get(root, params={"probeId": probe} if name == "methylation" else {},
                         headers=_headers(server[1]), timeout=30).status_code == 200  # fmt: skip
        urls = [root]
        if "singleEntryUrl" in endpoint_set:
            single = endpoint_set["singleEntryUrl"].replace("{id}", DEMO_DATASET)
            assert httpx.get(single, headers=_headers(server[1]), timeout=30).status_code == 200
            urls.append(endpoint_set["singleEntryUrl"])
        for related in endpoint_set.get("endpoints", {}).values():
            assert related["returnedEntryType"] in declared
            urls.append(related["url"])
            url = related["url"].replace("{id}", DEMO_DATASET)
            answered = httpx.get(url, params={"probeId": probe}, headers=_headers(server[1]), timeout=30)
            validate(answered.json(), RESULTSETS)
        keys = [(name, _strip_template(url)) for url in urls]
        assert not seen & {k[1] for k in keys}, "two endpoints fold into one URL"
        seen |= {k[1] for k in keys}
    for name, definition in declared.items():  # the default schema is a schema of results
        reference = definition["defaultSchema"]["referenceToSchemaDefinition"]
        assert "#/components/" not in reference
        schema = httpx.get(reference, timeout=30)
        assert schema.status_code == 200, (name, reference)
        Draft202012Validator.check_schema(schema.json())
        if name == "methylation":
            every = {"query": {"requestParameters": _query(probe), "includeResultsetResponses": "ALL"}}
            results = _ok(_post(server, "/api/methylation", every))["response"]["resultSets"]
        else:
            results = _ok(_get(server, "/api/datasets"), COLLECTIONS)["response"]["collections"]
        assert results
        for result in results:
            errors = list(Draft202012Validator(schema.json()).iter_errors(result))
            assert not errors, (name, errors[:3])


# --- the normaliser, in process ---------------------------------------------------------------------

dataset_ids = st.lists(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,10}", fullmatch=True), min_size=1,
                       max_size=5, unique=True)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(dataset_ids, st.sampled_from(["bento", "production", "framework", "mbeacon"]), st.booleans())
def test_every_spelling_normalises_to_dataset_ids(ids: list[str], spelling: str, batch: bool) -> None:
    body = _spellings("cg00000029", ids)[spelling]
    if batch and spelling != "bento":
        body = {**body, "query": {"requestParameters": [body["query"]["requestParameters"]] * 2}}
    normalised, _ = normalise_body(body)
    parameters = normalised["query"]["requestParameters"]
    for item in parameters if isinstance(parameters, list) else [parameters]:
        assert item["datasetIds"] == ids and "datasets" not in item
    assert "datasets" not in normalised["query"]


@settings(max_examples=200, deadline=None)
@given(dataset_ids, dataset_ids, st.sampled_from(["production", "framework", "mbeacon"]))
def test_disagreeing_spellings_are_refused_naming_both(
    first: list[str], second: list[str], inner: str
) -> None:
    body = _spellings("cg00000029", second)[inner]
    body["query"]["datasets"] = {"datasetIds": first}
    if set(first) == set(second):
        normalise_body(body)
        return
    with pytest.raises(QueryError) as refusal:
        normalise_body(body)
    assert "query.datasets.datasetIds" in str(refusal.value) and "query.requestParameters" in str(
        refusal.value
    )


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 50), st.integers(0, 20), st.integers(0, 60))
def test_listing_pages_as_the_framework_pages(skip: int, limit: int, items: int) -> None:
    """GET and POST read one page; a page is ``limit`` items after ``skip`` pages (``limit`` 0: all)."""
    get = parse_listing_args({"skip": str(skip), "limit": str(limit)})
    post = parse_listing_body({"query": {"pagination": {"skip": skip, "limit": limit}}})
    assert get == post
    listed = list(range(items))
    expected = listed if limit == 0 else listed[skip * limit : skip * limit + limit]
    assert get.page(listed) == expected


@given(st.text(max_size=12).filter(lambda t: not t.isdigit() or len(t) > 7))
def test_listing_refuses_a_page_that_is_not_a_number(text: str) -> None:
    with pytest.raises(QueryError, match="skip"):
        parse_listing_args({"skip": text})

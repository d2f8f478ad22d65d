"""Queries by region (referenceName + start + end) and by gene (geneId): each expands to the probes
the dataset's annotation places there, answered and charged exactly as the batch of those single-probe
queries; what cannot be resolved is refused with a 400 naming the field, before anything is spent.

The store: the demo (its cohort located by the demo's made-up annotation) plus a made-up GEO cohort
whose series matrix names its platform, and that platform's table imported as an operator would.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from beacon_schemas import validate
from click.testing import CliRunner
from flask import Flask

from mbeacon.api import create_app
from mbeacon.store.annotation import import_annotation
from mbeacon.store.demo import DEMO_DATASET, DEMO_PROBES_PER_GENE, ensure_demo
from mbeacon.store.ingest import ingest

DATA = Path(__file__).parent / "data" / "annotation"
GEO = "made-up-geo"
RESULTSETS = "responses/beaconResultsetsResponse.json"
ERROR = "responses/beaconErrorResponse.json"
POLICY = {"c": 5, "epsilon": 1.0}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    demo = ensure_demo(tmp_path_factory.getbasetemp() / "demo-store")
    root = tmp_path_factory.mktemp("regions") / "store"
    shutil.copytree(demo.store, root)
    ingest(DATA / "GSE9000001_series_matrix.txt", root, GEO)  # names GPL13534 in !Series_platform_id
    import_annotation(DATA / "GPL13534_family.soft.gz", root)
    return root


@pytest.fixture(scope="module")
def demo_ids(store: Path) -> list[str]:
    """The demo cohort's probes in the made-up annotation's order (sorted ids, 250 bases apart)."""
    from mbeacon.store.cohorts import CohortStore

    return sorted(CohortStore(store).open(DEMO_DATASET).probe_ids.tolist())


def _app(store: Path, tmp_path: Path, **settings) -> Flask:
    return create_app(
        {
            "store": str(store),
            "database_url": f"sqlite:///{tmp_path}/ledger.sqlite3",
            "default_prior": "demo-general-population",
            "rate_limit_per_minute": 0,
            "defaults": POLICY,
            **settings,
        }
    )


@pytest.fixture
def app(store: Path, tmp_path: Path) -> Iterator[Flask]:
    app = _app(store, tmp_path)
    yield app
    app.config["MBEACON"].ledger.close()


def _state(app: Flask) -> tuple[list, list]:
    ledger = app.config["MBEACON"].ledger
    accounts = sorted(
        (a.principal, a.dataset, answers, repr(a.state)) for a, answers in ledger.accounts_and_answers()
    )
    return accounts, ledger.audit_log(limit=100_000)


def _body(params, **query) -> dict:
    return {"query": {"requestParameters": params, "includeResultsetResponses": "ALL", **query}}


def _send(app: Flask, key: str, params, method: str = "post", **query):
    client, headers = app.test_client(), {"Authorization": f"Bearer {key}"}
    if method == "get":
        return client.get(
            "/api/methylation", query_string={**params, "includeResultsetResponses": "ALL"}, headers=headers
        )
    return client.post("/api/methylation", json=_body(params, **query), headers=headers)


def _answered(app: Flask, key: str, params, method: str = "post", **query) -> list[dict]:
    response = _send(app, key, params, method, **query)
    data = response.get_json()
    assert response.status_code == 200, data
    validate(data, RESULTSETS)
    return data["response"]["resultSets"]


def _refused(app: Flask, key: str, params, message: str, method: str = "post") -> str:
    before = _state(app)
    response = _send(app, key, params, method)
    data = response.get_json()
    assert response.status_code == 400, data
    validate(data, ERROR)
    text = data["error"]["errorMessage"]
    assert message in text, text
    assert _state(app) == before, "a refused question changed the ledger"
    return text


def _answers(result_sets: list[dict]) -> list[tuple]:
    return [(r["id"], r["info"]["probeId"], r["exists"], r["info"]["answeredFrom"]) for r in result_sets]


def test_a_gene_query_is_the_batch_of_its_probes(app, demo_ids) -> None:
    """DEMO2 is the demo's probes 5-10 in genome order (probe 5 ends DEMO1 too): one result set each,
    charged as those single-probe queries, so asking them one by one afterwards is all cached."""
    key = app.config["MBEACON"].ledger.add_user("alice")
    gene = _answered(app, key, {"geneId": "DEMO2", "minValue": 0.5})
    probes = demo_ids[DEMO_PROBES_PER_GENE - 1 : 2 * DEMO_PROBES_PER_GENE]
    assert [r["info"]["probeId"] for r in gene] == probes
    assert {r["id"] for r in gene} == {DEMO_DATASET} and not any(r["info"]["cached"] for r in gene)
    assert "queryIndex" not in gene[0]["info"]  # one query asked: no batch indexes
    audit = [row for row in _state(app)[1] if row["event"] == "query"]
    assert len(audit) == len(probes)  # recorded as that many single-probe queries
    spent = _state(app)[0]
    batch = _answered(app, key, [{"probeId": p, "minValue": 0.5} for p in probes])
    assert [(d, p, e, s) for d, p, e, s in _answers(batch)] == _answers(gene)
    assert all(r["info"]["cached"] for r in batch)
    assert [a[:3] for a in _state(app)[0]] == [a[:3] for a in spent]  # nothing more spent


def test_equivalent_spellings_get_one_answer(app, demo_ids) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice")
    first = _answers(_answered(app, key, {"geneId": "demo1", "maxValue": 0.3}, "get"))
    assert [p for _, p, _, _ in first] == demo_ids[:DEMO_PROBES_PER_GENE]
    for params, method in [
        ({"geneId": "Demo1", "maxValue": 0.3}, "post"),
        ({"geneId": "DEMO1", "minValue": 0.0, "maxValue": 0.3, "assemblyId": "hg19"}, "post"),
        ({"referenceName": "chr1", "start": 100_000, "end": 101_001, "maxValue": 0.3}, "post"),
        (
            {
                "referenceName": "1",
                "start": "100000",
                "end": "101001",
                "maxValue": "0.3",
                "assemblyId": "GRCh37",
            },
            "get",
        ),
    ]:
        again = _answered(app, key, params, method)
        assert _answers(again) == first, params
        assert all(r["info"]["cached"] for r in again)


def test_region_bounds_are_0_based_and_half_open(app, demo_ids) -> None:
    """The demo's first probes are at 1-based 100,001, 100,251, ... on chromosome 1."""
    key = app.config["MBEACON"].ledger.add_user("alice")

    def probes(**where) -> list[str]:
        return [r["info"]["probeId"] for r in _answered(app, key, {"referenceName": "1", **where})]

    assert probes(start=100_000) == demo_ids[:1]  # one base: [100000, 100001)
    assert probes(start=100_000, end=100_251) == demo_ids[:2]
    assert probes(start=100_001, end=100_251) == demo_ids[1:2]
    assert probes(start=[99_000], end=[100_250]) == demo_ids[:1]  # Beacon's one-item arrays
    _refused(
        app,
        key,
        {"referenceName": "1", "start": 100_001, "end": 100_250},
        "query.requestParameters.referenceName, start, end: no probe of any of the datasets",
    )


def test_unresolvable_regions_and_genes_are_400_and_spend_nothing(app, store) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice")
    _answered(app, key, {"geneId": "DEMO3"})  # an account is open: refusals must leave it as it is
    _refused(
        app, key, {"geneId": "NOSUCHGENE"}, "query.requestParameters.geneId: no probe of any of the datasets"
    )
    _refused(
        app,
        key,
        {"geneId": "DEMO3", "assemblyId": "GRCh38"},
        "query.requestParameters.assemblyId: 'GRCh38' is not the genome build",
    )
    _refused(app, key, {"referenceName": "22", "start": 1, "end": 50}, "no probe of any of the datasets")
    _refused(app, key, {"referenceName": "1", "start": 9, "end": 9}, "end 9 must be greater than start 9")
    _refused(app, key, {"geneId": "DEMO1", "probeId": "cg00000001"}, "give probeId or geneId, not both")
    _refused(app, key, {"probeId": "cg00000001", "assemblyId": "GRCh37"}, "assemblyId goes with")
    text = _refused(app, key, [{"geneId": "DEMO1"}, {"geneId": "GENEZ"}], "query.requestParameters[1].geneId")
    assert "the batch is refused whole" in text


def test_a_region_over_the_probe_cap_or_the_batch_limit_is_400(store, tmp_path, monkeypatch) -> None:
    from mbeacon.beacon import regions

    app = _app(store, tmp_path, max_batch=4)
    key = app.config["MBEACON"].ledger.add_user("alice")
    _refused(
        app,
        key,
        {"geneId": "DEMO1"},
        "stands for 5 single-probe queries (its regions and genes expanded); at most 4",
    )
    monkeypatch.setattr(regions, "MAX_REGION_PROBES", 3)
    _refused(
        app, key, {"referenceName": "1", "start": 0, "end": 10**8}, "covers 95 probes; at most 3 per query"
    )
    app.config["MBEACON"].ledger.close()


def test_a_dataset_without_annotation_is_named(app, store) -> None:
    from mbeacon.store.annotation import AnnotationStore

    key = app.config["MBEACON"].ledger.add_user("alice")
    annotations = AnnotationStore(store)
    annotations.link(GEO, "GPL-not-imported")
    try:
        _refused(
            app,
            key,
            {"geneId": "GENEA", "datasetIds": [GEO]},
            f"geneId: dataset {GEO!r} has no gene annotation",
        )
        _refused(
            app,
            key,
            {"referenceName": "1", "start": 999, "datasetIds": [GEO]},
            f"dataset {GEO!r} has no probe positions",
        )
    finally:
        annotations.link(GEO, None)
    (answer,) = _answered(app, key, {"referenceName": "1", "start": 999, "datasetIds": [GEO]})
    assert answer["info"]["probeId"] == "cg00000001"  # the ingest-time platform applies again


def test_a_geo_cohort_and_its_platform_table_answer_gene_and_position_queries(app) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice")
    gene = _answered(app, key, {"geneId": "genea"})  # every dataset: only the GEO cohort has GENEA
    assert [(r["id"], r["info"]["probeId"]) for r in gene] == [(GEO, f"cg0000000{i}") for i in (1, 2, 3)]
    region = _answered(app, key, {"referenceName": "chr1", "start": 999, "end": 1050, "datasetIds": [GEO]})
    assert [r["info"]["probeId"] for r in region] == ["cg00000001", "cg00000002", "cg00000003"]
    assert all(r["info"]["cached"] for r in region)  # the same probes and range as the gene query
    (x,) = _answered(app, key, {"referenceName": "X", "start": 299, "datasetIds": [GEO]}, "post")
    assert x["info"]["probeId"] == "cg00000007"


def test_a_batch_of_regions_and_probes_keeps_each_query_index(app, demo_ids) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice")
    sets = _answered(app, key, [{"probeId": demo_ids[40]}, {"geneId": "DEMO1"}, {"geneId": "GENEC"}])
    indexed = [(r["info"]["queryIndex"], r["info"]["probeId"]) for r in sets]
    assert indexed == [
        (0, demo_ids[40]),
        *((1, p) for p in demo_ids[:5]),
        (2, "cg00000005"),
        (2, "cg00000006"),
    ]


def test_test_mode_answers_a_gene_from_the_prior_for_free(app) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice")
    before = _state(app)
    sets = _answered(app, key, {"geneId": "DEMO1"}, testMode=True)
    assert len(sets) == DEMO_PROBES_PER_GENE and {r["info"]["answeredFrom"] for r in sets} == {"prior"}
    assert _state(app) == before


def test_the_openapi_document_describes_the_query_forms_and_the_map_links_it(app) -> None:
    client = app.test_client()
    methylation = client.get("/api/map").get_json()["response"]["endpointSets"]["methylation"]
    assert methylation["openAPIEndpointsDefinition"].endswith("/api/openapi.json")
    assert "endpoints" not in methylation  # no query-form templates of one URL, folded by a reader
    spec = client.get("/api/openapi.json").get_json()
    names = {p["name"] for p in spec["paths"]["/methylation"]["get"]["parameters"]}
    assert {"referenceName", "start", "end", "geneId", "assemblyId"} <= names
    schema = spec["components"]["schemas"]["RequestParameters"]["properties"]
    assert {"end", "geneId", "assemblyId"} <= set(schema)


def test_datasets_say_which_query_forms_resolve(app) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice")
    response = app.test_client().get("/api/datasets", headers={"Authorization": f"Bearer {key}"})
    validate(response.get_json(), "responses/beaconCollectionsResponse.json")
    infos = {c["id"]: c["info"] for c in response.get_json()["response"]["collections"]}
    located = {d: (i["hasProbePositions"], i["hasGenes"], i["platform"]) for d, i in infos.items()}
    assert located == {DEMO_DATASET: (True, True, "demo-made-up-annotation"), GEO: (True, True, "GPL13534")}


def test_mbeacon_demo_answers_a_gene_and_a_position_query_over_http(tmp_path: Path) -> None:
    """`mbeacon demo` (real gunicorn), asked by gene and by position with its printed key."""
    process = subprocess.Popen(
        [sys.executable, "-m", "mbeacon.cli", "demo", "--port", "0", "--data-dir", str(tmp_path / "demo")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        base = process.stdout.readline().strip().removeprefix("url: ")
        key = process.stdout.readline().strip().removeprefix("key: ")
        headers = {"Authorization": f"Bearer {key}"}
        deadline = time.monotonic() + 60
        while True:
            try:
                gene = httpx.get(
                    f"{base}/methylation",
                    params={"geneId": "DEMO1", "includeResultsetResponses": "ALL"},
                    headers=headers,
                    timeout=10,
                )
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "demo server did not come up"
                time.sleep(0.3)
        assert gene.status_code == 200, gene.text
        validate(gene.json(), RESULTSETS)
        probes = [r["info"]["probeId"] for r in gene.json()["response"]["resultSets"]]
        assert len(probes) == DEMO_PROBES_PER_GENE
        position = httpx.post(
            f"{base}/methylation",
            headers=headers,
            timeout=10,
            json=_body({"referenceName": "chr1", "start": 100_000, "assemblyId": "GRCh37"}),
        )
        assert position.status_code == 200, position.text
        validate(position.json(), RESULTSETS)
        (answer,) = position.json()["response"]["resultSets"]
        assert answer["info"]["probeId"] == probes[0] and answer["info"]["cached"] is True
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_geo_cohort_served_by_gunicorn_answers_once_its_platform_table_is_imported(tmp_path: Path) -> None:
    """The operator's path with the real CLI and server: ingest a GEO series matrix, serve, import its
    platform's table while serving (no restart); before the import a gene query is a 400 that spends
    nothing, after it the gene and a region are answered."""
    from questions import Store, add_user, ledger_state, post, running_server

    from mbeacon.cli import main

    demo = ensure_demo(tmp_path / "demo")
    root = tmp_path / "store"
    shutil.copytree(demo.store, root)
    runner = CliRunner()
    ingested = runner.invoke(
        main, ["ingest", str(DATA / "GSE9000001_series_matrix.txt"), "--store", str(root), "--dataset", GEO]
    )
    assert ingested.exit_code == 0 and "platform GPL13534" in ingested.output, ingested.output
    with running_server(Store(root, demo.prior, [], []), tmp_path, POLICY) as (server, url):
        key = add_user(url, "alice")
        before = ledger_state(url)
        refused = post(server, key, {"geneId": "GENEA", "datasetIds": [GEO]})
        assert (
            refused.status_code == 400 and "has no gene annotation" in refused.json()["error"]["errorMessage"]
        )
        assert ledger_state(url) == before
        imported = runner.invoke(
            main, ["annotation", "import", str(DATA / "GPL13534_family.soft.gz"), "--store", str(root)]
        )
        assert imported.exit_code == 0, imported.output
        for _ in range(4):  # both workers, whichever answers
            gene = post(server, key, {"geneId": "GENEA", "datasetIds": [GEO]})
            assert gene.status_code == 200, gene.text
            validate(gene.json(), RESULTSETS)
            probes = [r["info"]["probeId"] for r in gene.json()["response"]["resultSets"]]
            assert probes == ["cg00000001", "cg00000002", "cg00000003"]
        region = post(server, key, {"referenceName": "chr2", "start": 0, "end": 2000, "datasetIds": [GEO]})
        assert [r["info"]["probeId"] for r in region.json()["response"]["resultSets"]] == [
            "cg00000005",
            "cg00000006",
        ]


def test_info_queries_counts_the_probe_queries_charged_and_datasets_give_the_assembly(app, demo_ids) -> None:
    """A gene answered as its probes says so in ``info.queries``; /api/datasets gives the genome build of a
    dataset located through its annotation (the cohort itself was ingested without one)."""
    key = app.config["MBEACON"].ledger.add_user("alice")
    headers = {"Authorization": f"Bearer {key}"}
    body = {"meta": {"apiVersion": "v2.0.0"}, "query": {"requestParameters": {"geneId": "DEMO2"}}}
    data = app.test_client().post("/api/methylation", json=body, headers=headers).get_json()
    assert data["info"]["queries"] == len(data["response"]["resultSets"]) == DEMO_PROBES_PER_GENE + 1
    probe = {"meta": {"apiVersion": "v2.0.0"}, "query": {"requestParameters": {"probeId": demo_ids[0]}}}
    assert (
        app.test_client().post("/api/methylation", json=probe, headers=headers).get_json()["info"]["queries"]
        == 1
    )
    listed = app.test_client().get("/api/datasets", headers=headers).get_json()["response"]["collections"]
    (demo,) = [d for d in listed if d["id"] == DEMO_DATASET]
    assert demo["info"]["hasProbePositions"] and demo["info"]["assembly"] != ""
    assert all(d["info"]["assembly"] == "" for d in listed if not d["info"]["hasProbePositions"])

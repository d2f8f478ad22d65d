"""EPIC v2 ids over HTTP, against a real ``mbeacon serve`` (gunicorn) and its SQLite ledger.

The store of ``questions.py`` (450K-style ids, a 450K prior) plus a made-up EPIC v2 cohort: five of the
demo's CpGs under EPIC v2 names, one of them with a replicate pair (``_TC11``, ``_TC12``) whose rows
hold different patients' values. A CpG asked by its suffixed id, by its bare name and by the other
replicate's spelling is one question: one answer, named by the probe that answers (the replicate with
the smaller id), one cached entry, one charge. The 450K demo cohort answers an EPIC v2 id of a CpG it
has, and a CpG no dataset has is refused (400, field named) with nothing spent.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pytest
from beacon_schemas import validate
from questions import DEMO, Store, add_user, bearer, build_store, get, ledger_state, post, running_server

from mbeacon.store.cohorts import CohortStore

EPIC = "epic-v2-cohort"
RESULTSETS = "responses/beaconResultsetsResponse.json"
ERROR = "responses/beaconErrorResponse.json"
#: four fresh questions per dataset at most: never exhausted
POLICY = {"mechanism": "svt2", "c": 5, "epsilon": 1.0}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, dict[str, str]]:
    """The questions store plus :data:`EPIC`; returns it and the EPIC v2 name of each CpG used."""
    built = build_store(tmp_path_factory.getbasetemp(), tmp_path_factory.mktemp("epic") / "store")
    cohorts = CohortStore(built.root)
    demo = cohorts.open(DEMO)
    cpgs = built.shared[:4]
    names = {cpgs[0]: f"{cpgs[0]}_TC21", cpgs[1]: f"{cpgs[1]}_BC21", cpgs[2]: f"{cpgs[2]}_TC11"}
    ids = [names[cpgs[0]], names[cpgs[1]], f"{cpgs[2]}_TC12", names[cpgs[2]], f"{cpgs[3]}_BO11"]
    source_rows = [0, 1, 3, 2, 3]  # the replicates hold different values: which one answers matters
    values = demo.rows(np.array([demo.probe_row(built.shared[r]) for r in source_rows]))
    cohorts.write(EPIC, demo.sample_ids.tolist(), [(ids, values)])
    return built, names


def result_sets(response: httpx.Response) -> list[dict]:
    assert response.status_code == 200, response.text
    data = response.json()
    validate(data, RESULTSETS)
    return data["response"]["resultSets"]


def seen(sets: list[dict]) -> list[tuple]:
    """What the caller learns, per dataset."""
    return sorted((rs["id"], rs["exists"], rs["info"]["answeredFrom"], rs["info"]["probeId"]) for rs in sets)


def test_every_spelling_of_a_cpg_is_one_question_over_http(
    store: tuple[Store, dict[str, str]], tmp_path: Path
) -> None:
    built, names = store
    cpg = built.shared[2]
    representative = names[cpg]  # _TC11
    spellings = [f"{cpg}_TC12", cpg, representative, f"{cpg}_BO21"]
    with running_server(built, tmp_path, POLICY) as (server, url):
        key = add_user(url, "alice")
        first = result_sets(
            post(server, key, {"probeId": spellings[0], "minValue": 0.5, "datasetIds": [EPIC]})
        )
        assert [rs["info"]["cached"] for rs in first] == [False]
        assert first[0]["info"]["probeId"] == representative  # the probe that answered
        after_first = ledger_state(url)
        for spelling in spellings[1:]:
            get_sets = result_sets(get(server, key, f"probeId={spelling}&minValue=0.5&datasetIds={EPIC}"))
            post_sets = result_sets(
                post(server, key, {"probeId": spelling, "minValue": 0.5, "datasetIds": [EPIC]})
            )
            for sets in (get_sets, post_sets):
                assert seen(sets) == seen(first), spelling
                assert all(rs["info"]["cached"] for rs in sets), spelling
        batch = result_sets(
            post(server, key, [{"probeId": s, "minValue": 0.5, "datasetIds": [EPIC]} for s in spellings])
        )
        assert {(rs["exists"], rs["info"]["probeId"]) for rs in batch} == {
            (first[0]["exists"], representative)
        }
        accounts, audit = ledger_state(url)
        assert accounts == after_first[0], "another spelling of the CpG spent or cached something"
        assert [(p, d, answers) for p, d, answers, *_ in accounts] == [("user:alice", EPIC, 1)]
        # a fresh question in every spelling in one batch: answered once, the rest share that answer
        fresh = result_sets(
            post(server, key, [{"probeId": s, "minValue": 0.7, "datasetIds": [EPIC]} for s in spellings])
        )
        assert len({(rs["exists"], rs["info"]["probeId"]) for rs in fresh}) == 1
        assert [rs["info"]["cached"] for rs in fresh] == [False, True, True, True]
        assert [answers for _, _, answers, *_ in ledger_state(url)[0]] == [2]
        logged = [json.loads(e["query"]) for e in audit if e["event"] == "query"]
        assert {q["probe"] for q in logged} == {representative}  # as sent in probeId, resolved in probe
        assert {q["probeId"] for q in logged} == set(spellings)

        # the 450K cohort answers an EPIC v2 id of a CpG it has, as it answers the bare name
        other = built.shared[0]
        epic_id = names[other]
        by_epic = result_sets(post(server, key, {"probeId": epic_id, "minValue": 0.3, "datasetIds": [DEMO]}))
        assert by_epic[0]["info"]["probeId"] == other and not by_epic[0]["info"]["cached"]
        by_bare = result_sets(get(server, key, f"probeId={other}&minValue=0.3&datasetIds={DEMO}"))
        assert seen(by_bare) == seen(by_epic) and by_bare[0]["info"]["cached"]

        # one id, every dataset that has the CpG: the 450K ones by the bare name, the EPIC v2 one by its probe
        everywhere = result_sets(get(server, key, f"probeId={epic_id}&minValue=0.3"))
        assert {rs["id"]: rs["info"]["probeId"] for rs in everywhere}[EPIC] == epic_id
        assert {rs["info"]["probeId"] for rs in everywhere if rs["id"] != EPIC} == {other}

        # a CpG no dataset has: 400 naming the field, nothing spent or recorded
        before = ledger_state(url)
        for unknown in ("cg99999999_TC21", "cg99999999", f"{cpg}_tc12"):
            refused = post(server, key, {"probeId": unknown, "minValue": 0.5, "datasetIds": [EPIC]})
            assert refused.status_code == 400, refused.text
            validate(refused.json(), ERROR)
            assert "query.requestParameters.probeId" in refused.json()["error"]["errorMessage"]
        assert "did you mean" in refused.json()["error"]["errorMessage"]  # the lower-case suffix
        assert ledger_state(url) == before

        # the public prior page reads the prior by CpG, and the type-ahead lists the stored ids
        prior_of = {
            s: httpx.get(
                f"{server.url}/api/prior",
                params={"datasetId": EPIC, "probeId": s, "minValue": 0.5},
                headers=bearer(key),
                timeout=30,
            )
            for s in spellings
        }
        assert all(r.status_code == 200 for r in prior_of.values()), [r.text for r in prior_of.values()]
        assert len({r.json()["range"]["probability"] for r in prior_of.values()}) == 1
        assert prior_of[cpg].json()["model"] != "uniform"  # the 450K prior has the CpG
        probes = httpx.get(
            f"{server.url}/api/prior/probes",
            params={"datasetId": EPIC, "prefix": cpg},
            headers=bearer(key),
            timeout=30,
        )
        assert probes.status_code == 200 and probes.json()["probeIds"] == [f"{cpg}_TC11", f"{cpg}_TC12"]

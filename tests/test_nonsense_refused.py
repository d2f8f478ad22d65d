"""A question about a probe no targeted dataset has is refused before it costs anything.

An unknown ``probeId`` (a typo, an upper-case Illumina id) or a ``referenceName`` + ``start`` that no
probe of the targeted datasets is at would otherwise run through SVT² with a count of 0 against a
uniform prior and spend a positive on nonsense. The probe lists are public (docs/threat-model.md), so
refusing says nothing about the patients. Each refusal must be a 400 in the Beacon error schema whose
message names the field (and, in a batch, the query's index), and the ledger must be exactly as
before: no account opened, no budget spent, no cached answer, no audit row. A query aimed at several
datasets is answered by those that have its probe.

Fast part: the Flask app on the store of ``questions.py``. End to end: the same over HTTP against a
real ``mbeacon serve`` (gunicorn), reading its SQLite ledger.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from beacon_schemas import validate
from flask import Flask
from questions import (
    CHROMOSOME,
    DEMO,
    POSITIONED,
    SECOND,
    Store,
    add_user,
    body,
    build_store,
    get,
    ledger_state,
    position_of,
    post,
    running_server,
)

from mbeacon.api import create_app

ERROR = "responses/beaconErrorResponse.json"
RESULTSETS = "responses/beaconResultsetsResponse.json"
POLICY = {"mechanism": "svt2", "c": 5, "epsilon": 1.0}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return build_store(tmp_path_factory.getbasetemp(), tmp_path_factory.mktemp("nonsense") / "store")


@pytest.fixture
def app(store: Store, tmp_path: Path) -> Iterator[Flask]:
    ledger = f"sqlite:///{tmp_path}/ledger.sqlite3"
    app = create_app({"store": str(store.root), "database_url": ledger, "default_prior": store.prior,
                      "rate_limit_per_minute": 0, "defaults": POLICY})  # fmt: skip
    yield app
    app.config["MBEACON"].ledger.close()


def app_state(app: Flask) -> tuple[list, list]:
    ledger = app.config["MBEACON"].ledger
    accounts = sorted((a.principal, a.dataset, answers, repr(a.state), repr(a.budget()))
                      for a, answers in ledger.accounts_and_answers())  # fmt: skip
    return accounts, ledger.audit_log(limit=100_000)


def refused_in_app(app: Flask, key: str, send: dict, message: str) -> str:
    """Send ``send`` (``{"get": params}`` or ``{"post": params}``): a 400 saying ``message``, the
    ledger unchanged."""
    before = app_state(app)
    client = app.test_client()
    headers = {"Authorization": f"Bearer {key}"}
    if "get" in send:
        response = client.get("/api/methylation", query_string=send["get"], headers=headers)
    else:
        response = client.post("/api/methylation", json=body(send["post"]), headers=headers)
    data = response.get_json()
    assert response.status_code == 400, data
    validate(data, ERROR)
    text = data["error"]["errorMessage"]
    assert message in text, text
    assert app_state(app) == before, "a refused question changed the ledger"
    return text


def answered_in_app(app: Flask, key: str, params: dict | list) -> list[dict]:
    response = app.test_client().post(
        "/api/methylation", json=body(params), headers={"Authorization": f"Bearer {key}"}
    )
    data = response.get_json()
    assert response.status_code == 200, data
    validate(data, RESULTSETS)
    return data["response"]["resultSets"]


@pytest.mark.parametrize("opened", [False, True], ids=["no account yet", "account open"])
@pytest.mark.parametrize("probe", ["cg99999999", "cg1", "x"])
@pytest.mark.parametrize("method", ["get", "post"])
def test_an_unknown_probe_is_400_naming_probe_id(app, store, opened: bool, probe: str, method: str) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice")
    if opened:
        answered_in_app(app, key, {"probeId": store.shared[0], "datasetIds": [DEMO]})
    params = {"probeId": probe, "datasetIds": DEMO if method == "get" else [DEMO]}
    message = f"query.requestParameters.probeId: {probe!r} is not a probe of dataset {DEMO!r}"
    text = refused_in_app(app, key, {method: params}, message)
    assert "batch" not in text


def test_an_upper_case_illumina_id_is_refused_with_the_id_it_means(app, store) -> None:
    """Probe ids are case-sensitive (a cohort's ids are what its file holds); Illumina's are lower-case."""
    key = app.config["MBEACON"].ledger.add_user("alice")
    probe = store.shared[1]
    text = refused_in_app(app, key, {"get": {"probeId": probe.upper()}}, "query.requestParameters.probeId")
    assert f"did you mean {probe!r}" in text
    # over every dataset: named as several
    assert f"any of the datasets {DEMO!r}, {POSITIONED!r}, {SECOND!r}" in text


def test_a_batch_with_one_unknown_probe_is_refused_whole(app, store) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice")
    good = [{"probeId": p, "datasetIds": [DEMO]} for p in store.shared[:3]]
    text = refused_in_app(app, key, {"post": [*good, {"probeId": "cg99999999"}, *good]},
                          "query.requestParameters[3].probeId: 'cg99999999'")  # fmt: skip
    assert "the batch is refused whole (nothing was answered or spent)" in text
    position = {"referenceName": CHROMOSOME, "start": 5, "datasetIds": [POSITIONED]}
    refused_in_app(app, key, {"post": [*good, position]}, "query.requestParameters[3].referenceName, start")
    assert len(answered_in_app(app, key, good)) == 3  # the good queries alone are answered


def test_a_position_on_a_cohort_without_positions_is_400(app, store) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice")
    for send in ({"get": {"referenceName": CHROMOSOME, "start": "999", "datasetIds": SECOND}},
                 {"post": {"referenceName": "X", "start": [5], "datasetIds": [SECOND]}}):  # fmt: skip
        text = refused_in_app(app, key, send, "query.requestParameters.referenceName, start:")
        assert "has no probe positions" in text and "probeId" in text


def test_a_position_no_probe_is_at_is_400_and_a_probe_position_is_answered(app, store) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice")
    at = position_of(7)  # 1-based in the manifest; a query's start is 0-based
    for chromosome, start in [(CHROMOSOME, at), (CHROMOSOME, at - 2), ("chr8", at - 1)]:
        send = {"get": {"referenceName": chromosome, "start": str(start), "datasetIds": POSITIONED}}
        text = refused_in_app(app, key, send, "query.requestParameters.referenceName, start: no probe of")
        assert f"{chromosome}:{start} (0-based start)" in text
    # the right position, with or without "chr", over every dataset: answered by the positioned one
    for chromosome in (CHROMOSOME, CHROMOSOME.removeprefix("chr")):
        (answer,) = answered_in_app(app, key, {"referenceName": chromosome, "start": at - 1})
        assert (answer["id"], answer["info"]["probeId"]) == (POSITIONED, store.shared[7])


def test_a_query_is_answered_by_the_datasets_that_have_its_probe(app, store) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice")
    probe = store.demo_only[0]
    for datasets in ([DEMO, SECOND], [SECOND, POSITIONED, DEMO], None):
        params = {"probeId": probe} if datasets is None else {"probeId": probe, "datasetIds": datasets}
        (answer,) = answered_in_app(app, key, params)
        assert answer["id"] == DEMO
    refused_in_app(app, key, {"post": {"probeId": probe, "datasetIds": [SECOND, POSITIONED]}},
                   f"is not a probe of any of the datasets {POSITIONED!r}, {SECOND!r}")  # fmt: skip
    # no account of the datasets that lack it was opened or charged
    assert {dataset for _, dataset, *_ in app_state(app)[0]} == {DEMO}


def test_test_mode_refuses_an_unknown_probe_too(app) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice")
    send = {"get": {"probeId": "cg99999999", "testMode": "true"}}
    refused_in_app(app, key, send, "query.requestParameters.probeId: 'cg99999999'")


# --- end to end ---------------------------------------------------------------------------------


def test_nonsense_is_refused_by_a_real_server_and_spends_nothing(store, tmp_path: Path) -> None:
    with running_server(store, tmp_path, POLICY) as (server, url):
        key = add_user(url, "alice")

        def refused(response, message: str) -> None:
            data = response.json()
            assert response.status_code == 400, data
            validate(data, ERROR)
            assert message in data["error"]["errorMessage"], data

        cases = [
            (lambda: get(server, key, "probeId=cg99999999"), "query.requestParameters.probeId: 'cg99999999'"),
            (lambda: post(server, key, {"probeId": store.shared[0].upper()}),
             f"did you mean {store.shared[0]!r}"),
            (lambda: get(server, key, f"referenceName={CHROMOSOME}&start=1&datasetIds={SECOND}"),
             "has no probe positions"),
            (lambda: post(server, key, {"referenceName": CHROMOSOME, "start": 3, "datasetIds": [POSITIONED]}),
             "no probe of dataset 'positioned-cohort' is at chr7:3"),
            (lambda: post(server, key, [{"probeId": store.shared[0]}, {"probeId": "cg00000029"}]),
             "query.requestParameters[1].probeId: 'cg00000029'"),
        ]  # fmt: skip
        for round_ in ("before any answer", "after an answer"):
            for send, message in cases:
                before = ledger_state(url)
                refused(send(), message)
                assert ledger_state(url) == before, f"{round_}: {message}"
            if round_ == "before any answer":
                accounts, audit = ledger_state(url)
                assert accounts == [], "nothing was asked that could open an account"
                assert [entry["event"] for entry in audit] == ["user_add"]
                response = post(server, key, {"probeId": store.shared[0]})
                assert response.status_code == 200, response.text
                validate(response.json(), RESULTSETS)
        accounts, audit = ledger_state(url)
        assert [answers for _, _, answers, *_ in accounts] == [1, 1, 1]  # the one good query, per dataset
        assert [entry["event"] for entry in audit].count("query") == 3

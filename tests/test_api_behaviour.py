"""Behaviour of the service over the Flask test client: budgets, caching, scopes, tiers, admin API,
operations endpoints, rate limits, and that no secret (noisy threshold, API key) leaves the ledger.

Each test gets its own app and ledger (``make_app``: ~0.1 s); the store (the demo cohort plus small
copies with other policies) is built once per module.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest
from flask import Flask
from hypothesis import given, settings
from hypothesis import strategies as st
from log_capture import capture_logs

from mbeacon.api import ratelimit
from mbeacon.beacon.config import ConfigError
from mbeacon.beacon.query import MethylationQuery
from mbeacon.beacon.release import audit_text
from mbeacon.privacy.svt2 import SVT2State
from mbeacon.store.cohorts import CohortStore
from mbeacon.store.demo import DEMO_DATASET

DEMO = DEMO_DATASET
PRIOR = "prior-cohort"
GROUP = "group-cohort"
GLOBAL = "global-cohort"
CONTROLLED = "controlled-cohort"
PUBLIC = "public-cohort"
REDRAW = "redraw-cohort"
C = 5
POLICY = {"mechanism": "svt2", "c": C, "epsilon": 1.0}
DATASETS = {
    DEMO: {**POLICY},
    PRIOR: {**POLICY, "on_exhausted": "prior"},
    GROUP: {**POLICY, "scope": "group"},
    GLOBAL: {**POLICY, "scope": "global"},
    CONTROLLED: {**POLICY, "tier": "CONTROLLED", "count_epsilon": 0.2},
    PUBLIC: {**POLICY, "tier": "PUBLIC"},
    REDRAW: {**POLICY, "variant": "redraw"},
}
EXTRA_PROBES = 200


# --- fixtures and helpers ---------------------------------------------------------------------


@pytest.fixture
def probes(store: Path) -> list[str]:
    return CohortStore(store).open(DEMO).probe_ids[:EXTRA_PROBES].tolist()


class Fresh:
    """Distinct queries, never repeated within a test (200 probes x 100 narrow ranges near 1)."""

    def __init__(self, probes: list[str]) -> None:
        self._stream = (
            {"probeId": p, "minValue": round(0.9 + k / 1000, 3)} for k in range(100) for p in probes
        )

    def take(self, n: int, dataset: str) -> list[dict]:
        return [{**next(self._stream), "datasetIds": [dataset]} for _ in range(n)]


@pytest.fixture
def fresh(probes: list[str]) -> Fresh:
    return Fresh(probes)


@pytest.fixture
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rate limiter's clock stands still 10 s into a one-minute window (no window turns mid-test)."""
    monkeypatch.setattr(ratelimit, "time", SimpleNamespace(time=lambda: 60 * 16_667 + 10.0))


def bearer(key: str | None) -> dict:
    return {"Authorization": f"Bearer {key}"} if key else {}


def body(params, *, granularity: str = "boolean", include: str = "ALL") -> dict:
    return {
        "meta": {"apiVersion": "v2.0.0"},
        "query": {
            "requestParameters": params,
            "requestedGranularity": granularity,
            "includeResultsetResponses": include,
        },
    }


def post(client, key: str | None, params, **options):
    return client.post("/api/methylation", json=body(params, **options), headers=bearer(key))


def result_sets(response) -> list[dict]:
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()["response"]["resultSets"]


def budget_of(client, key: str | None, dataset: str) -> dict:
    response = client.get("/api/budget", headers=bearer(key))
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()["response"]["budgets"][dataset]


def exhaust(client, key: str | None, dataset: str, fresh: Fresh, *, batch: int = 250) -> list:
    """POST batches of fresh queries until the budget is spent; every 200 response, in order."""
    responses = []
    for _ in range(10_000 // batch):
        response = post(client, key, fresh.take(batch, dataset))
        if response.status_code == 429:
            return responses
        assert response.status_code == 200, response.get_data(as_text=True)
        responses.append(response)
        budget = response.get_json()["info"]["budgets"][dataset]
        if budget["positivesUsed"] == budget["positivesTotal"]:
            return responses
    pytest.fail(f"the budget on {dataset} was not exhausted by 10,000 fresh queries")


def sources(responses) -> list[str]:
    return [rs["info"]["answeredFrom"] for r in responses for rs in result_sets(r)]


def ledger_account(app: Flask, holder: str, dataset: str):
    found = [
        a for a in app.config["MBEACON"].ledger.accounts() if (a.principal, a.dataset) == (holder, dataset)
    ]
    assert len(found) == 1, f"no account {holder} on {dataset}"
    return found[0]


def answers_given(app: Flask, holder: str, dataset: str) -> int:
    """The number of answers the account has given (as the admin API and ``budget show`` count it)."""
    counts = {(a.principal, a.dataset): n for a, n in app.config["MBEACON"].ledger.accounts_and_answers()}
    return counts[(holder, dataset)]


# --- the budget: at most c data answers -------------------------------------------------------


def test_at_most_c_data_answers_then_refused(app, fresh) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice")
    client = app.test_client()
    responses = exhaust(client, key, DEMO, fresh)
    answered = sources(responses)
    assert answered.count("data") == C
    assert set(answered) <= {"data", "prior", "refused"}
    # the batch that ran out is answered up to the last positive; the rest is refused, not guessed
    assert "refused" not in answered[: len(answered) - answered[::-1].index("data")]
    # every further fresh query is refused, single or batch, GET or POST
    for params in fresh.take(3, DEMO):
        get = client.get("/api/methylation", query_string={**params, "datasetIds": DEMO}, headers=bearer(key))
        assert get.status_code == 429
    assert post(client, key, fresh.take(50, DEMO)).status_code == 429
    account = ledger_account(app, "user:alice", DEMO)
    assert account.state.count == C
    assert account.exhausted
    refusals = [e for e in app.config["MBEACON"].ledger.audit_log(limit=50) if e["event"] == "refused"]
    assert refusals and refusals[0]["dataset"] == DEMO


def test_exhausted_account_still_serves_its_cached_answers(app, fresh) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice")
    client = app.test_client()
    responses = exhaust(client, key, DEMO, fresh)
    answered = [rs for rs in result_sets(responses[0]) if rs["info"]["answeredFrom"] != "refused"][:20]
    assert answered
    again = [{"probeId": rs["info"]["probeId"], "minValue": rs["info"]["range"][0], "datasetIds": [DEMO]}
             for rs in answered]  # fmt: skip
    sets = result_sets(post(client, key, again))
    assert all(rs["info"]["cached"] for rs in sets)
    assert [(rs["exists"], rs["info"]["answeredFrom"]) for rs in sets] == [
        (rs["exists"], rs["info"]["answeredFrom"]) for rs in answered
    ]


def test_single_queries_never_exceed_c_data_answers(app, fresh) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice")
    client = app.test_client()
    data = 0
    for params in fresh.take(3000, DEMO):
        response = client.get(
            "/api/methylation",
            query_string={**params, "datasetIds": DEMO, "includeResultsetResponses": "ALL"},
            headers=bearer(key),
        )
        if response.status_code == 429:
            break
        data += sources([response]).count("data")
        assert data <= C
    else:
        pytest.fail("3000 single queries did not exhaust the budget")
    assert data == C


def test_exhausted_prior_policy_answers_from_the_prior(app, fresh) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice")
    client = app.test_client()
    responses = exhaust(client, key, PRIOR, fresh)
    assert sources(responses).count("data") == C
    for _ in range(3):
        sets = result_sets(post(client, key, fresh.take(100, PRIOR)))
        assert len(sets) == 100
        assert {rs["info"]["answeredFrom"] for rs in sets} == {"prior"}
        assert all(rs["info"]["budgetExhausted"] is True for rs in sets)
        assert all(rs["info"]["positivesUsed"] == C for rs in sets)
    single = client.get(
        "/api/methylation",
        query_string={**fresh.take(1, PRIOR)[0], "datasetIds": PRIOR, "includeResultsetResponses": "ALL"},
        headers=bearer(key),
    )
    (rs,) = result_sets(single)
    assert rs["info"]["answeredFrom"] == "prior" and rs["info"]["budgetExhausted"] is True
    assert ledger_account(app, "user:alice", PRIOR).state.count == C


# --- caching and batches ----------------------------------------------------------------------


def test_identical_query_is_answered_from_the_cache(app, probes) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice")
    client = app.test_client()
    query = {"probeId": probes[7], "minValue": 0.25, "maxValue": 0.75, "datasetIds": DEMO}
    first = client.get(
        "/api/methylation", query_string={**query, "includeResultsetResponses": "ALL"}, headers=bearer(key)
    )
    (answer,) = result_sets(first)
    assert answer["info"]["cached"] is False
    before = ledger_account(app, "user:alice", DEMO)
    given_before = answers_given(app, "user:alice", DEMO)
    budget = budget_of(client, key, DEMO)
    for _ in range(5):
        again = client.get(
            "/api/methylation",
            query_string={**query, "includeResultsetResponses": "ALL"},
            headers=bearer(key),
        )
        (repeat,) = result_sets(again)
        assert repeat["info"]["cached"] is True
        assert repeat["exists"] == answer["exists"]
        assert repeat["info"]["answeredFrom"] == answer["info"]["answeredFrom"]
    # the same query sent as a POST body is the same query
    params = {**query, "datasetIds": [DEMO]}
    (via_post,) = result_sets(post(client, key, params))
    assert via_post["info"]["cached"] is True and via_post["exists"] == answer["exists"]
    after = ledger_account(app, "user:alice", DEMO)
    assert (after.state, answers_given(app, "user:alice", DEMO)) == (before.state, given_before)
    assert budget_of(client, key, DEMO) == budget


def test_batch_is_answered_in_order_and_duplicates_once(app, probes) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice")
    client = app.test_client()
    q = [{"probeId": probes[i], "minValue": 0.1 * i, "datasetIds": [DEMO]} for i in range(4)]
    batch = [q[0], q[1], q[0], q[2], q[1], q[3], q[0]]
    sets = result_sets(post(client, key, batch))
    assert [rs["info"]["queryIndex"] for rs in sets] == list(range(len(batch)))
    assert [rs["info"]["probeId"] for rs in sets] == [p["probeId"] for p in batch]
    by_query: dict[str, dict] = {}
    for params, rs in zip(batch, sets, strict=True):
        name = json.dumps(params, sort_keys=True)
        if name in by_query:
            assert rs["exists"] == by_query[name]["exists"]
            assert rs["info"]["answeredFrom"] == by_query[name]["info"]["answeredFrom"]
            assert rs["info"]["cached"] is True
        else:
            by_query[name] = rs
            assert rs["info"]["cached"] is False
    assert answers_given(app, "user:alice", DEMO) == 4  # four distinct queries, each once
    # several datasets: ordered by query, then dataset
    both = result_sets(
        post(client, key, [{**q[0], "datasetIds": [PRIOR, DEMO]}, {**q[1], "datasetIds": [DEMO]}])
    )
    assert [(rs["info"]["queryIndex"], rs["id"]) for rs in both] == [(0, DEMO), (0, PRIOR), (1, DEMO)]


def test_a_query_alone_sees_what_it_sees_in_a_batch(app, probes) -> None:
    """alpha and beta of a single query (the plain-float path) equal those of the same query in a
    batch (the array path): a query's answer cannot depend on how it was sent."""
    engine = app.config["MBEACON"].engine
    queries = [
        MethylationQuery(probe, None, None, lo, hi, None)
        for probe in [*probes[:20], "cgNOTINTHECOHORT"]
        for lo, hi in [(0.0, 1.0), (0.25, 0.75), (0.6, 0.2), (0.1234567, 0.1234568), (0.5, 0.5)]
    ]
    batch = engine._work(DEMO, list(range(len(queries))), queries, "boolean")
    for i, query in enumerate(queries):
        alone = engine._work(DEMO, [0], [query], "boolean")
        assert (alone.alpha[0], alone.beta[0]) == (batch.alpha[i], batch.beta[i]), query
        assert (alone.keys[0], alone.audit_texts[0]) == (batch.keys[i], batch.audit_texts[i])


@settings(max_examples=300, deadline=None)
@given(
    probe=st.text(max_size=20),
    resolved=st.one_of(st.none(), st.text(max_size=20)),
    lo=st.floats(0, 1),
    hi=st.floats(0, 1),
    granularity=st.sampled_from(["boolean", "count"]),
)
def test_audit_text_is_the_sorted_json_of_the_query(probe, resolved, lo, hi, granularity):
    """The audit log's text of a query is exactly ``json.dumps(..., sort_keys=True)`` of it. Only
    probe queries reach the audit: region and gene queries are expanded into them first."""
    query = MethylationQuery(probe, None, None, lo, hi, None)
    expected = json.dumps({**query.describe(), "probe": resolved, "granularity": granularity}, sort_keys=True)
    assert audit_text(query, resolved, granularity) == expected


def test_budget_fields_agree_everywhere(app, fresh) -> None:
    rt = app.config["MBEACON"]
    key = rt.ledger.add_user("alice")
    admin = rt.ledger.add_user("ops", role="admin")
    client = app.test_client()
    assert budget_of(client, key, DEMO)["positivesUsed"] == 0
    for _ in range(4):
        response = post(client, key, fresh.take(4, DEMO))
        if response.status_code == 429:  # spent already: nothing more to compare
            break
        in_response = response.get_json()["info"]["budgets"][DEMO]
        from_endpoint = budget_of(client, key, DEMO)
        account = ledger_account(app, "user:alice", DEMO)
        assert {k: from_endpoint[k] for k in in_response} == in_response
        assert account.budget() == in_response
        assert from_endpoint["budgetHolder"] == "user:alice"
        for rs in result_sets(response):
            assert {k: rs["info"][k] for k in in_response} == in_response
        listed = client.get("/api/admin/budget", query_string={"holder": "user:alice"}, headers=bearer(admin))
        (view,) = listed.get_json()["response"]["accounts"]
        assert {k: view[k] for k in in_response} == in_response
        assert view["queries"] == answers_given(app, "user:alice", DEMO) > 0


@pytest.mark.parametrize(
    ("dataset", "tier"),
    [(DEMO, "REGISTERED"), (REDRAW, "REGISTERED"), (CONTROLLED, "CONTROLLED")],
    ids=["single", "redraw", "count-epsilon"],
)
def test_epsilon_spent_within_total_and_equal_when_exhausted(app, fresh, dataset: str, tier: str) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice", tier=tier)
    client = app.test_client()
    responses = exhaust(client, key, dataset, fresh, batch=20)
    spent = [r.get_json()["info"]["budgets"][dataset] for r in responses]
    for budget in spent:
        assert 0 < budget["epsilonSpent"] <= budget["epsilonTotal"] + 1e-12
    assert [b["epsilonSpent"] for b in spent] == sorted(b["epsilonSpent"] for b in spent)
    final = budget_of(client, key, dataset)
    assert final["positivesUsed"] == final["positivesTotal"] == C
    assert final["epsilonSpent"] == pytest.approx(final["epsilonTotal"], abs=1e-9)


# --- budget scopes and anonymous callers ------------------------------------------------------


def test_group_scope_shares_one_budget(app, fresh) -> None:
    ledger = app.config["MBEACON"].ledger
    alice, bob = ledger.add_user("alice", group="lab"), ledger.add_user("bob", group="lab")
    dave = ledger.add_user("dave", group="other")
    client = app.test_client()
    answered = [rs for rs in result_sets(post(client, alice, fresh.take(10, GROUP)))
                if rs["info"]["answeredFrom"] != "refused"]  # fmt: skip
    params = [{"probeId": rs["info"]["probeId"], "minValue": rs["info"]["range"][0], "datasetIds": [GROUP]}
              for rs in answered]  # fmt: skip
    shared = budget_of(client, alice, GROUP)
    assert shared["budgetHolder"] == "group:lab"
    assert budget_of(client, bob, GROUP) == shared
    assert budget_of(client, dave, GROUP)["positivesUsed"] == 0
    # bob asking alice's questions gets alice's answers from the group's cache
    assert all(rs["info"]["cached"] for rs in result_sets(post(client, bob, params)))
    exhaust(client, alice, GROUP, fresh)
    assert post(client, bob, fresh.take(5, GROUP)).status_code == 429
    assert post(client, dave, fresh.take(5, GROUP)).status_code == 200
    assert ledger_account(app, "group:lab", GROUP).state.count == C
    assert not any(a.principal.startswith("user:") for a in ledger.accounts() if a.dataset == GROUP)


def test_global_scope_shares_one_budget(app, fresh) -> None:
    ledger = app.config["MBEACON"].ledger
    alice, dave = ledger.add_user("alice", group="lab"), ledger.add_user("dave", group="other")
    carol = ledger.add_user("carol", tier="CONTROLLED")
    client = app.test_client()
    exhaust(client, alice, GLOBAL, fresh)
    for key in (dave, carol):
        assert budget_of(client, key, GLOBAL)["budgetHolder"] == "global"
        assert budget_of(client, key, GLOBAL)["positivesUsed"] == C
        assert post(client, key, fresh.take(5, GLOBAL)).status_code == 429
    assert [(a.principal, a.dataset) for a in ledger.accounts()] == [("global", GLOBAL)]


def test_global_scope_includes_anonymous_callers(make_app, fresh) -> None:
    app = make_app(anonymous="shared", datasets={**DATASETS, GLOBAL: {**DATASETS[GLOBAL], "tier": "PUBLIC"}})
    alice = app.config["MBEACON"].ledger.add_user("alice")
    client = app.test_client()
    exhaust(client, alice, GLOBAL, fresh)
    assert budget_of(client, None, GLOBAL)["budgetHolder"] == "global"
    assert post(client, None, fresh.take(5, GLOBAL)).status_code == 429


def test_anonymous_refused_by_default(app, probes) -> None:
    client = app.test_client()
    response = client.get("/api/methylation", query_string={"probeId": probes[0], "datasetIds": PUBLIC})
    assert response.status_code == 401
    assert client.get("/api/budget").status_code == 401
    # strangers learn nothing, not even what is wrong with their query
    assert client.get("/api/methylation", query_string={"colour": "blue"}).status_code == 401
    assert (
        client.post("/api/methylation", data="{not json", content_type="application/json").status_code == 401
    )
    assert post(client, None, {"probeId": probes[0], "datasetIds": [PUBLIC]}).status_code == 401
    listed = client.get("/api/datasets").get_json()["response"]["collections"]
    assert [c["id"] for c in listed] == [PUBLIC]  # the catalogue is open, the data is not
    assert app.config["MBEACON"].ledger.accounts() == []


def test_anonymous_shared_budget(make_app, fresh) -> None:
    app = make_app(anonymous="shared")
    client, other = app.test_client(), app.test_client()
    post(client, None, fresh.take(40, PUBLIC))
    budget = budget_of(other, None, PUBLIC)
    assert budget["budgetHolder"] == "anonymous"
    assert budget == budget_of(client, None, PUBLIC)
    assert list(client.get("/api/budget").get_json()["response"]["budgets"]) == [PUBLIC]
    exhaust(other, None, PUBLIC, fresh)
    assert post(client, None, fresh.take(5, PUBLIC)).status_code == 429
    assert post(client, None, fresh.take(1, DEMO)).status_code == 403  # anonymous is PUBLIC tier
    assert [(a.principal, a.dataset) for a in app.config["MBEACON"].ledger.accounts()] == [
        ("anonymous", PUBLIC)
    ]


def test_get_options_are_checked_by_name_and_a_repeated_name_counts_once(app, fresh) -> None:
    from werkzeug.datastructures import MultiDict

    key = app.config["MBEACON"].ledger.add_user("alice")
    client = app.test_client()
    params = {**fresh.take(1, DEMO)[0], "datasetIds": DEMO}
    for name, value in (("requestedGranularity", "records"), ("includeResultsetResponses", "hit")):
        bad = client.get("/api/methylation", query_string={**params, name: value}, headers=bearer(key))
        assert bad.status_code == 400 and name in bad.get_json()["error"]["errorMessage"]
    include = [("includeResultsetResponses", "ALL"), ("includeResultsetResponses", "NONE")]
    repeated = MultiDict([*params.items(), *include])
    assert len(result_sets(client.get("/api/methylation", query_string=repeated, headers=bearer(key)))) == 1


def test_test_mode_answers_from_the_prior_for_free(app, fresh) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice")
    client = app.test_client()
    value = body(fresh.take(200, DEMO))
    value["query"]["testMode"] = True
    sets = result_sets(client.post("/api/methylation", json=value, headers=bearer(key)))
    assert len(sets) == 200 and {rs["info"]["answeredFrom"] for rs in sets} == {"prior"}
    assert app.config["MBEACON"].ledger.accounts() == []  # nothing spent, no account opened
    params = {**fresh.take(1, DEMO)[0], "datasetIds": DEMO, "testMode": "true"}
    get = client.get("/api/methylation", query_string={**params, "includeResultsetResponses": "ALL"},
                     headers=bearer(key))  # fmt: skip
    assert result_sets(get)[0]["info"]["answeredFrom"] == "prior"
    assert budget_of(client, key, DEMO)["positivesUsed"] == 0
    hidden = {**params, "datasetIds": CONTROLLED}
    assert client.get("/api/methylation", query_string=hidden, headers=bearer(key)).status_code == 403


def test_test_mode_on_an_unprotected_dataset_without_a_prior(store: Path, tmp_path: Path, probes) -> None:
    """With two priors in the store and none named, an unprotected dataset has no prior: test mode then
    answers from the uniform fallback instead of failing (an SVT² dataset would refuse to start)."""
    from mbeacon.api import create_app
    from mbeacon.store.priors import load_prior, save_prior

    root = tmp_path / "store"
    shutil.copytree(store, root)
    prior = load_prior(root, "demo-general-population")
    save_prior(root, type(prior)(**{**prior.__dict__, "name": "second-prior"}))
    (root / "priors" / "DEFAULT").unlink()  # no recorded default: none is chosen
    unprotected = {"mechanism": "none", "allow_unprotected": True}
    app = create_app({"store": str(root), "database_url": f"sqlite:///{tmp_path}/ledger.sqlite3",
                      "defaults": unprotected, "datasets": {}})  # fmt: skip
    key = app.config["MBEACON"].ledger.add_user("alice")
    params = {"probeId": probes[0], "minValue": 0.2, "maxValue": 0.7, "datasetIds": DEMO}
    response = app.test_client().get(
        "/api/methylation",
        query_string={**params, "testMode": "true", "includeResultsetResponses": "ALL"},
        headers=bearer(key),
    )
    assert response.status_code == 200, response.get_json()
    (result_set,) = result_sets(response)
    assert result_set["info"]["answeredFrom"] == "prior"
    assert result_set["exists"] is True  # 60 patients x 0.5 uniform mass >= 1
    app.config["MBEACON"].ledger.close()


def test_a_replaced_dataset_file_is_served_from_the_next_request(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Publishing a new version of a dataset (an atomic rename into the store) is picked up without a
    restart, and the old version's cached answer is not served for the new one."""
    import numpy as np

    from mbeacon.api import create_app
    from mbeacon.beacon import engine

    root = tmp_path / "store"
    shutil.copytree(store, root)
    old = CohortStore(root).open(DEMO)
    probe = str(old.probe_ids[0])
    low = float(np.nanmin(old.rows(np.array([0]))))
    unprotected = {"mechanism": "none", "allow_unprotected": True}
    app = create_app({"store": str(root), "database_url": f"sqlite:///{tmp_path}/ledger.sqlite3",
                      "defaults": unprotected, "datasets": {}})  # fmt: skip
    key = app.config["MBEACON"].ledger.add_user("alice")
    client = app.test_client()
    query = {"probeId": probe, "minValue": 0.0, "maxValue": low + 0.01, "datasetIds": DEMO,
             "includeResultsetResponses": "ALL"}  # fmt: skip

    def ask() -> dict:
        response = client.get("/api/methylation", query_string=query, headers=bearer(key))
        assert response.status_code == 200, response.get_json()
        (result_set,) = result_sets(response)
        return result_set

    assert ask()["exists"] is True
    above = np.full((1, old.n_patients), min(low + 0.5, 1.0), dtype=np.float32)
    CohortStore(root).write(DEMO, old.sample_ids.tolist(), [([probe], above)], replace=True)
    again = ask()
    assert again["exists"] is False, "the old file is still served"
    assert again["info"]["cached"] is False
    # A second change within one timestamp tick leaves the folder's mtime as it was: still picked up.
    folder = root / "datasets"
    seen = folder.stat().st_mtime_ns
    CohortStore(root).write(DEMO, old.sample_ids.tolist(), [([probe], old.rows(np.array([0])))], replace=True)
    os.utime(folder, ns=(seen, seen))
    monkeypatch.setattr(engine, "SETTLE_NS", 60 * 10**9)  # "just changed", however slow this machine is
    assert ask()["exists"] is True, "a change hidden in one mtime tick is missed"
    app.config["MBEACON"].ledger.close()


# --- tiers and granularity --------------------------------------------------------------------


def test_tier_rules(app, probes) -> None:
    ledger = app.config["MBEACON"].ledger
    alice, carol = ledger.add_user("alice"), ledger.add_user("carol", tier="CONTROLLED")
    client = app.test_client()

    def refusal(key: str, dataset: str) -> str:
        response = client.get(
            "/api/methylation",
            query_string={"probeId": probes[0], "datasetIds": dataset},
            headers=bearer(key),
        )
        assert response.status_code == 403
        return response.get_json()["error"]["errorMessage"]

    hidden, missing = refusal(alice, CONTROLLED), refusal(alice, "no-such-cohort")
    assert hidden.replace(CONTROLLED, "X") == missing.replace("no-such-cohort", "X")
    assert refusal(alice, f"{DEMO},{CONTROLLED}") == hidden  # no partial answer either
    seen = {
        c["id"]
        for c in client.get("/api/datasets", headers=bearer(alice)).get_json()["response"]["collections"]
    }
    assert CONTROLLED not in seen and DEMO in seen and PUBLIC in seen
    assert (
        CONTROLLED not in client.get("/api/budget", headers=bearer(alice)).get_json()["response"]["budgets"]
    )
    # no datasetIds: every dataset the caller may see, and no other
    sets = result_sets(post(client, alice, {"probeId": probes[0]}))
    assert CONTROLLED not in {rs["id"] for rs in sets} and len(sets) == len(DATASETS) - 1
    assert not any(a.dataset == CONTROLLED for a in ledger.accounts())
    # a CONTROLLED caller sees and queries it
    seen = {
        c["id"]
        for c in client.get("/api/datasets", headers=bearer(carol)).get_json()["response"]["collections"]
    }
    assert seen == set(DATASETS)
    assert len(result_sets(post(client, carol, {"probeId": probes[0], "datasetIds": [CONTROLLED]}))) == 1


@pytest.mark.parametrize(
    ("tier", "datasets", "expected"),
    [
        ("CONTROLLED", [CONTROLLED], "count"),
        ("CONTROLLED", [DEMO], "boolean"),  # count_epsilon = 0
        ("CONTROLLED", [CONTROLLED, DEMO], "boolean"),  # one dataset without noisy counts
        ("REGISTERED", [DEMO], "boolean"),
        ("REGISTERED", [PUBLIC], "boolean"),
    ],
)
def test_count_granularity_rules(app, probes, tier: str, datasets: list[str], expected: str) -> None:
    key = app.config["MBEACON"].ledger.add_user("someone", tier=tier)
    client = app.test_client()
    response = post(
        client, key, {"probeId": probes[3], "minValue": 0.4, "datasetIds": datasets}, granularity="count"
    )
    data = response.get_json()
    assert data["meta"]["returnedGranularity"] == expected
    assert data["meta"]["receivedRequestSummary"]["requestedGranularity"] == "count"
    if expected == "count":
        assert isinstance(data["responseSummary"]["numTotalResults"], int)
        assert data["responseSummary"]["numTotalResults"] >= 0
    else:  # a yes tells "at least T" (the public threshold), a no 0; both marked imprecise
        config = app.config["MBEACON"].config
        for rs in data["response"]["resultSets"]:
            assert rs["resultsCount"] == (config.policy(rs["id"]).threshold if rs["exists"] else 0)
            assert rs["countPrecision"] == "imprecise"
        told = sum(rs["resultsCount"] for rs in data["response"]["resultSets"])
        assert data["responseSummary"]["numTotalResults"] == told
        assert data["responseSummary"]["countPrecision"] == "imprecise"
    boolean = post(client, key, {"probeId": probes[3], "minValue": 0.4, "datasetIds": datasets})
    assert boolean.get_json()["meta"]["returnedGranularity"] == "boolean"


def test_unprotected_mechanism_needs_explicit_consent(make_app, probes) -> None:
    unprotected = {DEMO: {**POLICY, "mechanism": "none"}}
    with pytest.raises(ConfigError, match="allow_unprotected"):
        make_app(datasets=unprotected)
    records = capture_logs()
    try:
        app = make_app(datasets={DEMO: {**POLICY, "mechanism": "none", "allow_unprotected": True}})
    finally:
        logging.getLogger("mbeacon").removeHandler(records)
    assert "UNPROTECTED" in records.stream.getvalue()
    key = app.config["MBEACON"].ledger.add_user("alice")
    sets = result_sets(
        post(app.test_client(), key, [{"probeId": p, "datasetIds": [DEMO]} for p in probes[:50]])
    )
    assert {rs["info"]["answeredFrom"] for rs in sets} == {"data"}
    assert all(rs["info"]["positivesUsed"] == 0 and rs["info"]["epsilonSpent"] == 0 for rs in sets)


# --- secrets ----------------------------------------------------------------------------------

# Drawn thresholds are multiples of the lattice step (10.0, -13.0, ...), which public numbers can equal
# by chance; distinctive values planted in an account through the ledger make the text search exact.
Z1, Z2 = 7.3190482651, -4.2871539046


def _keys_in(value) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys_in(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys_in(v)}
    return set()


def test_no_thresholds_or_keys_in_responses_or_logs(make_app, probes, fresh) -> None:
    handler = capture_logs()
    try:
        app = make_app()
        rt = app.config["MBEACON"]
        alice, carol = rt.ledger.add_user("alice"), rt.ledger.add_user("carol", tier="CONTROLLED")
        revoked = rt.ledger.add_user("eve")
        rt.ledger.revoke_user("eve")
        admin = rt.ledger.add_user("ops", role="admin")
        forged = alice[: -len("x" * 43)] + "x" * 43  # alice's key id, a wrong secret
        client = app.test_client()
        bodies: list[str] = []

        def call(method: str, path: str, **kwargs):
            response = client.open(path, method=method, **kwargs)
            bodies.append(response.get_data(as_text=True))
            return response

        call(
            "GET",
            "/api/methylation",
            query_string={"probeId": probes[0], "datasetIds": DEMO},
            headers=bearer(alice),
        )
        with rt.ledger.db.transaction() as tx:  # plant distinctive thresholds in alice's account
            account = rt.ledger.lock_account(tx, "user:alice", DEMO, lambda: None)
            rt.ledger.save_account(tx, account, SVT2State(Z1, Z2, account.state.count))
        for key in (alice, carol):
            call("POST", "/api/methylation", json=body(fresh.take(300, DEMO)), headers=bearer(key))
            call(
                "POST", "/api/methylation", json=body(fresh.take(5, DEMO), include="ALL"), headers=bearer(key)
            )
            call("GET", "/api/budget", headers=bearer(key))
            call("GET", "/api/datasets", headers=bearer(key))
        call("POST", "/api/methylation", json=body(fresh.take(50, CONTROLLED), granularity="count"),
             headers=bearer(carol))  # fmt: skip
        for key in (forged, revoked, "garbage"):
            call("GET", "/api/methylation", query_string={"probeId": probes[0]}, headers=bearer(key))
        for path in ("/api/admin/budget", "/api/admin/audit", "/api/admin/users", "/metrics", "/readyz"):
            call("GET", path, headers=bearer(admin))
        call("GET", "/api/admin/users", headers=bearer(alice))
        exhaust(client, alice, DEMO, fresh)
        call("POST", "/api/methylation", json=body(fresh.take(5, DEMO)), headers=bearer(alice))  # 429
        new = client.post("/api/admin/users", json={"name": "frank"}, headers=bearer(admin))
        frank = new.get_json()["response"]["key"]  # the one response that carries a key, by design
        call("GET", "/api/budget", headers=bearer(frank))
        logs = handler.stream.getvalue()
    finally:
        logging.getLogger("mbeacon").removeHandler(handler)

    assert bodies and logs
    with sqlite3.connect(rt.ledger.db.path) as db:
        thresholds = db.execute("SELECT z1, z2 FROM accounts").fetchall()
        audit = json.dumps(db.execute("SELECT * FROM audit_log").fetchall())
    assert (Z1, Z2) in thresholds and len(thresholds) >= 3
    for text in (*bodies, logs, audit):
        for secret in (repr(Z1), repr(Z2), str(Z1)[:7], str(Z2)[:7]):
            assert secret not in text
    for text in (*bodies, logs, audit):
        for key in (alice, carol, revoked, admin, forged, frank):
            secret = key[len("mbk_") + 12 + 1 :]  # the 43-character secret (it may itself contain "_")
            assert key not in text and secret not in text
    for text in bodies:
        names = _keys_in(json.loads(text)) if text.startswith("{") else set()
        assert not names & {"z1", "z2", "key", "key_hash", "key_salt", "thresholds"}
    for line in logs.splitlines():
        assert not _keys_in(json.loads(line)) & {"z1", "z2", "key", "authorization", "Authorization"}


# --- admin API --------------------------------------------------------------------------------


@pytest.fixture
def admin_key(app) -> str:
    return app.config["MBEACON"].ledger.add_user("ops", role="admin")


def test_admin_add_user_gives_a_working_key_and_revoke_stops_it(app, admin_key, probes) -> None:
    client = app.test_client()
    query = {"probeId": probes[0], "datasetIds": DEMO}
    created = client.post(
        "/api/admin/users",
        json={"name": "bob", "tier": "CONTROLLED", "group": "lab"},
        headers=bearer(admin_key),
    )
    assert created.status_code == 201
    user = created.get_json()["response"]["user"]
    assert (user["name"], user["tier"], user["group"], user["revoked"]) == ("bob", "CONTROLLED", "lab", None)
    key = created.get_json()["response"]["key"]
    assert client.get("/api/methylation", query_string=query, headers=bearer(key)).status_code == 200
    assert client.get("/api/budget", headers=bearer(key)).get_json()["response"]["tier"] == "CONTROLLED"
    revoked = client.post("/api/admin/users/bob/revoke", headers=bearer(admin_key))
    assert revoked.status_code == 200 and revoked.get_json()["response"]["user"]["revoked"]
    assert client.get("/api/methylation", query_string=query, headers=bearer(key)).status_code == 401
    events = [e["event"] for e in app.config["MBEACON"].ledger.audit_log()]
    assert "user_add" in events and "user_revoke" in events
    bad = client.post("/api/admin/users", json={"name": "x y"}, headers=bearer(admin_key))
    assert bad.status_code == 400
    assert client.post("/api/admin/users", json={"name": "zed"}, headers=bearer(key)).status_code == 401


def test_an_expired_key_is_refused_as_expired_and_the_admin_api_sets_expiries(app, admin_key, probes) -> None:
    from datetime import UTC, datetime, timedelta

    client = app.test_client()
    ledger = app.config["MBEACON"].ledger
    expired = ledger.add_user("old", expires=(datetime.now(UTC) - timedelta(seconds=1)).isoformat())
    refused = client.get("/api/methylation", query_string={"probeId": probes[0]}, headers=bearer(expired))
    assert refused.status_code == 401
    assert refused.get_json()["error"]["errorMessage"] == "invalid, revoked or expired API key"
    created = client.post("/api/admin/users", json={"name": "new", "expires": "2999-01-01"},
                          headers=bearer(admin_key))  # fmt: skip
    assert created.status_code == 201
    assert created.get_json()["response"]["user"]["expires"] == "2999-01-01T00:00:00+00:00"
    for past in ("2001-01-01", "yesterday"):
        bad = client.post("/api/admin/users", json={"name": "x", "expires": past}, headers=bearer(admin_key))
        assert bad.status_code == 400 and "expires" in bad.get_json()["error"]["errorMessage"]
    assert ledger.user("x") is None


def test_admin_user_errors_are_client_errors(app, admin_key) -> None:
    client = app.test_client()
    unknown = client.post("/api/admin/users/nobody/revoke", headers=bearer(admin_key))
    assert unknown.status_code == 404
    assert client.post("/api/admin/users", json={"name": "bob"}, headers=bearer(admin_key)).status_code == 201
    again = client.post("/api/admin/users", json={"name": "bob"}, headers=bearer(admin_key))
    assert again.status_code == 409
    assert "bob" in again.get_json()["error"]["errorMessage"]
    for response in (unknown, again):
        assert response.get_json()["error"]["errorCode"] == response.status_code


def test_admin_budget_reset_needs_confirmation_and_is_audited(app, admin_key, fresh) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice")
    client = app.test_client()
    exhaust(client, key, DEMO, fresh)
    new_query = fresh.take(1, DEMO)
    url = f"/api/admin/budget/user:alice/{DEMO}/reset"
    for payload in (None, {}, {"confirm": False}):
        response = client.post(url, json=payload, headers=bearer(admin_key))
        assert response.status_code == 400
        assert "confirm" in response.get_json()["error"]["errorMessage"]
    assert budget_of(client, key, DEMO)["positivesUsed"] == C
    assert client.post(url, json={"confirm": True}, headers=bearer(key)).status_code == 403
    response = client.post(url, json={"confirm": True}, headers=bearer(admin_key))
    assert response.status_code == 200 and response.get_json()["response"]["reset"] is True
    assert budget_of(client, key, DEMO)["positivesUsed"] == 0
    assert post(client, key, new_query).status_code == 200
    (entry,) = [e for e in app.config["MBEACON"].ledger.audit_log() if e["event"] == "budget_reset"]
    assert (entry["actor"], entry["principal"], entry["dataset"]) == ("admin:ops", "user:alice", DEMO)
    assert json.loads(entry["detail"])["before"]["positivesUsed"] == C
    audit = client.get("/api/admin/audit", query_string={"holder": "user:alice"}, headers=bearer(admin_key))
    assert "budget_reset" in [e["event"] for e in audit.get_json()["response"]["entries"]]


def test_admin_budget_set_applies_to_the_next_account(app, admin_key, fresh) -> None:
    ledger = app.config["MBEACON"].ledger
    bob, alice = ledger.add_user("bob"), ledger.add_user("alice")
    client = app.test_client()
    post(client, alice, fresh.take(3, DEMO))  # alice's account is open: the change waits for a reset
    change = {"c": 3, "epsilon": 0.5}
    for holder, applies in (("user:bob", "next query"), ("user:alice", "after budget reset")):
        response = client.put(f"/api/admin/budget/{holder}/{DEMO}", json=change, headers=bearer(admin_key))
        assert response.status_code == 200
        assert response.get_json()["response"]["appliesFrom"] == applies
        assert response.get_json()["response"]["parameters"]["c"] == 3
    sets = result_sets(post(client, bob, fresh.take(3, DEMO)))
    assert (sets[0]["info"]["positivesTotal"], sets[0]["info"]["epsilonTotal"]) == (3, 0.5)
    assert budget_of(client, bob, DEMO)["positivesTotal"] == 3
    assert budget_of(client, alice, DEMO)["positivesTotal"] == C  # promised at opening; unchanged
    client.post(
        f"/api/admin/budget/user:alice/{DEMO}/reset", json={"confirm": True}, headers=bearer(admin_key)
    )
    post(client, alice, fresh.take(1, DEMO))
    assert budget_of(client, alice, DEMO)["positivesTotal"] == 3
    assert "budget_set" in [e["event"] for e in ledger.audit_log()]
    invalid = client.put(
        f"/api/admin/budget/user:bob/{DEMO}", json={"epsilon": -1}, headers=bearer(admin_key)
    )
    assert invalid.status_code == 400


def test_budget_endpoint_shows_an_override_before_the_account_opens(app, admin_key) -> None:
    bob = app.config["MBEACON"].ledger.add_user("bob")
    client = app.test_client()
    client.put(f"/api/admin/budget/user:bob/{DEMO}", json={"c": 3}, headers=bearer(admin_key))
    assert budget_of(client, bob, DEMO)["positivesTotal"] == 3


def test_admin_budget_targets_must_exist(app, admin_key) -> None:
    client = app.test_client()
    unknown = client.put(
        "/api/admin/budget/user:bob/no-such-cohort", json={"c": 3}, headers=bearer(admin_key)
    )
    assert unknown.status_code == 404
    bad_holder = client.put(f"/api/admin/budget/user:/{DEMO}", json={"c": 3}, headers=bearer(admin_key))
    assert bad_holder.status_code == 400
    reset = client.post("/api/admin/budget/user:bob/no-such-cohort/reset", json={"confirm": True},
                        headers=bearer(admin_key))  # fmt: skip
    assert reset.status_code == 404
    assert not [e for e in app.config["MBEACON"].ledger.audit_log() if e["event"].startswith("budget")]


def test_audit_log_is_append_only(app, probes) -> None:
    key = app.config["MBEACON"].ledger.add_user("alice")
    post(app.test_client(), key, {"probeId": probes[0], "datasetIds": [DEMO]})
    path = app.config["MBEACON"].ledger.db.path
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT * FROM audit_log ORDER BY id").fetchall()
        assert [r[2] for r in rows] == ["user_add", "query"]
        for statement in ("UPDATE audit_log SET event = 'nothing'", "DELETE FROM audit_log"):
            with pytest.raises(sqlite3.DatabaseError, match="append-only"):
                db.execute(statement)
        assert db.execute("SELECT * FROM audit_log ORDER BY id").fetchall() == rows


# --- operations -------------------------------------------------------------------------------


def test_livez_and_readyz(app) -> None:
    client = app.test_client()
    assert client.get("/livez").status_code == 200
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.get_json() == {"status": "ready", "checks": {"store": "ok", "ledger": "ok"}}


def test_readyz_503_when_the_ledger_directory_is_gone(app) -> None:
    """Replacing the ledger's directory by a file fails the ledger whoever runs the tests (even root)."""
    ledger = app.config["MBEACON"].ledger
    ledger.close()
    folder = Path(ledger.db.path).parent
    folder.rename(folder.with_name(folder.name + "-moved"))
    folder.write_text("not a directory")
    response = app.test_client().get("/readyz")
    assert response.status_code == 503
    assert response.get_json()["checks"] == {"store": "ok", "ledger": "unavailable"}


def test_readyz_503_when_the_ledger_directory_is_unreadable(app) -> None:
    if os.geteuid() == 0:
        pytest.skip("running as root: file permissions do not stop root, so chmod cannot break the ledger")
    ledger = app.config["MBEACON"].ledger
    ledger.close()
    folder = Path(ledger.db.path).parent
    folder.chmod(0)
    try:
        response = app.test_client().get("/readyz")
    finally:
        folder.chmod(stat.S_IRWXU)
    assert response.status_code == 503
    assert response.get_json()["checks"]["ledger"] == "unavailable"


def test_metrics_need_the_admin_key_unless_public(make_app) -> None:
    app = make_app()
    ledger = app.config["MBEACON"].ledger
    admin, alice = ledger.add_user("ops", role="admin"), ledger.add_user("alice")
    client = app.test_client()
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=bearer(alice)).status_code == 403
    response = client.get("/metrics", headers=bearer(admin))
    assert response.status_code == 200
    assert "mbeacon_http_requests" in response.get_data(as_text=True)
    public = make_app(metrics_public=True).test_client().get("/metrics")
    assert public.status_code == 200 and "mbeacon_http_requests" in public.get_data(as_text=True)


def test_rate_limit_per_key(make_app, frozen_clock) -> None:
    app = make_app(rate_limit_per_minute=4)
    ledger = app.config["MBEACON"].ledger
    alice, bob = ledger.add_user("alice"), ledger.add_user("bob")
    client = app.test_client()
    assert [client.get("/api/budget", headers=bearer(alice)).status_code for _ in range(4)] == [200] * 4
    limited = client.get("/api/budget", headers=bearer(alice))
    assert limited.status_code == 429
    assert limited.headers["Retry-After"] == "50"
    assert limited.get_json()["error"]["errorCode"] == 429
    assert client.get("/api/budget", headers=bearer(bob)).status_code == 200
    assert client.get("/livez").status_code == 200  # operations endpoints are not limited


def test_rate_limit_is_not_spent_by_a_forged_key(make_app, frozen_clock) -> None:
    app = make_app(rate_limit_per_minute=4)
    alice = app.config["MBEACON"].ledger.add_user("alice")
    forged = alice[: -len("x" * 43)] + "x" * 43
    client = app.test_client()
    assert [client.get("/api/budget", headers=bearer(forged)).status_code for _ in range(4)] == [401] * 4
    assert client.get("/api/budget", headers=bearer(alice)).status_code == 200

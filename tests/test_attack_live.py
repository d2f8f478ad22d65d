"""The live attack (``mbeacon attack live``): response parsing, the HTTP client's handling of rate limits,
exhausted budgets and server errors (against an in-process fake beacon), the whole pipeline checked
against the library's computation, and end to end against real gunicorn servers on the demo data."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from email.utils import formatdate
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.attack import exact_answers, lrt_scores, miss_probability, yes_probabilities
from mbeacon.attack.live import (
    BatchTooLarge,
    BeaconBudgetRefused,
    BeaconClient,
    DatasetParams,
    LiveAttackError,
    LiveSettings,
    api_base,
    attacker_beta,
    choose_dataset,
    empirical_p_values,
    find_max_batch,
    is_budget_exhausted,
    observation,
    parse_answers,
    parse_datasets,
    retry_after_seconds,
    revealed_prior_answer,
    run_live_attack,
    stack_profiles,
    with_account,
    write_outputs,
)
from mbeacon.attack.planning import QueryPlan
from mbeacon.store.simulate import FILES

KEY = "mbk_0123456789ab_" + "s3cret" * 8


# --- answers -------------------------------------------------------------------------------------


def test_observation_rules() -> None:
    assert [observation("none", e, "data") for e in (True, False)] == [1, 0]
    assert [observation("svt2", e, "data") for e in (True, False)] == [1, 1]  # the flag, not the answer
    assert [observation("svt2", e, "prior") for e in (True, False)] == [0, 0]
    assert observation("svt2", False, "refused") == -1
    assert observation("svt2", True, "prior", exhausted=True) == -1  # the prior's answer: no information
    assert observation("none", True, "bogus") == -1
    assert [revealed_prior_answer("svt2", e, "prior") for e in (True, False)] == [1, 0]
    assert [revealed_prior_answer("svt2", e, "data") for e in (True, False)] == [0, 1]
    assert revealed_prior_answer("svt2", False, "refused") == -1
    assert revealed_prior_answer("none", True, "data") == -1


OUTCOMES = ("missing", "data", "prior", "refused", "exhausted")


def _result_set(index: int, outcome: str, exists: bool, dataset: str = "d1") -> dict:
    info = {
        "answeredFrom": "prior" if outcome == "exhausted" else outcome,
        "queryIndex": index,
        "cached": False,
    }
    if outcome == "exhausted":
        info["budgetExhausted"] = True
    return {"id": dataset, "setType": "dataset", "exists": exists and outcome != "refused", "info": info}


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(OUTCOMES), st.booleans()), min_size=1, max_size=40),
    st.sampled_from(["none", "svt2"]),
    st.randoms(use_true_random=False),
    st.integers(0, 5),
)
def test_parse_answers_matches_the_model(answers, mechanism, random, noise) -> None:
    """Whatever the order of the result sets, and with other datasets' and out-of-range entries mixed
    in, each query gets exactly its own answer's observation; a query without a result set stays -1."""
    sets = [_result_set(i, o, e) for i, (o, e) in enumerate(answers) if o != "missing"]
    sets += [_result_set(i % len(answers), "data", True, dataset="other") for i in range(noise)]
    sets += [_result_set(len(answers) + i, "data", True) for i in range(noise)]  # beyond the batch
    random.shuffle(sets)
    got = parse_answers({"response": {"resultSets": sets}}, len(answers), "d1", mechanism)
    for i, (outcome, exists) in enumerate(answers):
        exists = exists and outcome != "refused"
        source = {"exhausted": "prior"}.get(outcome, outcome)
        want = -1 if outcome == "missing" else observation(mechanism, exists, source, outcome == "exhausted")
        assert got.observations[i] == want
        assert got.sources[i] == ("unasked" if outcome == "missing" else outcome)
        if outcome != "missing":
            assert got.prior_answers[i] == revealed_prior_answer(mechanism, exists, source)
    assert got.exhausted == any(o in ("refused", "exhausted") for o, _ in answers)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 50) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(JSON, st.integers(1, 10))
def test_parse_answers_never_guesses_on_garbage(body, size) -> None:
    got = parse_answers({"response": {"resultSets": [body]}} if size % 2 else body, size, "d1", "svt2")
    assert got.observations.shape == (size,) and set(got.observations.tolist()) <= {-1, 0, 1}
    assert set(got.sources.tolist()) <= {"data", "prior", "refused", "exhausted", "unasked"}


def test_single_query_without_index_and_wrong_types() -> None:
    one = {"id": "d1", "exists": True, "info": {"answeredFrom": "data"}}
    assert parse_answers({"response": {"resultSets": [one]}}, 1, "d1", "none").observations.tolist() == [1]
    bad = [
        {"id": "d1", "exists": "yes", "info": {"answeredFrom": "data", "queryIndex": 0}},
        {"id": "d1", "exists": True, "info": {"answeredFrom": "data", "queryIndex": True}},
        {"id": "d1", "exists": True, "info": {"answeredFrom": "data", "queryIndex": 1.0}},
    ]
    assert parse_answers({"response": {"resultSets": bad}}, 2, "d1", "none").observations.tolist() == [-1, -1]


def test_429_kinds_and_retry_after() -> None:
    exhausted = {
        "error": {"errorCode": 429, "errorMessage": "privacy budget for dataset 'd' is exhausted"},
        "info": {"dataset": "d", "positivesUsed": 5, "positivesTotal": 5},
    }
    limited = {"error": {"errorCode": 429, "errorMessage": "rate limit exceeded; retry later"}}
    assert is_budget_exhausted(None, exhausted)
    assert not is_budget_exhausted("12", limited)
    assert not is_budget_exhausted(None, limited)
    assert is_budget_exhausted(None, {"error": {"errorMessage": "Budget spent"}})
    assert retry_after_seconds("12") == 12.0
    assert retry_after_seconds("0") == 0.1
    assert retry_after_seconds(None, 3.0) == 3.0
    assert retry_after_seconds("soon", 4.0) == 4.0
    assert retry_after_seconds(formatdate(1_000_030.0, usegmt=True), now=1_000_000.0) == pytest.approx(30.0)


@given(st.integers(0, 10**6))
def test_retry_after_seconds_reads_any_delay(seconds) -> None:
    assert retry_after_seconds(str(seconds)) == max(0.1, float(seconds))


def test_max_batch_from_the_real_openapi_document() -> None:
    from mbeacon.api.openapi_spec import openapi_document
    from mbeacon.beacon.config import ServiceConfig

    assert find_max_batch(openapi_document("http://x", ServiceConfig(max_batch=77))) == 77
    assert find_max_batch({"response": {"maxBatch": 12}}, {"anything": 1}) == 12
    assert find_max_batch(None, {"a": [1, 2]}) is None


def test_api_base() -> None:
    assert api_base("http://h:5050") == "http://h:5050/api"
    assert api_base("http://h:5050/api/") == "http://h:5050/api"
    assert api_base(" https://h/beacon/api ") == "https://h/beacon/api"
    with pytest.raises(LiveAttackError, match="http"):
        api_base("h:5050")


DATASETS = {
    "response": {
        "collections": [
            {
                "id": "open",
                "info": {
                    "patients": 60,
                    "privacy": {
                        "mechanism": "none",
                        "epsilon": 1.0,
                        "c": 5,
                        "threshold": 1,
                        "variant": "single",
                    },
                },
            },
            {
                "id": "guarded",
                "info": {
                    "patients": 80,
                    "privacy": {
                        "mechanism": "svt2",
                        "epsilon": 2.0,
                        "c": 4,
                        "threshold": 2,
                        "variant": "redraw",
                        "countEpsilon": 0.5,
                    },
                },
            },
        ]
    }
}


def test_public_parameters_and_defences() -> None:
    datasets = parse_datasets(DATASETS)
    assert choose_dataset(datasets, "open").defence().name == "none"
    guarded = choose_dataset(datasets, "guarded")
    defence = guarded.defence()
    assert (defence.name, defence.threshold, defence.c, defence.epsilon) == ("svt2-redraw", 2, 4, 1.5)
    assert guarded.patients == 80 and guarded.allocation_matches()
    with pytest.raises(LiveAttackError, match="choose one with --dataset"):
        choose_dataset(datasets, None)
    with pytest.raises(LiveAttackError, match="not visible"):
        choose_dataset(datasets, "secret")
    suppression = DatasetParams("s", 60, "none", 1.0, 5, 3)
    assert suppression.defence().name == "suppression" and suppression.defence().threshold == 3
    # the sanitisers built on SVT² are modelled from their published parameters, as the evaluation does
    privacy = {"epsilon": 10.0, "c": 50, "threshold": 5, "marginAbove": 20.0, "marginBelow": 20.0}
    body = {"response": {"collections": [
        {"id": m, "info": {"patients": 60, "privacy": {"mechanism": m, **privacy, **extra}}}
        for m, extra in (("svt2-margin", {}), ("svt2-noisy", {"epsilon3": 2.5}),
                         ("online-pmw", {"margin": 20.0, "marginAbove": 0.0, "marginBelow": 0.0,
                                         "releaseShare": 0.25}))
    ]}}  # fmt: skip
    for params in parse_datasets(body):
        model = params.defence()
        assert (model.name, model.epsilon, model.c, model.threshold, model.margin) == (
            params.mechanism,
            10.0,
            50,
            5,
            20.0,
        )
        if model.name != "svt2-margin":
            assert model.release_share == pytest.approx(0.25) and model.release_scale == pytest.approx(
                50 / 2.5
            )
    # what the model does not cover is refused with the reason, pointing at the evaluation
    for mechanism, fields, why in [
        ("svt2-noisy", {}, "epsilon3 = 0"),
        ("svt2-margin", {"margin_above": 3.0}, "margins above"),
        ("svt2-noisy", {"epsilon3": 2.0, "sensitivity": 2.0}, "contribution bound"),
        ("svt2-margin", {"variant": "redraw"}, "variant"),
        ("laplace-oracle", {}, "models mechanisms"),
    ]:
        with pytest.raises(LiveAttackError, match=f"'{mechanism}'") as refused:
            DatasetParams("m", 60, mechanism, 10.0, 50, 1, **fields).defence()
        assert why in str(refused.value) and "mbeacon attack evaluate" in str(refused.value)
    # the key's own account keeps the parameters it was opened with
    account = {
        "response": {
            "budgets": {
                "guarded": {
                    "positivesUsed": 2,
                    "positivesTotal": 9,
                    "epsilonTotal": 3.0,
                    "threshold": 1,
                    "variant": "single",
                    "mechanism": "svt2",
                }
            }
        }
    }
    opened = with_account(guarded, account)
    assert (opened.c, opened.epsilon, opened.threshold, opened.variant, opened.positives_used) == (
        9,
        3.0,
        1,
        "single",
        2,
    )
    assert with_account(guarded, None) == guarded


def test_attacker_beta_moves_to_the_revealed_side() -> None:
    prior_pi = np.array([[0.001, 0.5, 0.001, 0.5, 0.2]])
    plan = QueryPlan(np.zeros((1, 5), int), prior_pi, prior_pi, prior_pi, prior_pi)
    revealed = np.array([[1, 0, -1, -1, 1]], dtype=np.int8)
    public = attacker_beta(plan, 10, 1, revealed, prior_is_public=True)
    np.testing.assert_allclose(public, 10 * prior_pi)
    beta = attacker_beta(plan, 10, 1, revealed, prior_is_public=False)
    assert beta[0, 0] == 1.0 and beta[0, 1] == 0.5  # moved onto the side the beacon revealed
    # ... where the SVT² model sees them on that side: as beta = T and as beta < T
    defence = DatasetParams("d", 10, "svt2", 1.0, 3, 1).defence()
    alpha = np.zeros(2)
    np.testing.assert_allclose(
        defence.p_observe_one(alpha, beta[0, :2]), defence.p_observe_one(alpha, [1.0, 0.0])
    )
    np.testing.assert_allclose(beta[0, 2:], [0.01, 5.0, 2.0])  # unrevealed or already right: kept


def test_empirical_p_values() -> None:
    scores = np.array([5.0, 1.0, 0.0, 1.0, 2.0])
    labels = np.array([True, True, False, False, False])
    np.testing.assert_allclose(empirical_p_values(scores, labels), [1 / 4, 3 / 4, 4 / 4, 3 / 4, 2 / 4])
    assert np.isnan(empirical_p_values(scores, np.ones(5, bool))).all()


# --- the client against a fake beacon -------------------------------------------------------------


class FakeBeacon:
    """Enough of the beacon's API for the client, behind ``httpx.MockTransport``.

    ``cohort``: probes x patients. ``mechanism`` none answers ``alpha >= 1``; the fake svt2 has a prior
    that always says no, so a range holding a patient is a positive (``data``) until ``c`` are spent,
    then ``refused`` (or the prior's answer with ``budgetExhausted``). ``script``: responses returned
    first, in order, to the methylation endpoint.
    """

    def __init__(
        self,
        cohort: pd.DataFrame,
        *,
        mechanism: str = "none",
        c: int = 3,
        on_exhausted: str = "refuse",
        max_batch: int = 1000,
        script: list[httpx.Response] | None = None,
    ) -> None:
        self.cohort, self.mechanism, self.c, self.on_exhausted = cohort, mechanism, c, on_exhausted
        self.max_batch, self.script = max_batch, list(script or [])
        self.positives = 0
        self.late = 0  # methylation requests that arrived after the budget was spent
        self.batches: list[int] = []
        self.auth: set[str] = set()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.auth.add(request.headers.get("authorization", ""))
        path = request.url.path
        if path == "/api/datasets":
            privacy = {
                "mechanism": self.mechanism,
                "epsilon": 1.0,
                "c": self.c,
                "threshold": 1,
                "variant": "single",
                "onExhausted": self.on_exhausted,
            }
            info = {"patients": self.cohort.shape[1], "privacy": privacy}
            return httpx.Response(200, json={"response": {"collections": [{"id": "fake", "info": info}]}})
        if path == "/api/configuration":
            return httpx.Response(200, json={"response": {"maxBatch": self.max_batch}})
        if path != "/api/methylation":
            return httpx.Response(404, json={"error": {"errorCode": 404, "errorMessage": "not found"}})
        if self.script:
            return self.script.pop(0)
        queries = json.loads(request.content)["query"]["requestParameters"]
        self.batches.append(len(queries))
        self.late += self.mechanism == "svt2" and self.positives >= self.c
        if len(queries) > self.max_batch:
            message = f"query.requestParameters: {len(queries)} queries; at most {self.max_batch} per request"
            return httpx.Response(400, json={"error": {"errorCode": 400, "errorMessage": message}})
        if self.mechanism == "svt2" and self.positives >= self.c and self.on_exhausted == "refuse":
            message = "privacy budget for dataset 'fake' is exhausted"
            body = {
                "error": {"errorCode": 429, "errorMessage": message},
                "info": {"dataset": "fake", "positivesUsed": self.c, "positivesTotal": self.c},
            }
            return httpx.Response(429, json=body)
        return httpx.Response(
            200, json={"response": {"resultSets": [self._answer(i, q) for i, q in enumerate(queries)]}}
        )

    def _answer(self, index: int, query: dict) -> dict:
        values = self.cohort.loc[query["probeId"]].to_numpy()
        alpha = int(np.sum((values >= query["minValue"]) & (values <= query["maxValue"])))
        info: dict = {"queryIndex": index, "cached": False}
        exists, source = alpha >= 1, "data"
        if self.mechanism == "svt2":
            if self.positives >= self.c:
                exists, source = False, "prior" if self.on_exhausted == "prior" else "refused"
                info["budgetExhausted"] = self.on_exhausted == "prior"
            elif alpha >= 1:
                self.positives += 1
            else:
                source = "prior"
        return {"id": "fake", "exists": exists, "info": {**info, "answeredFrom": source}}


def _client(handler, sleeps: list | None = None, **options) -> BeaconClient:
    record = sleeps.append if sleeps is not None else (lambda seconds: None)
    return BeaconClient(
        "http://beacon.test", KEY, transport=httpx.MockTransport(handler), sleep=record, **options
    )


def _synthetic(seed: int = 3, probes: int = 300, members: int = 30, others: int = 30):
    """A cohort and noisy re-measurements of its members and of people outside it."""
    rng = np.random.default_rng(seed)
    ids = [f"cg{i:08d}" for i in range(probes)]
    centre = rng.beta(0.6, 0.6, probes)

    def people(n: int) -> np.ndarray:
        return np.clip(centre[:, None] + rng.normal(0, 0.15, (probes, n)), 0, 1)

    cohort = pd.DataFrame(people(members), index=ids)
    remeasured = pd.DataFrame(np.clip(cohort.to_numpy() + rng.normal(0, 0.02, cohort.shape), 0, 1), index=ids)
    outside = pd.DataFrame(people(others), index=ids)
    return cohort, remeasured, outside


def test_client_waits_out_a_rate_limit_and_retries_server_errors() -> None:
    cohort, members, others = _synthetic(probes=50, members=5, others=5)
    limited = httpx.Response(
        429,
        headers={"Retry-After": "7"},
        json={"error": {"errorCode": 429, "errorMessage": "rate limit exceeded"}},
    )
    script = [limited, limited, httpx.Response(502), httpx.Response(503, headers={"Retry-After": "2"})]
    fake, sleeps = FakeBeacon(cohort, script=script), []
    with _client(fake, sleeps) as client:
        result = run_live_attack(client, stack_profiles(members, others), LiveSettings(queries=10))
    assert sleeps[:4] == [7.0, 7.0, 1.0, 2.0]
    assert result.answers.counts()["data"] == 100 and not result.answers.exhausted
    assert fake.auth == {f"Bearer {KEY}"}


def test_client_gives_up_on_persistent_errors_without_showing_the_key() -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"error": {"errorCode": 500, "errorMessage": f"oops {KEY}"}})

    sleeps: list = []
    with _client(broken, sleeps, retries=2) as client, pytest.raises(LiveAttackError) as caught:
        client.get("/datasets")
    assert "HTTP 500" in str(caught.value) and "after 3 tries" in str(caught.value)
    assert KEY not in str(caught.value) and KEY not in repr(client)
    assert len(sleeps) == 2

    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    with (
        _client(unreachable, retries=1) as client,
        pytest.raises(LiveAttackError, match="no answer after 2 tries"),
    ):
        client.get("/datasets")

    def refused_key(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            401, json={"error": {"errorCode": 401, "errorMessage": "invalid, revoked or expired API key"}}
        )

    with _client(refused_key) as client, pytest.raises(LiveAttackError, match=r"401.*check --key"):
        client.get("/datasets")


def test_budget_refusal_and_oversized_batches() -> None:
    body = {
        "error": {"errorCode": 429, "errorMessage": "privacy budget for dataset 'x' is exhausted"},
        "info": {"dataset": "x", "positivesUsed": 5},
    }
    with _client(lambda r: httpx.Response(429, json=body)) as client, pytest.raises(BeaconBudgetRefused):
        client.ask([{"probeId": "cg1"}])
    with _client(lambda r: httpx.Response(413)) as client, pytest.raises(BatchTooLarge):
        client.ask([{"probeId": "cg1"}])


def test_pipeline_equals_the_library_attack() -> None:
    """Against an exact beacon, the live observations are the library's exact answers and the scores its
    likelihood ratios; a batch limit the server enforces but does not publish is found and kept."""
    cohort, members, others = _synthetic()
    fake = FakeBeacon(cohort, max_batch=32)
    profiles = stack_profiles(members, others)
    with _client(fake) as client:
        result = run_live_attack(client, profiles, LiveSettings(queries=40))
    assert set(fake.batches) == {32, 8}  # the published limit, respected
    plan = result.plan
    rows = np.arange(len(cohort))  # the stand-in prior holds the same probes, in the same (sorted) order
    expected = exact_answers(cohort.to_numpy(), plan, rows, 1)
    np.testing.assert_array_equal(result.answers.observations, expected)
    member, non = yes_probabilities(plan.pi, cohort.shape[1], 1, miss_probability(2.0, 0.005))
    np.testing.assert_allclose(result.scores, lrt_scores(expected, member, non))
    assert result.by_queries()[-1]["auc"] > 0.8
    # the same attack when the limit is not published: the 400 names it and the client adapts
    fake_unpublished = FakeBeacon(cohort, max_batch=32)

    def unpublished(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/configuration":
            return httpx.Response(404)
        return fake_unpublished(request)

    with _client(unpublished) as client:
        again = run_live_attack(client, profiles, LiveSettings(queries=40))
    assert fake_unpublished.batches[0] == 40 and set(fake_unpublished.batches[1:]) == {32, 8}
    np.testing.assert_array_equal(again.answers.observations, expected)


@pytest.mark.parametrize("on_exhausted", ["refuse", "prior"])
def test_exhausted_budget_ends_the_asking(tmp_path, on_exhausted) -> None:
    cohort, members, others = _synthetic()
    fake = FakeBeacon(cohort, mechanism="svt2", c=3, on_exhausted=on_exhausted)
    with _client(fake) as client:
        result = run_live_attack(client, stack_profiles(members, others), LiveSettings(queries=20))
    counts = result.answers.counts()
    assert counts["data"] == 3 and result.answers.exhausted
    assert counts["refused" if on_exhausted == "refuse" else "exhausted"] > 0
    assert fake.late <= 1  # at most the request whose 429 said so: nothing asked after the budget ran out
    table = result.score_table()
    assert table["answered"].sum() == counts["data"] + counts["prior"]
    assert table["refused"].sum() + table["unasked"].sum() + table["answered"].sum() == table["planned"].sum()
    paths = write_outputs(result, tmp_path)
    assert set(paths) == {"scores", "metrics", "roc"}
    summary = json.loads(paths["metrics"].read_text())
    assert summary["budget_exhausted"] and summary["answers"]["data"] == 3
    assert KEY not in paths["metrics"].read_text() + paths["scores"].read_text()


# --- end to end: real servers, the real command ----------------------------------------------------


@pytest.fixture(scope="module")
def beacon(tmp_path_factory):
    """One real server (gunicorn) on the demo data with three datasets of the same cohort: unprotected,
    SVT² with c = 3 refusing when spent, SVT² with c = 3 answering from the prior when spent, and
    small-count suppression at T = 20 (exact answers, ``mechanism = none``), and SVT² with a noisy
    release on TOP (``svt2-noisy``) for the attack that reads the whole response."""
    from servers import BeaconServer

    from mbeacon.beacon.ledger import Ledger
    from mbeacon.store.cohorts import CohortStore
    from mbeacon.store.demo import ensure_demo

    demo = ensure_demo(tmp_path_factory.getbasetemp() / "demo-store")
    work = tmp_path_factory.mktemp("live")
    store = work / "store"
    shutil.copytree(demo.store, store)
    cohorts = CohortStore(store)
    source = cohorts.open(demo.dataset)
    values = source.rows(np.arange(source.n_probes))
    for k, name in enumerate(("svt2-refuse", "svt2-prior", "suppressed", "noisy"), start=1):
        rows = np.roll(np.arange(source.n_probes), k)  # the rows rotated: a cohort file of its own each
        samples = [f"{name}-{s}" for s in source.sample_ids.astype(str).tolist()]  # standing for others
        cohorts.write(name, samples, [(source.probe_ids[rows].tolist(), values[rows])])
    url = f"sqlite:///{work}/ledger.sqlite3"
    ledger = Ledger.open(url)
    keys = [ledger.add_user(f"attacker{i}") for i in range(7)]
    keys += [ledger.add_user(f"controlled{i}", tier="CONTROLLED") for i in range(2)]  # keys[7], keys[8]
    ledger.close()
    config = work / "beacon.toml"
    config.write_text(
        f'store = "{store}"\ndatabase_url = "{url}"\ndefault_prior = "{demo.prior}"\n'
        "rate_limit_per_minute = 0\n"
        '[defaults]\nmechanism = "svt2"\nepsilon = 1.0\nc = 3\n'
        f'[datasets.{demo.dataset}]\nmechanism = "none"\nallow_unprotected = true\n'
        '[datasets.svt2-refuse]\non_exhausted = "refuse"\n'
        '[datasets.svt2-prior]\non_exhausted = "prior"\n'
        '[datasets.suppressed]\nmechanism = "none"\nallow_unprotected = true\nthreshold = 20\n'
        # a noisy release generous enough that reading the released counts shows in 100 queries
        '[datasets.noisy]\nmechanism = "svt2-noisy"\nepsilon = 60.0\nc = 40\nthreshold = 1\n'
        "release_share = 0.5\n"
    )
    with BeaconServer(config, work, workers=2) as server:
        yield server, keys, demo


def _attack(beacon, key: str, out: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict | None]:
    server, _, demo = beacon
    command = [
        sys.executable,
        "-m",
        "mbeacon.cli",
        "attack",
        "live",
        "--url",
        server.url,
        "--victims",
        str(demo.simulation / FILES["members_remeasured"]),
        "--nonmembers",
        str(demo.simulation / FILES["nonmembers_remeasured"]),
        "--out",
        str(out),
        "--json",
        *extra,
    ]
    env = {**os.environ, "MBEACON_KEY": key, "COLUMNS": "120"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert key not in done.stdout + done.stderr, "the key was printed"
    summary = json.loads(done.stdout) if done.returncode == 0 else None
    return done, summary


@pytest.mark.slow
def test_live_attack_breaks_the_unprotected_beacon(beacon, tmp_path) -> None:
    """MBeacon's headline over HTTP: 100 queries per profile give AUC >= 0.9 against ``mechanism = none``."""
    _, keys, demo = beacon
    done, summary = _attack(beacon, keys[0], tmp_path, "--dataset", demo.dataset)
    assert done.returncode == 0, done.stderr
    final = summary["by_queries"][-1]
    assert final["queries"] == 100 and final["auc"] >= 0.9, summary["by_queries"]
    assert summary["answers"]["data"] == summary["answers"]["planned"] == 120 * 100
    assert summary["defence"] == "none" and summary["dataset"]["patients"] == 60
    scores = pd.read_csv(tmp_path / "scores.csv")
    assert len(scores) == 120 and set(scores["group"]) == {"victim", "nonmember"}
    assert (tmp_path / "roc.png").stat().st_size > 10_000
    for path in tmp_path.iterdir():
        assert keys[0].encode() not in path.read_bytes()
    print("unprotected AUC by queries:", [(r["queries"], round(r["auc"], 3)) for r in summary["by_queries"]])


@pytest.mark.slow
def test_live_attack_against_svt2_is_blunted_and_survives_the_budget(beacon, tmp_path) -> None:
    """SVT² with c = 3: three positives, the rest of the batch refused, every later query unasked; the
    attack's AUC falls to chance. A second run with the spent key gets nothing and still reports."""
    _, keys, demo = beacon
    done, summary = _attack(
        beacon, keys[1], tmp_path / "a", "--dataset", "svt2-refuse", "--prior", str(demo.store), demo.prior
    )
    assert done.returncode == 0, done.stderr
    answers = summary["answers"]
    assert answers["data"] == 3 and answers["refused"] > 0 and answers["unasked"] > 0
    assert summary["budget_exhausted"] and summary["prior_agreement"] == 1.0
    auc_svt2 = summary["by_queries"][-1]["auc"]
    assert auc_svt2 <= 0.65, summary["by_queries"]
    assert "budget ran out" in done.stderr
    done, again = _attack(beacon, keys[1], tmp_path / "b", "--dataset", "svt2-refuse")
    assert done.returncode == 0, done.stderr
    assert again["answers"]["unasked"] == again["answers"]["planned"] and again["positives_used_before"] == 3
    print("SVT² (c = 3) AUC at 100 queries:", round(auc_svt2, 3), "answers:", answers)


@pytest.mark.slow
def test_live_attack_with_answers_from_the_prior_when_spent(beacon, tmp_path) -> None:
    """``on_exhausted = prior``: answers keep coming, flagged budgetExhausted; none is taken as evidence."""
    _, keys, _ = beacon
    done, summary = _attack(beacon, keys[2], tmp_path, "--dataset", "svt2-prior")
    assert done.returncode == 0, done.stderr
    assert summary["answers"]["data"] == 3 and summary["answers"]["exhausted"] > 0
    assert summary["by_queries"][-1]["auc"] <= 0.65


@pytest.mark.slow
def test_live_attack_needs_a_dataset_choice_and_a_valid_key(beacon, tmp_path) -> None:
    _, keys, _ = beacon
    done, _ = _attack(beacon, keys[3], tmp_path)
    assert done.returncode != 0 and "choose one with --dataset" in done.stderr
    done, _ = _attack(beacon, "mbk_000000000000_" + "x" * 43, tmp_path, "--dataset", "svt2-prior")
    assert done.returncode != 0 and "401" in done.stderr and "check --key" in done.stderr


@pytest.mark.slow
def test_live_tracker_breaks_small_count_suppression_over_http(beacon, tmp_path) -> None:
    """Suppression at T = 20 (60 patients): the rarest-range attacker's ranges hold fewer than 20
    patients and it learns little; the tracker, adaptive over HTTP, finds ranges of 19 patients and
    asks the T = 1 question through them (``auto`` picks it for an exact threshold)."""
    _, keys, _ = beacon
    common = ("--dataset", "suppressed", "--queries", "150")
    done, tracked = _attack(beacon, keys[4], tmp_path / "tracker", *common)
    assert done.returncode == 0, done.stderr
    assert tracked["attacker"] == "tracker" and tracked["defence"] == "suppression T=20"
    assert tracked["by_queries"][-1]["queries"] == 150 and tracked["by_queries"][-1]["auc"] >= 0.9, tracked
    answers = tracked["answers"]
    assert answers["data"] == answers["planned"] > 0 and answers["refused"] == answers["exhausted"] == 0
    done, rarest = _attack(beacon, keys[5], tmp_path / "rarest", *common, "--attacker", "rarest")
    assert done.returncode == 0, done.stderr
    assert rarest["attacker"] == "rarest" and rarest["by_queries"][-1]["auc"] <= 0.75, rarest["by_queries"]
    print(
        "suppression T = 20 over HTTP, AUC at 150 queries: tracker",
        round(tracked["by_queries"][-1]["auc"], 3),
        "rarest",
        round(rarest["by_queries"][-1]["auc"], 3),
        "answers:",
        tracked["answers"],
        rarest["answers"],
    )


@pytest.mark.slow
def test_live_tracker_stops_when_the_budget_runs_out(beacon, tmp_path) -> None:
    """SVT² with c = 3, refusing when spent: the tracker's search burns the three positives, the refusal
    ends the asking for every profile, and the run still reports (nothing taken from refused answers)."""
    _, keys, demo = beacon
    done, summary = _attack(
        beacon, keys[6], tmp_path, "--dataset", "svt2-refuse", "--attacker", "tracker", "--queries", "60",
        "--prior", str(demo.store), demo.prior,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert summary["attacker"] == "tracker" and summary["budget_exhausted"]
    answers = summary["answers"]
    assert answers["data"] == 3 and answers["refused"] > 0
    assert "budget ran out" in done.stderr
    assert summary["by_queries"][-1]["auc"] <= 0.65


@pytest.mark.slow
def test_live_attack_reads_the_whole_response_of_svt2_noisy(beacon, tmp_path) -> None:
    """``svt2-noisy`` over HTTP (real gunicorn): the attack models it from the published parameters
    and reads flag, answer and, with a CONTROLLED key (count granularity), the released noisy count
    of each TOP; its scores are the library's likelihood ratios of exactly those responses. A
    REGISTERED key gets boolean answers and the attack scores flag and answer. One key for every
    profile spends the account's c positives on the first ones, so the AUC stays near chance."""
    from mbeacon.attack.defences import Defence
    from mbeacon.attack.live import read_profiles
    from mbeacon.attack.lrt import release_log_ratios
    from mbeacon.store.priors import load_prior

    server, keys, demo = beacon
    profiles = stack_profiles(
        read_profiles(demo.simulation / FILES["members_remeasured"]),
        read_profiles(demo.simulation / FILES["nonmembers_remeasured"]),
    )
    prior = load_prior(demo.store, demo.prior)
    settings = LiveSettings(queries=30, dataset="noisy", attacker="rarest")
    results = {}
    for tier, key in (("CONTROLLED", keys[7]), ("REGISTERED", keys[6])):
        with BeaconClient(server.url, key) as client:
            results[tier] = run_live_attack(client, profiles, settings, prior=prior)
    controlled, registered = results["CONTROLLED"], results["REGISTERED"]
    assert controlled.defence.label == "svt2-noisy eps=60 c=40 r=0.5" and controlled.params.epsilon3 == 30.0
    assert controlled.observed == ("flag", "answer", "count")
    assert registered.observed == ("flag", "answer")
    for result, counted in ((controlled, True), (registered, False)):
        release = result.answers.release()
        tops = release.flags == 1
        assert 0 < tops.sum() <= 40 and np.all(np.isfinite(release.counts[tops]) == counted)
        assert np.all(release.answers[release.flags == 0] == result.answers.prior_answers[release.flags == 0])
        beta = result.params.patients * result.plan.prior_pi
        steps = release_log_ratios(
            Defence("svt2-noisy", epsilon=60.0, c=40, threshold=1, margin=0.0, release_share=0.5),
            result.plan.pi, beta, release, 60, miss_probability(2.0, 0.005), use_counts=counted,
        )  # fmt: skip
        np.testing.assert_allclose(result.scores, np.cumsum(steps, axis=1), atol=1e-9)
        assert result.by_queries()[-1]["auc"] <= 0.7
    summary = controlled.summary()
    assert summary["observed"] == ["flag", "answer", "count"] and summary["dataset"]["epsilon3"] == 30.0
    print(
        "svt2-noisy over HTTP, AUC at 30 queries: flag+answer+count",
        round(controlled.by_queries()[-1]["auc"], 3),
        "flag+answer",
        round(registered.by_queries()[-1]["auc"], 3),
    )

"""cohort-pmw over the Flask test client: one Online PMW state per cohort, shared by every budget
holder, each holder limited to its quota of the cohort's positives; the ledger never records more
than the cohort's ``c`` positives, whoever asks."""

from __future__ import annotations

import math

import pytest
from test_api_behaviour import EXTRA_PROBES, Fresh, bearer, body, budget_of, result_sets

from mbeacon.beacon.sanitisers.cohort_pmw import COHORT_HOLDER
from mbeacon.store.cohorts import CohortStore
from mbeacon.store.demo import DEMO_DATASET

DEMO = DEMO_DATASET
C, QUOTA = 6, 2
POLICY = {"mechanism": "cohort-pmw", "epsilon": 1.0, "c": C, "quota": QUOTA}
DATASETS = {DEMO: {**POLICY, "contribution_bound": 1}}


@pytest.fixture
def fresh(store) -> Fresh:
    return Fresh(CohortStore(store).open(DEMO).probe_ids[:EXTRA_PROBES].tolist())


def _spend_quota(client, key: str, fresh: Fresh) -> list[dict]:
    """Fresh batches until the holder's quota is spent; every result set, in order."""
    seen: list[dict] = []
    for _ in range(40):
        response = client.post("/api/methylation", json=body(fresh.take(250, DEMO)), headers=bearer(key))
        seen += result_sets(response)
        budget = response.get_json()["info"]["budgets"][DEMO]
        if budget["positivesUsed"] == budget["positivesTotal"]:
            return seen
    pytest.fail("the quota was not spent by 10,000 fresh queries")


def _cohort_row(app):
    return app.config["MBEACON"].ledger.account(COHORT_HOLDER, DEMO)


def test_holders_share_one_cohort_budget_each_within_its_quota(app, fresh) -> None:
    ledger = app.config["MBEACON"].ledger
    client = app.test_client()
    keys = [ledger.add_user(name) for name in ("alice", "bob", "carol", "dave")]
    for n, key in enumerate(keys[:3], start=1):
        answered = _spend_quota(client, key, fresh)
        assert sum(rs["info"]["answeredFrom"] == "data" for rs in answered) == QUOTA
        assert _cohort_row(app).state.count == n * QUOTA  # one state: every holder's positives
        # past its quota a holder is answered from the learnt state, free, never refused
        after = client.post("/api/methylation", json=body(fresh.take(200, DEMO)), headers=bearer(key))
        assert {rs["info"]["answeredFrom"] for rs in result_sets(after)} == {"prior"}
        assert all(rs["info"]["budgetExhausted"] for rs in result_sets(after))  # and it says so
        assert budget_of(client, key, DEMO)["positivesUsed"] == QUOTA
    # the cohort's c positives are spent: a fourth holder spends nothing, and is still answered
    response = client.post("/api/methylation", json=body(fresh.take(500, DEMO)), headers=bearer(keys[3]))
    assert {rs["info"]["answeredFrom"] for rs in result_sets(response)} == {"prior"}
    budget = response.get_json()["info"]["budgets"][DEMO]
    assert budget["positivesUsed"] == 0 and budget["positivesTotal"] == QUOTA
    assert budget["cohort"] == {
        "positivesUsed": C, "positivesTotal": C, "epsilonSpent": pytest.approx(1.0), "epsilonTotal": 1.0,
    }  # fmt: skip
    cohort = _cohort_row(app)
    assert cohort.state.count == C
    with ledger.db.transaction(write=False) as tx:
        tx.execute(
            "SELECT COUNT(*) FROM pmw_updates WHERE principal = ? AND dataset = ?", (COHORT_HOLDER, DEMO)
        )
        assert tx.fetchone()[0] == C  # one recorded update per positive, all on the cohort's state
        tx.execute("SELECT COUNT(*) FROM pmw_updates WHERE principal != ?", (COHORT_HOLDER,))
        assert tx.fetchone()[0] == 0


def test_one_holders_paid_update_answers_the_others(make_app, fresh) -> None:
    """A TOP's released count moves the cohort's synthetic state: another holder asking the same range
    is answered from it, and sees the same count, without spending anything (a large epsilon, so that
    the count is the data's and the data no longer disagree with the state)."""
    precise = {**POLICY, "epsilon": 100.0, "release_share": 0.5, "margin": 2.0, "contribution_bound": 1}
    app = make_app(defaults=precise, datasets={DEMO: precise})
    ledger = app.config["MBEACON"].ledger
    client = app.test_client()
    alice = ledger.add_user("alice", tier="CONTROLLED")
    bob = ledger.add_user("bob", tier="CONTROLLED")
    paid = None
    for _ in range(40):
        batch = fresh.take(250, DEMO)
        response = client.post(
            "/api/methylation", json=body(batch, granularity="count"), headers=bearer(alice)
        )
        for params, rs in zip(batch, result_sets(response), strict=True):
            if rs["info"]["answeredFrom"] == "data":
                paid = (params, rs)
                break
        if paid:
            break
    assert paid is not None, "no TOP in 10,000 fresh queries"
    params, first = paid
    again = client.post("/api/methylation", json=body([params], granularity="count"), headers=bearer(bob))
    (second,) = result_sets(again)
    assert second["info"]["answeredFrom"] == "prior"  # from the learnt state: free
    assert second["resultsCount"] == first["resultsCount"]
    assert budget_of(client, bob, DEMO)["positivesUsed"] == 0


def test_datasets_state_the_cohorts_guarantee_and_the_best_coalition_attack(make_app) -> None:
    """/api/datasets says whom the promise protects: the cohort, with its whole budget, what is spent
    and the best attack any coalition could make; a per-account mechanism says its bound is per holder."""
    app = make_app()
    key = app.config["MBEACON"].ledger.add_user("alice")
    client = app.test_client()
    privacy = client.get("/api/datasets", headers=bearer(key)).get_json()["response"]["collections"][0][
        "info"
    ]["privacy"]
    assert (privacy["mechanism"], privacy["quota"]) == ("cohort-pmw", QUOTA)
    guarantee = privacy["guarantee"]
    assert guarantee["unit"] == "cohort" and guarantee["epsilonTotal"] == 1.0
    assert (guarantee["positivesUsed"], guarantee["positivesTotal"], guarantee["quota"]) == (0, C, QUOTA)
    assert guarantee["bestAttack"]["maxAuc"] == pytest.approx(math.e / (1 + math.e))
    assert guarantee["bestAttack"]["maxTprAt01PctFpr"] == pytest.approx(0.001 * math.e)
    detail = client.get("/api/budget", headers=bearer(key)).get_json()["response"]["budgets"][DEMO]
    assert detail["positivesTotal"] == QUOTA and detail["quota"] == QUOTA
    assert detail["cohort"]["positivesTotal"] == C and detail["cohort"]["epsilonSpent"] == 0.0
    svt2 = {"mechanism": "svt2", "epsilon": 1.0, "c": C}
    per_holder = make_app(defaults=svt2, datasets={DEMO: svt2})
    key = per_holder.config["MBEACON"].ledger.add_user("alice")
    listed = per_holder.test_client().get("/api/datasets", headers=bearer(key)).get_json()
    guarantee = listed["response"]["collections"][0]["info"]["privacy"]["guarantee"]
    assert guarantee["unit"] == "budget holder" and "bestAttack" not in guarantee
    assert guarantee["bestAttackPerHolder"]["maxAuc"] == pytest.approx(math.e / (1 + math.e))


@pytest.fixture(scope="module")
def twice(tmp_path_factory):
    """The demo's series matrix ingested twice: as the demo and as ``copy-cohort`` (one checksum)."""
    import shutil

    from mbeacon.store.demo import ensure_demo
    from mbeacon.store.ingest import ingest

    demo = ensure_demo(tmp_path_factory.getbasetemp() / "demo-store")
    root = tmp_path_factory.mktemp("twice") / "store"
    shutil.copytree(demo.store, root)
    ingest(demo.simulation / "cohort_series_matrix.txt.gz", root, "copy-cohort", format="geo")
    return root, demo.prior


def test_one_file_under_two_ids_is_one_cohort(make_app, twice, fresh) -> None:
    """Served twice, one file's patients get one cohort state and each holder one quota, whichever id
    is asked; a per-holder mechanism on the copies is refused at start, naming the first id."""
    from mbeacon.beacon.config import ConfigError

    store, prior = twice
    datasets = {DEMO: {**POLICY, "contribution_bound": 1}, "copy-cohort": {**POLICY, "contribution_bound": 1}}
    app = make_app(store=str(store), default_prior=prior, datasets=datasets)
    key = app.config["MBEACON"].ledger.add_user("alice")
    client = app.test_client()
    asked = [{**q, "datasetIds": [DEMO, "copy-cohort"]} for q in fresh.take(250, DEMO)]
    for _ in range(40):
        response = client.post("/api/methylation", json=body(asked), headers=bearer(key))
        if response.get_json()["info"]["budgets"][DEMO]["positivesUsed"] == QUOTA:
            break
        asked = [{**q, "datasetIds": [DEMO, "copy-cohort"]} for q in fresh.take(250, DEMO)]
    ledger = app.config["MBEACON"].ledger
    # one state and one quota for alice, filed under the first id in order: two ids spend no more than one
    assert ledger.account(COHORT_HOLDER, DEMO) is None and ledger.account("user:alice", DEMO) is None
    assert ledger.account(COHORT_HOLDER, "copy-cohort").state.count == QUOTA
    assert ledger.account("user:alice", "copy-cohort").state.count == QUOTA
    assert budget_of(client, key, DEMO)["positivesUsed"] == QUOTA
    svt2 = {"mechanism": "svt2", "epsilon": 1.0, "c": C}
    with pytest.raises(ConfigError, match="'demo-cohort' hold the same cohort file as 'copy-cohort'"):
        make_app(
            store=str(store), default_prior=prior, defaults=svt2, datasets={DEMO: svt2, "copy-cohort": svt2}
        )
    with pytest.raises(ConfigError, match="give them one policy"):
        other = {**datasets, "copy-cohort": {**datasets["copy-cohort"], "epsilon": 2.0}}
        make_app(store=str(store), default_prior=prior, datasets=other)


def test_a_prior_built_from_a_served_cohort_is_refused(make_app, twice) -> None:
    """/api/prior publishes the prior and answers from it are free: one built from a cohort of the store
    would publish that cohort's data, so the service refuses to start with it."""
    from mbeacon.beacon.config import ConfigError
    from mbeacon.store.priors import prior_from_cohort, save_prior

    store, _ = twice
    save_prior(
        store, prior_from_cohort(CohortStore(store).open("copy-cohort"), name="self-built", quantiles=5)
    )
    policy = {**POLICY, "contribution_bound": 1}
    with pytest.raises(
        ConfigError, match="prior 'self-built', built from the patients of dataset 'copy-cohort'"
    ):
        make_app(store=str(store), default_prior="self-built", datasets={DEMO: policy, "copy-cohort": policy})

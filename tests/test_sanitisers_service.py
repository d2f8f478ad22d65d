"""The sanitisers beyond plain SVT² (``svt2-margin``, ``svt2-noisy``, ``online-pmw``) served end to end
by real gunicorn.

Each mechanism gets its own server on the demo store; researchers ask contested queries (the cohort
disagrees with the prior, so TOPs come fast) over HTTP until the budget runs out. Checked: the
published parameters state the promised epsilon, answers are cached, a ``svt2-noisy`` or
``online-pmw`` TOP is answered by its released noisy count, ``online-pmw`` records one histogram update
per positive, and the 429 body, /api/budget and the ledger all agree that at most the promised epsilon
was spent. Every response is validated against the Beacon v2 framework schemas. The concurrency and
SIGKILL guarantees are parametrised over the mechanisms in ``test_server_guarantees.py``.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time

import httpx
import ledger_checks
import pytest
from beacon_schemas import validate
from servers import BeaconServer, free_port, write_config

from mbeacon.beacon.ledger import Ledger
from mbeacon.store.demo import ensure_demo

DATASET = "demo-cohort"
EPSILON, C, T = 10.0, 3, 1
POLICIES = {
    "svt2-margin": {"margin_above": 2.0, "margin_below": 0.5},
    "svt2-noisy": {"margin_above": 1.0, "release_share": 0.25},
    "online-pmw": {"margin": 1.0, "release_share": 0.25},
}
#: The mechanisms whose TOPs answer with their own noisy count (CONTROLLED callers get counts).
COUNTING = ("svt2-noisy", "online-pmw")
RESULTSETS = "responses/beaconResultsetsResponse.json"
ERROR = "responses/beaconErrorResponse.json"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return ensure_demo(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def contested(demo) -> list[dict]:
    return ledger_checks.contested_queries(demo.store, demo.prior, DATASET)


@pytest.fixture(scope="module", params=sorted(POLICIES))
def served(request, demo, tmp_path_factory):
    """A server whose dataset policy names the mechanism; a CONTROLLED and a REGISTERED user."""
    mechanism = request.param
    tmp = tmp_path_factory.mktemp(mechanism)
    url = f"sqlite:///{tmp}/ledger.sqlite3"
    ledger = Ledger.open(url)
    keys = {
        "carol": ledger.add_user("carol", tier="CONTROLLED"),
        "bob": ledger.add_user("bob"),
        "dave": ledger.add_user("dave", tier="CONTROLLED"),
    }
    settings = {"store": str(demo.store), "database_url": url, "default_prior": demo.prior,
                "rate_limit_per_minute": 0}  # fmt: skip
    defaults = {"mechanism": mechanism, "epsilon": EPSILON, "c": C, "threshold": T,
                "on_exhausted": "refuse", **POLICIES[mechanism]}  # fmt: skip
    config = write_config(tmp / "beacon.toml", settings, defaults)
    with BeaconServer(config, tmp, workers=2) as server:
        yield mechanism, server, url, keys


def _get(server: BeaconServer, path: str, key: str, **params) -> httpx.Response:
    return httpx.get(f"{server.url}{path}", params=params, headers={"Authorization": f"Bearer {key}"},
                     timeout=30)  # fmt: skip


def _ask(server, key, query, granularity="boolean") -> httpx.Response:
    response = _get(server, "/api/methylation", key, **query, includeResultsetResponses="ALL",
                    requestedGranularity=granularity)  # fmt: skip
    validate(
        response.json(), RESULTSETS if response.status_code == 200 else "responses/beaconErrorResponse.json"
    )
    return response


def test_datasets_publish_the_mechanism_and_its_whole_epsilon(served):
    mechanism, server, _, keys = served
    (collection,) = _get(server, "/api/datasets", keys["bob"]).json()["response"]["collections"]
    privacy = collection["info"]["privacy"]
    assert privacy["mechanism"] == mechanism
    assert privacy["epsilon"] == EPSILON
    assert privacy["marginAbove"] == POLICIES[mechanism].get("margin_above", 0.0)
    assert privacy["margin"] == POLICIES[mechanism].get("margin", 0.0)
    share = POLICIES[mechanism].get("release_share", 0.0)
    assert privacy["epsilon3"] == pytest.approx(share * EPSILON)
    # the shares add up to the promise: 2 (eps1 + eps2) + eps3 (single variant); eps1 + eps2 + eps3
    # for online-pmw, whose one stream is Lyu-Su-Li's generalised SVT
    svt = privacy["epsilon1"] + privacy["epsilon2"]
    assert (svt if mechanism == "online-pmw" else 2 * svt) + privacy["epsilon3"] == pytest.approx(EPSILON)


def test_answers_spend_at_most_the_promise_and_are_cached(served, contested):
    mechanism, server, url, keys = served
    budget = _get(server, "/api/budget", keys["carol"]).json()["response"]["budgets"][DATASET]
    assert (budget["mechanism"], budget["epsilonTotal"], budget["epsilonSpent"]) == (mechanism, EPSILON, 0.0)
    granularity = "count" if mechanism in COUNTING else "boolean"
    answered: list[tuple[dict, dict]] = []
    refusal = None
    for query in contested[:200]:
        response = _ask(server, keys["carol"], query, granularity)
        if response.status_code == 429:
            refusal = response.json()
            break
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["responseSummary"] is not None
        assert body["meta"]["returnedGranularity"] == granularity
        (result,) = body["response"]["resultSets"]
        answered.append((query, result))
    assert refusal is not None, "contested queries should exhaust c"
    data = [(q, r) for q, r in answered if r["info"]["answeredFrom"] == "data"]
    assert len(data) == C
    for _, result in data:
        if mechanism in COUNTING:  # the TOP is answered by the released noisy count
            assert result["exists"] == (result["resultsCount"] >= T)
        else:  # a TOP flips the prior's answer (the prior says no on contested ranges)
            assert result["exists"] is True
    info = refusal["info"]
    assert refusal["error"]["errorCode"] == 429 and info["dataset"] == DATASET
    assert info["positivesUsed"] == C
    assert math.isclose(info["epsilonSpent"], EPSILON) and info["epsilonTotal"] == EPSILON
    budget = _get(server, "/api/budget", keys["carol"]).json()["response"]["budgets"][DATASET]
    assert math.isclose(budget["epsilonSpent"], EPSILON) and budget["positivesUsed"] == C
    account = Ledger.open(url).account("user:carol", DATASET)
    assert account is not None and account.state.count == C
    assert account.epsilon_spent() <= EPSILON + 1e-12
    if mechanism == "online-pmw":  # one histogram update per positive, each a TOP's range
        updates = ledger_checks.pmw_updates(url, "user:carol")
        assert [u[0] for u in updates] == list(range(C))
        asked = {(q["probeId"], q["minValue"], q["maxValue"]) for q, _ in data}
        assert {(probe, lo, hi) for _, probe, lo, hi, _ in updates} == asked
    # answered questions stay answered (from the cache, identically) after the budget is gone
    for query, first in data + answered[:3]:
        again = _ask(server, keys["carol"], query, granularity)
        assert again.status_code == 200
        (result,) = again.json()["response"]["resultSets"]
        assert result["info"]["cached"] is True
        assert (result["exists"], result["info"]["answeredFrom"], result.get("resultsCount")) == (
            first["exists"],
            first["info"]["answeredFrom"],
            first.get("resultsCount"),
        )


def test_count_granularity_only_where_the_mechanism_pays_for_counts(served, contested):
    mechanism, server, _, keys = served
    body = _ask(server, keys["dave"], contested[-1], "count").json()
    expected = "count" if mechanism in COUNTING else "boolean"  # svt2-margin here has count_epsilon 0
    assert body["meta"]["returnedGranularity"] == expected
    # REGISTERED callers never get counts
    body = _ask(server, keys["bob"], contested[-1], "count").json()
    assert body["meta"]["returnedGranularity"] == "boolean"


DEMO_POLICIES = {
    "svt2-noisy": "release_share = 0.3\nmargin_above = 1.0",
    "online-pmw": "release_share = 0.3\nmargin = 1.0",
    "cohort-pmw": "release_share = 0.3",  # the demo's own mechanism
}


@pytest.mark.parametrize("mechanism", sorted(DEMO_POLICIES))
def test_mbeacon_demo_serves_the_mechanism_its_policy_names(tmp_path, contested, mechanism):
    """An operator edits the demo's kept mbeacon.toml to name a sanitiser; ``mbeacon demo`` serves it."""
    from mbeacon.cli.serve import DEMO_CONFIG

    data_dir = tmp_path / "demo"
    built = ensure_demo(data_dir)
    text = DEMO_CONFIG.format(store=built.store, ledger=data_dir / "ledger.sqlite3", prior=built.prior)
    text = text.replace('mechanism = "cohort-pmw"', f'mechanism = "{mechanism}"\n{DEMO_POLICIES[mechanism]}')
    if mechanism != "cohort-pmw":
        text = text.replace("quota = 5\n", "")  # a share of the cohort's positives: cohort-pmw's key
    (data_dir / "mbeacon.toml").write_text(text)
    port = free_port()
    demo = subprocess.Popen(
        [sys.executable, "-m", "mbeacon.cli", "demo", "--port", str(port), "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert demo.stdout is not None
        url = demo.stdout.readline().split("url: ", 1)[1].strip()
        key = demo.stdout.readline().split("key: ", 1)[1].strip()
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/info", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and demo.poll() is None, "the demo did not start"
            time.sleep(0.2)
        headers = {"Authorization": f"Bearer {key}"}
        (collection,) = httpx.get(f"{url}/datasets", headers=headers, timeout=30).json()["response"][
            "collections"
        ]
        assert collection["info"]["privacy"]["mechanism"] == mechanism
        guarantee = collection["info"]["privacy"]["guarantee"]
        if mechanism == "cohort-pmw":  # the demo as shipped promises the cohort, whoever asks
            assert guarantee["unit"] == "cohort" and guarantee["bestAttack"]["maxAuc"] < 0.74
        else:
            assert guarantee["unit"] == "budget holder"
        assert collection["info"]["privacy"]["epsilon3"] == pytest.approx(0.3)
        for query in contested[:5]:
            params = {**query, "includeResultsetResponses": "ALL"}
            response = httpx.get(f"{url}/methylation", params=params, headers=headers, timeout=30)
            assert response.status_code in (200, 429), response.text
            validate(response.json(), RESULTSETS if response.status_code == 200 else ERROR)
            if response.status_code == 200:
                (result,) = response.json()["response"]["resultSets"]
                assert result["info"]["answeredFrom"] in ("data", "prior")
        budget = httpx.get(f"{url}/budget", headers=headers, timeout=30).json()["response"]["budgets"]
        assert budget[DATASET]["mechanism"] == mechanism and budget[DATASET]["epsilonTotal"] == 1.0
        assert budget[DATASET]["epsilonSpent"] <= 1.0 + 1e-12
    finally:
        demo.terminate()
        demo.wait(timeout=30)

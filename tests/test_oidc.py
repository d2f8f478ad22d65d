"""Researchers sign in with OIDC tokens and carry GA4GH Passport visas (issue 29, items 1 to 3).

A real identity provider (tests/idp.py) on 127.0.0.1 signs real tokens and visas with generated RSA
keys; a real gunicorn beacon fetches its discovery document and key sets. A valid token is a budget
holder of its own (from ``iss`` and ``sub``); a valid ControlledAccessGrants visa opens the dataset
whose grant it names. Every forged, stale or misdirected token is a 401 and every such visa grants
nothing; none of them gets data or spends budget, every refusal is a Beacon error body, and nothing
of a token reaches the server's log.
"""

from __future__ import annotations

import shutil
import time

import httpx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from idp import IdentityProvider, Key, hmac_with_public_key, unsigned
from servers import BeaconServer

from mbeacon.api.oidc import holder_name, looks_like_jwt
from mbeacon.beacon.config import ConfigError, load_config
from mbeacon.beacon.errors import InvalidRequest
from mbeacon.beacon.holders import is_name
from mbeacon.beacon.ledger import Ledger
from mbeacon.store.cohorts import CohortStore
from mbeacon.store.demo import ensure_demo

GRANT = "https://dac.example.org/datasets/controlled"
CONTROLLED = "controlled"


# --- without a server ----------------------------------------------------------------------------


@given(st.text(min_size=1, max_size=200), st.text(min_size=1, max_size=200))
def test_a_holder_name_is_a_user_name_of_its_own_per_issuer_and_subject(issuer: str, subject: str) -> None:
    name = holder_name(issuer, subject)
    assert is_name(name) and name.startswith("oidc-")
    assert holder_name(issuer, subject) == name
    assert holder_name(issuer + "x", subject) != name and holder_name(issuer, subject + "x") != name


def test_api_keys_never_look_like_tokens_and_user_names_cannot_take_a_signed_in_holders(tmp_path) -> None:
    ledger = Ledger.open(f"sqlite:///{tmp_path}/ledger.sqlite3")
    key = ledger.add_user("alice")
    assert not looks_like_jwt(key)
    with pytest.raises(InvalidRequest, match="kept for researchers signed in"):
        ledger.add_user(holder_name("https://idp.example.org", "alice"))
    ledger.close()


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('issuers = ["http://idp.example.org"]\naudience = "b"', "must use https"),
        ('issuers = ["https://idp.example.org"]\naudience = "b"\nalgorithms = ["HS256"]', "algorithms.0"),
        ('issuers = ["https://idp.example.org"]\naudience = "b"\nalgorithms = ["none"]', "algorithms.0"),
        ('issuers = []\naudience = "b"', "issuers"),
        ('issuers = ["https://idp.example.org"]', "audience"),
    ],
)
def test_the_oidc_table_refuses_what_would_weaken_it(tmp_path, table: str, message: str) -> None:
    path = tmp_path / "beacon.toml"
    path.write_text(f"[oidc]\n{table}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(path, env={})


# --- a real provider and a real beacon -----------------------------------------------------------


@pytest.fixture(scope="module")
def idp():
    with IdentityProvider() as provider:
        yield provider


@pytest.fixture(scope="module")
def beacon(idp, tmp_path_factory):
    demo = ensure_demo(tmp_path_factory.mktemp("demo"))
    work = tmp_path_factory.mktemp("oidc")
    store = work / "store"
    shutil.copytree(demo.store, store)
    cohorts = CohortStore(store)
    source = cohorts.open(demo.dataset)
    rows = np.roll(np.arange(source.n_probes), 1)  # a cohort file of its own, of other patients
    samples = [f"c-{s}" for s in source.sample_ids.astype(str).tolist()]
    cohorts.write(CONTROLLED, samples, [(source.probe_ids[rows].tolist(), source.rows(rows))])
    url = f"sqlite:///{work}/ledger.sqlite3"
    ledger = Ledger.open(url)
    keys = {name: ledger.add_user(name, tier=tier) for name, tier in
            (("alice", "REGISTERED"), ("carol", "CONTROLLED"), ("dave", "CONTROLLED"))}  # fmt: skip
    ledger.close()
    config = work / "beacon.toml"
    config.write_text(
        f'store = "{store}"\ndatabase_url = "{url}"\ndefault_prior = "{demo.prior}"\n'
        "rate_limit_per_minute = 0\n"
        f'[oidc]\nissuers = ["{idp.url}"]\naudience = "{idp.audience}"\nuserinfo = true\n'
        "refresh_cooldown_seconds = 1\n"
        f'[[oidc.visa_issuers]]\niss = "{idp.visa_issuer}"\njku = ["{idp.visa_jku}"]\n'
        '[defaults]\nmechanism = "svt2"\nepsilon = 5.0\nc = 50\n'
        f'[datasets.{CONTROLLED}]\ntier = "CONTROLLED"\ngrant = "{GRANT}"\ngranted_users = ["Carol"]\n'
    )
    probe = str(source.probe_ids[0])
    with BeaconServer(config, work, workers=2) as server:
        yield server, url, keys, probe


def _ask(beacon, bearer: str, dataset: str) -> httpx.Response:
    server, _, _, probe = beacon
    return httpx.get(f"{server.url}/api/methylation", params={"probeId": probe, "datasetIds": dataset},
                     headers={"Authorization": f"Bearer {bearer}"}, timeout=30)  # fmt: skip


def _ledger_state(url: str) -> tuple:
    ledger = Ledger.open(url)
    try:
        return sorted(repr(a) for a in ledger.accounts()), len(ledger.audit_log(limit=100_000))
    finally:
        ledger.close()


def _refused(response: httpx.Response, status: int, words: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["errorCode"] == status and words in error["errorMessage"], error


@pytest.mark.slow
def test_a_valid_token_is_a_budget_holder_of_its_own(idp, beacon) -> None:
    server, url, _, _ = beacon
    token = idp.token("researcher-1")
    answer = _ask(beacon, token, "demo-cohort")
    assert answer.status_code == 200, answer.text
    holder = f"user:{holder_name(idp.url, 'researcher-1')}"
    ledger = Ledger.open(url)
    assert holder in {a.principal for a in ledger.accounts()}
    ledger.close()
    budget = httpx.get(f"{server.url}/api/budget", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert budget.status_code == 200 and "demo-cohort" in budget.json()["response"]["budgets"]


@pytest.mark.slow
def test_forged_stale_and_misdirected_tokens_are_refused_and_spend_nothing(idp, beacon) -> None:
    server, url, keys, _ = beacon
    assert _ask(beacon, idp.token("researcher-2"), "demo-cohort").status_code == 200  # keys fetched
    outsider = Key()  # a key the provider never published
    claims = idp.claims("researcher-3")
    forged = {
        "expired": (idp.token("researcher-3", exp=int(time.time()) - 3600), "expired"),
        "not yet valid": (idp.token("researcher-3", nbf=int(time.time()) + 3600), "not valid yet"),
        "wrong audience": (idp.token("researcher-3", aud="another-beacon"), "not issued for this beacon"),
        "wrong issuer": (idp.token("researcher-3", iss=idp.url + "/evil"), "does not trust"),
        "alg none": (unsigned(claims), "algorithm"),
        "HS256 with the public key": (hmac_with_public_key(claims, idp.keys[0]), "algorithm"),
        "unknown key": (idp.token("researcher-3", key=outsider), "does not publish"),
        "no subject": (idp.keys[0].sign({k: v for k, v in claims.items() if k != "sub"}), "token"),
        "garbage": ("eyJhbGciOiJSUzI1NiJ9.eyJ.x", "token"),
    }
    before = _ledger_state(url)
    for what, (token, words) in forged.items():
        response = _ask(beacon, token, "demo-cohort")
        assert response.status_code == 401, (what, response.text)
        _refused(response, 401, words)
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert _ledger_state(url) == before, "a refused token spent or recorded something"
    log = server.log()
    for token, _ in forged.values():
        signature = token.split(".")[-1]
        assert token not in log and (not signature or signature[:16] not in log)
    assert keys["alice"] not in log


@pytest.mark.slow
def test_a_rotated_key_is_fetched_once_its_tokens_arrive(idp, beacon) -> None:
    assert _ask(beacon, idp.token("researcher-4"), "demo-cohort").status_code == 200
    old = idp.keys[0]
    idp.rotate()
    time.sleep(1.2)  # the configured cooldown between two fetches of a key set
    fetched = idp.requests.count("/jwks")
    answer = _ask(beacon, idp.token("researcher-4"), "demo-cohort")
    assert answer.status_code == 200, answer.text
    assert idp.requests.count("/jwks") > fetched  # the unknown kid made the beacon fetch the new set
    idp.keys.append(old)  # later tests sign with either


@pytest.mark.slow
def test_visas_open_the_dataset_they_grant_and_nothing_else(idp, beacon) -> None:
    _, url, keys, _ = beacon
    grant = idp.visa("ControlledAccessGrants", GRANT, "researcher-5")
    # without a visa: the dataset does not exist for this researcher
    _refused(_ask(beacon, idp.token("researcher-5"), CONTROLLED), 403, "not available to you")
    # a valid visa in the token's passport claim, then from the provider's userinfo
    assert _ask(beacon, idp.token("researcher-5", ga4gh_passport_v1=[grant]), CONTROLLED).status_code == 200
    plain = idp.token("researcher-6")
    idp.userinfo[plain] = {
        "sub": "researcher-6",
        "ga4gh_passport_v1": [idp.visa("ControlledAccessGrants", GRANT, "researcher-6")],
    }
    assert _ask(beacon, plain, CONTROLLED).status_code == 200

    now = int(time.time())
    useless = {
        "forged": idp.visa("ControlledAccessGrants", GRANT, "researcher-7", key=idp.other_key),
        "expired": idp.visa("ControlledAccessGrants", GRANT, "researcher-7", exp=now - 3600),
        "untrusted jku": idp.visa(
            "ControlledAccessGrants", GRANT, "researcher-7", key=idp.other_key, jku=idp.other_jku
        ),
        "untrusted issuer": idp.visa("ControlledAccessGrants", GRANT, "researcher-7", iss=idp.url),
        "another dataset": idp.visa("ControlledAccessGrants", GRANT + "-other", "researcher-7"),
        "another researcher": idp.visa("ControlledAccessGrants", GRANT, "researcher-5"),
        "not a grant": idp.visa("ResearcherStatus", GRANT, "researcher-7"),
        "not a jwt": "not-a-visa",
    }
    before = _ledger_state(url)
    for what, visa in useless.items():
        token = idp.token("researcher-7", ga4gh_passport_v1=[visa])
        response = _ask(beacon, token, CONTROLLED)
        assert response.status_code == 403, (what, response.text)
        _refused(response, 403, "not available to you")
        assert _ask(beacon, token, "demo-cohort").status_code == 200  # the token itself is valid
    after = _ledger_state(url)
    assert [a for a in after[0] if CONTROLLED in a] == [a for a in before[0] if CONTROLLED in a]

    # API keys keep working: a key user the dataset names may ask; another CONTROLLED user may not
    assert _ask(beacon, keys["carol"], CONTROLLED).status_code == 200
    _refused(_ask(beacon, keys["dave"], CONTROLLED), 403, "not available to you")
    _refused(_ask(beacon, keys["alice"], CONTROLLED), 403, "not available to you")


def test_bona_fide_visas_open_registered_datasets_when_the_configuration_requires_them(idp, tmp_path) -> None:
    from mbeacon.api import create_app

    demo = ensure_demo(tmp_path / "demo")
    app = create_app({
        "store": str(demo.store), "database_url": f"sqlite:///{tmp_path}/ledger.sqlite3",
        "default_prior": demo.prior, "rate_limit_per_minute": 0,
        "oidc": {"issuers": [idp.url], "audience": idp.audience, "require_bona_fide": True,
                 "visa_issuers": [{"iss": idp.visa_issuer, "jku": [idp.visa_jku]}]},
    })  # fmt: skip
    client = app.test_client()
    probe = str(CohortStore(demo.store).open(demo.dataset).probe_ids[0])

    def ask(token: str) -> int:
        return client.get("/api/methylation", query_string={"probeId": probe, "datasetIds": demo.dataset},
                          headers={"Authorization": f"Bearer {token}"}).status_code  # fmt: skip

    status = idp.visa("ResearcherStatus", "https://doi.org/10.1038/s41431-018-0219-y", "bona-fide")
    terms = idp.visa("AcceptedTermsAndPolicies", "https://doi.org/10.1038/s41431-018-0219-y", "bona-fide")
    assert ask(idp.token("bona-fide")) == 403  # signed in, but only PUBLIC datasets without the visas
    assert ask(idp.token("bona-fide", ga4gh_passport_v1=[status])) == 403  # one of the two is not enough
    assert ask(idp.token("bona-fide", ga4gh_passport_v1=[status, terms])) == 200
    app.config["MBEACON"].ledger.close()


@pytest.mark.slow
def test_a_network_request_with_a_forwarded_token(idp, beacon) -> None:
    """What a Beacon Network sends: the researcher's token forwarded, POST /datasets, and the
    datasets to ask in bento's and in the production implementation's spellings."""
    server, _, _, probe = beacon
    token = idp.token("network-1", ga4gh_passport_v1=[idp.visa("ControlledAccessGrants", GRANT, "network-1")])
    headers = {"Authorization": f"Bearer {token}"}
    minimal = {"meta": {"apiVersion": "v2.0.0"}}
    listed = httpx.post(f"{server.url}/api/datasets", json=minimal, headers=headers, timeout=30)
    assert listed.status_code == 200, listed.text
    assert CONTROLLED in {d["id"] for d in listed.json()["response"]["collections"]}
    bento = {"query": {"requestParameters": {"probeId": probe}, "datasets": {"datasetIds": [CONTROLLED]}}}
    production = {"query": {"requestParameters": {"probeId": probe, "datasets": [CONTROLLED]}}}
    for body in (bento, production):
        answer = httpx.post(f"{server.url}/api/methylation", json=body, headers=headers, timeout=30)
        assert answer.status_code == 200, answer.text
        assert {s["id"] for s in answer.json()["response"]["resultSets"]} == {CONTROLLED}
    other = idp.token("network-2")  # no grant: the dataset it names is refused, never widened
    refused = httpx.post(f"{server.url}/api/methylation", json=bento, timeout=30,
                         headers={"Authorization": f"Bearer {other}"})  # fmt: skip
    _refused(refused, 403, "not available to you")

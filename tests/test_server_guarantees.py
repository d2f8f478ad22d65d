"""The ledger's guarantees, each proved against real gunicorn servers over HTTP (for every protected
mechanism where cheap: they share SVT²'s state and the one ledger transaction; ``online-pmw`` also
writes one histogram update per positive in that transaction, checked here to match the positives).

(a) 4 workers, 16 concurrent clients of one user, c = 5: at most 5 ``data`` answers ever, and the
    ledger agrees with what the clients received;
(b) the same with two server processes on different ports sharing one PostgreSQL database;
(c) workers killed with SIGKILL mid-load lose no committed state and overspend nothing.

The queries are chosen where the cohort disagrees with the prior (several patients in a narrow
range the prior finds unlikely), so SVT² answers TOP often and the budget is contested at once.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import ledger_checks
import pytest
from load_checks import private_pg_schema
from servers import BeaconServer, write_config

from mbeacon.beacon.ledger import Ledger
from mbeacon.store.demo import ensure_demo

pytestmark = pytest.mark.slow

DATASET = "demo-cohort"
#: Every protected mechanism keeps SVT²'s state in the ledger, so each must keep the same guarantees.
MECHANISMS = {
    "svt2": {"mechanism": "svt2"},
    "svt2-margin": {"mechanism": "svt2-margin", "margin_above": 1.0, "margin_below": 0.25},
    "svt2-noisy": {"mechanism": "svt2-noisy", "release_share": 0.25},
    "online-pmw": {"mechanism": "online-pmw", "release_share": 0.25, "margin": 0.5},
}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return ensure_demo(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def contested_queries(demo) -> list[dict]:
    """Distinct narrow ranges holding >= 5 patients where the prior expects < 0.5 of 60."""
    queries = ledger_checks.contested_queries(demo.store, demo.prior, DATASET)
    assert len(queries) >= 400, f"only {len(queries)} contested queries in the demo cohort"
    return queries


def _config(tmp_path: Path, demo, database_url: str, c: int, mechanism: str = "svt2") -> Path:
    settings = {"store": str(demo.store), "database_url": database_url, "default_prior": demo.prior,
                "rate_limit_per_minute": 0}  # fmt: skip
    defaults = {"epsilon": 20.0, "c": c, "threshold": 1, "on_exhausted": "refuse", **MECHANISMS[mechanism]}
    return write_config(tmp_path / f"beacon-{uuid.uuid4().hex[:6]}.toml", settings, defaults)


def _ask(url: str, key: str, query: dict) -> tuple[int, dict | None]:
    """One GET query; the status and, for 200, the demo dataset's result set (None if lost)."""
    params = {**query, "includeResultsetResponses": "ALL"}
    try:
        response = httpx.get(f"{url}/api/methylation", params=params,
                             headers={"Authorization": f"Bearer {key}"}, timeout=30)  # fmt: skip
    except httpx.TransportError:
        return -1, None  # the connection died with its worker: the answer is lost, never the budget
    if response.status_code != 200:
        return response.status_code, None
    (result_set,) = response.json()["response"]["resultSets"]
    return 200, result_set


def _hammer(
    urls: list[str], key: str, queries: list[dict], clients: int
) -> list[tuple[dict, int, dict | None]]:
    """``clients`` threads, each asking its own share of the queries, round-robin over the servers."""
    shares = [queries[i::clients] for i in range(clients)]

    def client(n: int) -> list[tuple[dict, int, dict | None]]:
        url = urls[n % len(urls)]
        return [(q, *_ask(url, key, q)) for q in shares[n]]

    with ThreadPoolExecutor(clients) as pool:
        return [row for rows in pool.map(client, range(clients)) for row in rows]


def _data_answers(rows) -> list[tuple[dict, dict]]:
    return [(q, rs) for q, status, rs in rows if status == 200 and rs["info"]["answeredFrom"] == "data"]


def _check_ledger_agrees(ledger: Ledger, rows, c: int) -> None:
    account = ledger.account("user:alice", DATASET)
    assert account is not None
    received = _data_answers(rows)
    assert len(received) <= c
    assert account.state.count == len(received), "the ledger and the clients disagree"
    assert account.epsilon_spent() <= account.params.epsilon + 1e-12
    statuses = {status for _, status, _ in rows}
    assert statuses <= {200, 429}, statuses
    _check_updates(ledger, account.state.count if account.params.mechanism == "online-pmw" else 0)


def _check_updates(ledger: Ledger, positives: int) -> None:
    """online-pmw: exactly one histogram update per spent positive, numbered 0..positives-1 (none
    for the other mechanisms)."""
    with ledger.db.transaction(write=False) as tx:
        tx.execute("SELECT seq FROM pmw_updates WHERE principal = 'user:alice' ORDER BY seq")
        assert [row[0] for row in tx.fetchall()] == list(range(positives))


def account_mechanism(url: str) -> str:
    account = Ledger.open(url).account("user:alice", DATASET)
    assert account is not None
    return account.params.mechanism


@pytest.mark.parametrize("mechanism", sorted(MECHANISMS))
def test_a_four_workers_sixteen_clients_sqlite(tmp_path, demo, contested_queries, mechanism):
    url = f"sqlite:///{tmp_path}/ledger.sqlite3"
    key = Ledger.open(url).add_user("alice")
    with BeaconServer(_config(tmp_path, demo, url, c=5, mechanism=mechanism), tmp_path, workers=4) as server:
        rows = _hammer([server.url], key, contested_queries[:320], clients=16)
    assert len(_data_answers(rows)) == 5, "the contested queries should exhaust c = 5"
    assert sum(status == 429 for _, status, _ in rows) > 0
    _check_ledger_agrees(Ledger.open(url), rows, c=5)
    assert account_mechanism(url) == mechanism


@pytest.fixture
def pg_schema():
    """A private schema in the machine's PostgreSQL database ``test``; dropped afterwards."""
    with private_pg_schema() as url:
        yield url


@pytest.mark.parametrize("mechanism", ["svt2", "svt2-noisy", "online-pmw"])
def test_b_two_servers_share_postgresql(tmp_path, demo, contested_queries, pg_schema, mechanism):
    key = Ledger.open(pg_schema).add_user("alice")
    config = _config(tmp_path, demo, pg_schema, c=5, mechanism=mechanism)
    with BeaconServer(config, tmp_path, workers=2) as one, BeaconServer(config, tmp_path, workers=2) as two:
        assert one.port != two.port
        rows = _hammer([one.url, two.url], key, contested_queries[:320], clients=16)
    assert len(_data_answers(rows)) == 5
    _check_ledger_agrees(Ledger.open(pg_schema), rows, c=5)
    assert Ledger.open(pg_schema).account("user:alice", DATASET).params.mechanism == mechanism


@pytest.mark.parametrize("mechanism", ["svt2", "svt2-noisy", "online-pmw"])
def test_c_sigkill_mid_load_loses_no_committed_state(tmp_path, demo, contested_queries, mechanism):
    url = f"sqlite:///{tmp_path}/ledger.sqlite3"
    key = Ledger.open(url).add_user("alice")
    c = 60
    config = _config(tmp_path, demo, url, c=c, mechanism=mechanism)
    with BeaconServer(config, tmp_path, workers=4) as server:
        killed: list[int] = []

        def killer() -> None:
            for delay in (0.4, 0.8, 1.2):
                time.sleep(delay)
                pids = server.worker_pids()
                if pids:
                    os.kill(pids[0], signal.SIGKILL)
                    killed.append(pids[0])

        thread = threading.Thread(target=killer)
        thread.start()
        rows = _hammer([server.url], key, contested_queries[:480], clients=16)
        thread.join()
        assert killed, "no worker was killed"
        # Everything a client received is committed: asking again gives the identical cached answer.
        answered = [(q, rs) for q, status, rs in rows if status == 200]
        for query, first in answered[:: max(1, len(answered) // 60)]:
            status, again = _ask(server.url, key, query)
            assert status == 200
            assert again["info"]["cached"] is True
            assert (again["exists"], again["info"]["answeredFrom"]) == (
                first["exists"],
                first["info"]["answeredFrom"],
            )
        assert account_mechanism(url) == mechanism
        assert "Traceback" not in server.log()
    ledger = Ledger.open(url)
    account = ledger.account("user:alice", DATASET)
    received = _data_answers(rows)
    assert account.state.count <= c, "overspent"
    assert len(received) <= account.state.count, "a delivered data answer is missing from the ledger"
    assert account.epsilon_spent() <= account.params.epsilon + 1e-12
    _check_updates(ledger, account.state.count if mechanism == "online-pmw" else 0)
    with sqlite3.connect(f"{tmp_path}/ledger.sqlite3") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        cached = conn.execute("SELECT COUNT(*) FROM answers").fetchone()[0]
        fresh = conn.execute(
            "SELECT COUNT(*) FROM audit_log WHERE event = 'query' AND cached = 0"
        ).fetchone()[0]
        data_rows = conn.execute("SELECT COUNT(*) FROM answers WHERE answered_from = 'data'").fetchone()[0]
    assert cached == fresh, "cache rows and audit rows are written in one transaction"
    assert data_rows == account.state.count, "every spent positive has its cached data answer"


def _hammer_as_many(urls: list[str], keys: dict[str, str], queries: list[dict], clients: int):
    """``clients`` threads, client n asking as user ``n % len(keys)`` on server ``n % len(urls)``."""
    names = sorted(keys)
    shares = [queries[i::clients] for i in range(clients)]

    def client(n: int) -> list[tuple[str, dict, int, dict | None]]:
        name, url = names[n % len(names)], urls[n % len(urls)]
        return [(name, q, *_ask(url, keys[name], q)) for q in shares[n]]

    with ThreadPoolExecutor(clients) as pool:
        return [row for rows in pool.map(client, range(clients)) for row in rows]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_d_cohort_pmw_one_state_for_every_holder(tmp_path, demo, contested_queries, backend, request):
    """cohort-pmw: 4 holders, 16 clients (and, on PostgreSQL, two servers): the cohort's shared state
    never records more than c positives, each holder's account no more than its quota, and the cohort's
    histogram updates are exactly one per positive, whoever spent it."""
    from mbeacon.beacon.sanitisers.cohort_pmw import COHORT_HOLDER

    c, quota = 6, 2
    url = (
        request.getfixturevalue("pg_schema") if backend == "postgresql" else f"sqlite:///{tmp_path}/l.sqlite3"
    )
    ledger = Ledger.open(url)
    keys = {name: ledger.add_user(name) for name in ("alice", "bob", "carol", "dave")}
    settings = {"store": str(demo.store), "database_url": url, "default_prior": demo.prior,
                "rate_limit_per_minute": 0}  # fmt: skip
    defaults = {"mechanism": "cohort-pmw", "epsilon": 20.0, "c": c, "quota": quota, "threshold": 1,
                "release_share": 0.25, "margin": 0.5}  # fmt: skip
    config = write_config(tmp_path / "cohort.toml", settings, defaults)
    servers = 2 if backend == "postgresql" else 1
    with BeaconServer(config, tmp_path, workers=4 // servers) as one:
        if servers == 2:
            with BeaconServer(config, tmp_path, workers=2) as two:
                rows = _hammer_as_many([one.url, two.url], keys, contested_queries[:320], clients=16)
        else:
            rows = _hammer_as_many([one.url], keys, contested_queries[:320], clients=16)
    assert {status for _, _, status, _ in rows} == {200}  # past a quota: answered from the state, free
    received: dict[str, int] = {}
    for name, _, _, rs in rows:
        received[name] = received.get(name, 0) + (rs["info"]["answeredFrom"] == "data")
    ledger = Ledger.open(url)
    cohort = ledger.account(COHORT_HOLDER, DATASET)
    assert cohort is not None and cohort.state.count == sum(received.values()) == c
    for name in keys:
        account = ledger.account(f"user:{name}", DATASET)
        assert account.state.count == received[name] <= quota
    assert cohort.epsilon_spent() <= cohort.params.epsilon + 1e-12
    with ledger.db.transaction(write=False) as tx:
        tx.execute("SELECT principal, seq FROM pmw_updates ORDER BY seq")
        assert tx.fetchall() == [(COHORT_HOLDER, k) for k in range(c)]

"""Fault injection against real servers (issue 6, "Prove it holds"): the ledger survives every fault.

1. SIGKILL of workers and of the gunicorn master, 20 times mid-load on one SQLite ledger: no overspend,
   every answer a client received is committed, cache and audit log agree, the file is intact.
2. PostgreSQL backends terminated while serving: 503 (Beacon error, Retry-After) or success, never a
   500, and the pool recovers without a restart.
3. A dataset file replaced while serving (``mbeacon ingest --replace``): no request fails, answers
   come from the new file, automatically and after ``kill -HUP``; old cached answers are not reused.
4. The SQLite ledger's file system full, or read-only: queries refused with 503, nothing spent,
   nothing answered, reads and the CLI clean, the file intact; the server recovers without a
   restart once space is freed (a read-only remount after a disk error needs stop, fsck, start).

A double spend or a lost ledger row would be a privacy breach; a 500 or a traceback is a bug.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from ledger_checks import (
    DATASET,
    LOST,
    Load,
    Outcome,
    QuerySupply,
    answer_of,
    ask,
    check_ledger,
    check_reasked,
    contested_queries,
    ledger_counts,
    query_key,
)
from servers import BeaconServer, write_config

from mbeacon.beacon.ledger import Ledger
from mbeacon.store.cohorts import CohortStore
from mbeacon.store.demo import ensure_demo

pytestmark = pytest.mark.slow

PG_URL = os.environ.get("MBEACON_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return ensure_demo(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def contested(demo) -> list[dict]:
    queries = contested_queries(demo.store, demo.prior)
    assert len(queries) >= 400, f"only {len(queries)} contested queries in the demo cohort"
    return queries


@pytest.fixture(scope="module")
def probe_ids(demo) -> list[str]:
    return [str(p) for p in CohortStore(demo.store).open(DATASET).probe_ids]


def _config(tmp_path: Path, demo, database_url: str, c: int, epsilon: float = 20.0) -> Path:
    settings = {"store": str(demo.store), "database_url": database_url, "default_prior": demo.prior,
                "rate_limit_per_minute": 0}  # fmt: skip
    defaults = {"epsilon": epsilon, "c": c, "threshold": 1, "on_exhausted": "refuse"}
    return write_config(tmp_path / f"beacon-{uuid.uuid4().hex[:6]}.toml", settings, defaults)


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its parent to reap it counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _port_closed(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2.0)
        return sock.connect_ex(("127.0.0.1", port)) != 0


class FaultServer(BeaconServer):
    """A BeaconServer whose master can be SIGKILLed, leaving its workers orphaned."""

    def kill_master(self) -> list[int]:
        """SIGKILL the master; return its workers' pids (orphans now: see :func:`reap_orphans`)."""
        assert self.process is not None
        workers = self.worker_pids()
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self._log.close()
        self.process = None
        return workers


def reap_orphans(workers: list[int], port: int, grace: float = 20.0) -> tuple[int, int]:
    """Wait for a killed master's workers to exit (they notice that their parent changed), SIGKILL the
    ones still running after ``grace`` seconds; then nothing may listen on ``port``.

    Returns (workers that exited on their own, workers that had to be killed).
    """
    deadline = time.monotonic() + grace
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    stragglers = [p for p in workers if _alive(p)]
    for pid in stragglers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in workers), "an orphaned worker survived SIGKILL"
    assert _port_closed(port), "an orphan still listens on the killed server's port"
    return len(workers) - len(stragglers), len(stragglers)


def _no_tracebacks(logs: list[str]) -> None:
    for text in logs:
        assert "Traceback" not in text, text[text.index("Traceback") - 2000 :][:6000]
        assert '"status": 500' not in text


# --- 1. SIGKILL of workers and the master mid-load ----------------------------------------------


def test_sigkill_workers_and_master_twenty_times(tmp_path, demo, contested, probe_ids):
    """20 SIGKILLs mid-load (13 of a worker, 7 of the master, whose orphaned workers must exit and free
    the port), 12 clients of two users with c = 40; the ledger is checked after every cycle, what
    clients received is re-asked after every restart (a sample) and at the end (all of it)."""
    path = tmp_path / "ledger.sqlite3"
    url = f"sqlite:///{path}"
    users = ["alice", "bob"]
    ledger = Ledger.open(url)
    keys = {user: ledger.add_user(user) for user in users}
    ledger.close()
    c = 40
    config = _config(tmp_path, demo, url, c=c)
    supply = QuerySupply(contested, probe_ids)
    load = Load("", keys, supply, clients=12)
    rng = random.Random(2024)
    logs: list[str] = []
    kills: Counter[str] = Counter()
    all_orphans: list[int] = []
    server = FaultServer(config, tmp_path, workers=2).start()
    try:
        for cycle in range(20):
            kill_master = cycle % 3 == 2 or cycle == 19  # 13 workers and 7 masters in all
            load.start(server.url)
            time.sleep(rng.uniform(0.5, 1.2))  # mid-load
            if not kill_master:
                victim = rng.choice(server.worker_pids())
                os.kill(victim, signal.SIGKILL)
                kills["worker"] += 1
                time.sleep(0.4)  # the load goes on while gunicorn replaces the worker
                load.stop()
                server.wait_for_workers(60)
            else:
                killed_server = server
                orphans = killed_server.kill_master()
                all_orphans += orphans
                kills["master"] += 1
                time.sleep(0.3)
                load.stop()
                # restart at once on the same config and ledger (a new port) while the orphans drain
                server = FaultServer(config, tmp_path, workers=2).start()
                exited, killed = reap_orphans(orphans, killed_server.port)
                kills["orphans exited"] += exited
                kills["orphans killed"] += killed
                logs.append(killed_server.log())
                _no_tracebacks(logs[-1:])
            ledger = Ledger.open(url)
            try:
                check_ledger(ledger, load.outcomes, users, c)
            finally:
                ledger.close()
            if kill_master:  # after a restart: a sample of what clients received is still there
                check_reasked(server.url, keys, load.outcomes, limit=15)
        statuses = Counter(o.status for o in load.outcomes)
        assert set(statuses) <= {200, 429, LOST}, statuses
        assert statuses[200] > 0 and statuses[LOST] > 0, statuses
        reasked = check_reasked(server.url, keys, load.outcomes)  # everything received, at the end
        logs.append(server.log())
    finally:
        load.stop()
        server.stop()
        for pid in filter(_alive, all_orphans):  # only if the test failed half-way
            os.kill(pid, signal.SIGKILL)
    _no_tracebacks(logs)
    ledger = Ledger.open(url)
    counts = check_ledger(ledger, load.outcomes, users, c)
    spent = {u: ledger.account(f"user:{u}", DATASET).state.count for u in users}
    ledger.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert statuses[429] > 0 or max(spent.values()) == c, "the budget was never contested"
    print(f"\nkill loop: kills {dict(kills)}, requests {sum(statuses.values())}, statuses {dict(statuses)},"
          f" answers re-asked {reasked}, positives spent {spent} of c = {c}, ledger {counts}")  # fmt: skip


# --- 2. PostgreSQL backends terminated while serving ---------------------------------------------


@pytest.fixture
def pg_role():
    """A private role, schema and application name in the shared database ``test``; the URL the server
    uses. Faults are aimed only at this role's backends, never at other sessions'."""
    psycopg = pytest.importorskip("psycopg")
    name = f"mbeacon_fault_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {name} LOGIN")
            conn.execute(f"CREATE SCHEMA {name} AUTHORIZATION {name}")
    except psycopg.OperationalError as error:
        pytest.fail(f"PostgreSQL at {PG_URL} is required for this test: {error}")
    parts = urlsplit(PG_URL)
    host = parts.netloc.rsplit("@", 1)[-1]
    url = f"postgresql://{name}@{host}{parts.path}?options=-csearch_path%3D{name}&application_name={name}"
    yield name, url
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"ALTER ROLE {name} LOGIN")
        _terminate(name)
        conn.execute(f"DROP SCHEMA {name} CASCADE")
        conn.execute(f"DROP ROLE {name}")


def _terminate(role: str) -> int:
    """Terminate every backend of ``role`` (the server's pool connections); how many there were."""
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        sql = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = %s"
        return conn.execute(sql, (role,)).fetchone()[0]


def _set_login(role: str, login: bool) -> None:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"ALTER ROLE {role} {'LOGIN' if login else 'NOLOGIN'}")


def _readyz(url: str) -> tuple[int, dict]:
    response = httpx.get(url + "/readyz", timeout=60)
    return response.status_code, response.json()


def _assert_503_is_clean(outcomes: list[Outcome]) -> None:
    for o in outcomes:
        if o.status == 503:
            assert o.body["error"]["errorCode"] == 503, o.body
            assert "ledger" in o.body["error"]["errorMessage"], o.body
            assert o.retry_after is not None


def test_postgresql_backends_terminated_while_serving(tmp_path, demo, contested, probe_ids, pg_role):
    """Terminated connections: 503 or success, never 500; the pool reconnects without a restart.
    Then the role refused new connections for a while (the ledger down): 503, /readyz 503, recovery."""
    role, url = pg_role
    ledger = Ledger.open(url)
    keys = {"alice": ledger.add_user("alice")}
    ledger.close()
    c = 30
    config = _config(tmp_path, demo, url, c=c)
    load = Load("", keys, QuerySupply(contested, probe_ids), clients=8)
    report: dict[str, object] = {}
    with FaultServer(config, tmp_path, workers=2) as server:
        master, workers = server.process.pid, sorted(server.worker_pids())
        load.start(server.url)
        time.sleep(1.0)
        # (i) backends terminated, 8 times 0.4 s apart, while the clients go on
        terminated, ready = [], []
        for _ in range(8):
            terminated.append(_terminate(role))
            ready.append(_readyz(server.url)[0])
            time.sleep(0.4)
        assert sum(terminated) > 0, "no backend of the server was found to terminate"
        dropped_at = time.monotonic()
        during = len(load.outcomes)
        recovered = _first_success(server.url, keys["alice"], load.supply)
        time.sleep(1.0)
        load.stop()
        report["terminated backends"] = terminated
        report["/readyz right after each termination"] = ready
        report["recovery after the last termination (s)"] = round(recovered - dropped_at, 2)
        after = [ask(server.url, keys["alice"], load.supply.new()) for _ in range(20)]
        assert {o.status for o in after} <= {200, 429}, Counter(o.status for o in after)
        assert _readyz(server.url)[0] == 200

        # (ii) the ledger down: the role may not log in and its backends are gone
        _set_login(role, False)
        _terminate(role)
        load.start()
        down = [_readyz(server.url)]
        time.sleep(3.0)
        _set_login(role, True)
        up_at = time.monotonic()
        load.stop()
        recovered = _first_success(server.url, keys["alice"], load.supply, timeout=120)
        report["recovery after logins allowed again (s)"] = round(recovered - up_at, 2)
        assert down[0][0] == 503 and down[0][1]["checks"]["ledger"] == "unavailable", down
        assert _readyz(server.url) == (200, {"status": "ready", "checks": {"store": "ok", "ledger": "ok"}})
        after += [ask(server.url, keys["alice"], load.supply.new()) for _ in range(20)]
        assert {o.status for o in after[-20:]} <= {200, 429}, Counter(o.status for o in after[-20:])
        # no restart: the same master and workers served throughout
        assert server.process.poll() is None and server.process.pid == master
        assert sorted(server.worker_pids()) == workers, "a worker died or was replaced"
        log = server.log()
    outcomes = load.outcomes + after
    statuses = Counter(o.status for o in outcomes)
    report["statuses"] = dict(statuses)
    report["503 while terminating"] = sum(o.status == 503 for o in load.outcomes[:during])
    assert set(statuses) <= {200, 429, 503}, statuses
    assert statuses[503] > 0, "the ledger outage was never seen by a client"
    _assert_503_is_clean(outcomes)
    _no_tracebacks([log])
    ledger = Ledger.open(url)
    try:
        counts = check_ledger(ledger, outcomes, ["alice"], c)
    finally:
        ledger.close()
    print(f"\npostgresql: {report}, ledger {counts}")


def _first_success(url: str, key: str, supply: QuerySupply, timeout: float = 60.0) -> float:
    """Ask new queries until one is answered (200 or 429); when that happened (time.monotonic())."""
    deadline = time.monotonic() + timeout
    seen = Counter()
    while time.monotonic() < deadline:
        outcome = ask(url, key, supply.new())
        if outcome.status in (200, 429):
            return time.monotonic()
        seen[outcome.status] += 1
        assert outcome.status == 503, outcome
        time.sleep(0.2)
    raise AssertionError(f"no recovery within {timeout} s: {dict(seen)}")


# --- 3. A dataset file replaced while serving ----------------------------------------------------

SWITCH = "switch"
SWITCH_PROBE = "cg00000001"
VERSIONS = {1: 0.2, 2: 0.8, 3: 0.5}  # the probe's value in every sample, per version of the file
# three ranges, 10 variants each (distinct cache keys): each version has a different one that holds
RANGES = {"low": (0.1, 0.3), "high": (0.7, 0.9), "middle": (0.4, 0.6)}
QUERIES = [
    {"probeId": SWITCH_PROBE, "minValue": lo, "maxValue": round(hi + k / 1000, 3)}
    for lo, hi in RANGES.values()
    for k in range(10)
]


def _switch_csv(path: Path, version: int) -> Path:
    """12 samples x 20 probes: SWITCH_PROBE at VERSIONS[version]; the others differ by version too."""
    samples = [f"S{i}" for i in range(12)]
    lines = [",".join(["ID_REF", *samples]), ",".join([SWITCH_PROBE, *[str(VERSIONS[version])] * 12])]
    for p in range(2, 21):
        values = [f"{(p * 37 + i * 11 + version * 5) % 97 / 100:.2f}" for i in range(12)]
        lines.append(",".join([f"cg{p:08d}", *values]))
    path.write_text("\n".join(lines) + "\n")
    return path


def _ingest(tmp_path: Path, store: Path, version: int, replace: bool) -> None:
    """The documented procedure: ``mbeacon ingest [--replace]`` publishes the file atomically."""
    source = _switch_csv(tmp_path / f"switch-v{version}.csv", version)
    command = [sys.executable, "-m", "mbeacon.cli", "ingest", str(source), "--store", str(store),
               "--dataset", SWITCH, "--format", "matrix", *(["--replace"] if replace else [])]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


def _true_in(version: int, query: dict) -> bool:
    return query["minValue"] <= VERSIONS[version] <= query["maxValue"]


class SwitchLoad(Load):
    """Clients asking the QUERIES at random (most answers come from the cache after the first)."""

    def _client(self, n: int) -> None:
        rng = random.Random(n)
        while not self._stop.is_set():
            outcome = ask(self.url, self.keys["alice"], rng.choice(QUERIES))
            outcome.done = time.monotonic()
            with self._lock:
                self.outcomes.append(outcome)


def _answers_since(load: Load, since: float, n: int = 40, timeout: float = 120.0) -> None:
    """Let the clients go on until ``n`` answers were sent after ``since`` (time.monotonic())."""
    deadline = time.monotonic() + timeout
    while sum(o.sent >= since and o.status == 200 for o in list(load.outcomes)) < n:
        assert time.monotonic() < deadline, f"fewer than {n} answers in {timeout} s"
        time.sleep(0.2)


def test_dataset_replaced_while_serving(tmp_path):
    """(a) ``mbeacon ingest --replace`` alone: the next requests answer from the new file; (b) the
    same followed by ``kill -HUP``: new workers, and not one request fails across the reload."""
    store = tmp_path / "store"
    _ingest(tmp_path, store, 1, replace=False)
    url = f"sqlite:///{tmp_path}/ledger.sqlite3"
    ledger = Ledger.open(url)
    keys = {"alice": ledger.add_user("alice")}
    ledger.close()
    config = write_config(tmp_path / "switch.toml", {"store": str(store), "database_url": url,
                                                      "rate_limit_per_minute": 0}, {})  # fmt: skip
    with config.open("a") as f:
        f.write(f'[datasets.{SWITCH}]\nmechanism = "none"\nallow_unprotected = true\n')
    load = SwitchLoad("", keys, QuerySupply([], []), clients=6)
    published: dict[int, tuple[float, float]] = {}  # version -> (publishing started, switch complete)
    with FaultServer(config, tmp_path, workers=2) as server:
        load.start(server.url)
        _answers_since(load, 0.0)
        # (a) automatic pickup: publish, no signal
        started = time.monotonic()
        _ingest(tmp_path, store, 2, replace=True)
        published[2] = (started, time.monotonic())
        _answers_since(load, published[2][1])
        # (b) publish, then a graceful reload; complete once no old worker is left
        old_workers = set(server.worker_pids())
        started = time.monotonic()
        _ingest(tmp_path, store, 3, replace=True)
        os.kill(server.process.pid, signal.SIGHUP)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (
            set(pids := server.worker_pids()) & old_workers or len(pids) < 2
        ):  # fmt: skip
            time.sleep(0.1)
        assert not set(server.worker_pids()) & old_workers, "HUP did not replace the workers"
        published[3] = (started, time.monotonic())
        _answers_since(load, published[3][1])
        load.stop()
        log = server.log()
    _no_tracebacks([log])
    outcomes = load.outcomes
    statuses = Counter(o.status for o in outcomes)
    assert set(statuses) == {200}, f"a request failed during a switch: {statuses}"
    # each version's clean window: sent after its switch completed, done before the next one began
    windows = {1: (0.0, published[2][0]), 2: (published[2][1], published[3][0]), 3: (published[3][1], 1e18)}
    seen: dict[int, list] = {}
    for version, (lo, hi) in windows.items():
        seen[version] = [o for o in outcomes if o.sent >= lo and o.done < hi]
        wrong = [o.query for o in seen[version] if o.result["exists"] != _true_in(version, o.query)]
        assert not wrong, f"version {version} was served from another version: {wrong[:5]}"
        assert len(seen[version]) >= 20, f"too few answers from version {version} to show the switch"
        assert any(o.result["info"]["cached"] for o in seen[version]), "the cache was never used"
    ledger = Ledger.open(url)
    try:
        counts = ledger_counts(ledger)
        rows = ledger.db.fetch_one("SELECT COUNT(DISTINCT substr(query_key, 1, 16)) FROM answers")[0]
    finally:
        ledger.close()
    # every version's answers were computed afresh (3 cache generations), never taken from the old one
    assert rows == 3
    assert counts.answers == counts.fresh_audit
    assert counts.answers >= sum(len({query_key(o.query) for o in seen[v]}) for v in seen)
    print(f"\nstore switch: {dict(statuses)} requests; answers from v1, v2 (no signal), v3 (HUP):"
          f" {[len(seen[v]) for v in seen]}; ledger {counts}")  # fmt: skip


# --- 4. The SQLite ledger's file system full or read-only ----------------------------------------


def _mount(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def small_fs(tmp_path):
    """An 8 MiB tmpfs for the ledger; unmounted afterwards."""
    where = tmp_path / "fs"
    where.mkdir()
    result = _mount("-t", "tmpfs", "-o", "size=8m", "tmpfs", str(where))
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    yield where
    _mount("-o", "remount,rw", str(where))
    subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=60)


def _fill(where: Path) -> Path:
    """Write zeros until the file system is full (ENOSPC); the filler file."""
    filler = where / "filler"
    with open(filler, "wb", buffering=0) as f:
        for size in (1 << 20, 1 << 12, 1 << 9, 1):
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * size)
    fs = os.statvfs(where)
    assert fs.f_bfree == 0, "the file system is not full"
    return filler


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mbeacon.cli", *args], capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def _assert_cli_refused(result: subprocess.CompletedProcess, reason: str) -> None:
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("error:") and reason in result.stderr.lower(), result.stderr


def _ledger_with_alice(path: Path) -> tuple[str, dict[str, str]]:
    """A new SQLite ledger at ``path`` with the user alice: its URL and ``{"alice": key}``."""
    url = f"sqlite:///{path}"
    ledger = Ledger.open(url)
    keys = {"alice": ledger.add_user("alice")}
    ledger.close()
    return url, keys


def _budget(url: str, key: str) -> dict:
    response = httpx.get(f"{url}/api/budget", headers={"Authorization": f"Bearer {key}"}, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()["response"]["budgets"][DATASET]


def test_disk_full_ledger_refuses_cleanly_and_recovers(tmp_path, demo, contested, small_fs):
    """Full file system under the ledger: every query refused with 503, nothing spent, reads fine,
    /readyz 503; once space is freed the same server (no restart) answers again."""
    path = small_fs / "ledger.sqlite3"
    url, keys = _ledger_with_alice(path)
    c = 40
    config = _config(tmp_path, demo, url, c=c)
    queries = iter(contested)
    with FaultServer(config, tmp_path, workers=2) as server:
        workers = sorted(server.worker_pids())
        before = [ask(server.url, keys["alice"], next(queries)) for _ in range(10)]
        assert {o.status for o in before} == {200}
        spent = _budget(server.url, keys["alice"])
        filler = _fill(small_fs)
        # new queries, and answers the ledger holds already: each writes at least its audit row
        full = [ask(server.url, keys["alice"], next(queries)) for _ in range(30)]
        full += [ask(server.url, keys["alice"], o.query) for o in before]
        statuses = Counter(o.status for o in full)
        assert set(statuses) <= {200, 503} and statuses[503] >= 35, statuses
        _assert_503_is_clean(full)
        assert _budget(server.url, keys["alice"]) == spent, "budget spent while the disk was full"
        ready = _readyz(server.url)
        assert ready == (503, {"status": "not ready", "checks": {"store": "ok", "ledger": "unavailable"}})
        assert httpx.get(server.url + "/livez", timeout=60).status_code == 200
        _assert_cli_refused(_cli("users", "add", "bob", "--config", str(config)), "full")
        filler.unlink()
        after = [ask(server.url, keys["alice"], next(queries)) for _ in range(10)]
        after += [ask(server.url, keys["alice"], o.query) for o in before]
        assert {o.status for o in after} <= {200, 429}, Counter(o.status for o in after)
        assert all(o.result["info"]["cached"] for o in after[10:]), "a committed answer was lost"
        assert _readyz(server.url)[0] == 200
        assert sorted(server.worker_pids()) == workers, "a worker died or was replaced"
        log = server.log()
    _no_tracebacks([log])
    outcomes = before + full + after
    ledger = Ledger.open(url)
    try:
        counts = check_ledger(ledger, outcomes, ["alice"], c)
    finally:
        ledger.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    print(f"\ndisk full: while full {dict(statuses)}, readyz {ready}, ledger {counts}")


@pytest.fixture
def ext4_fs(tmp_path):
    """A 32 MiB ext4 file system on a loop device, ``errors=remount-ro``: (mount point, image).

    Linux refuses ``mount -o remount,ro`` while a process holds a file open for writing (EBUSY), so a
    serving ledger becomes read-only only as the kernel's emergency remount after a file system error,
    which ``/sys/fs/ext4/<device>/trigger_fs_error`` causes on demand.
    """
    image, where = tmp_path / "ext4.img", tmp_path / "ext4"
    where.mkdir()
    with open(image, "wb") as f:
        f.truncate(32 << 20)
    made = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True, text=True, timeout=120)
    if made.returncode != 0:
        pytest.skip(f"cannot make an ext4 file system: {made.stderr.strip()}")
    mounted = _mount("-o", "loop,errors=remount-ro", str(image), str(where))
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a loop device here: {mounted.stderr.strip()}")
    yield where, image
    subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=60)


def _device(where: Path) -> str:
    found = subprocess.run(["findmnt", "-n", "-o", "SOURCE", str(where)], capture_output=True, text=True)
    return Path(found.stdout.strip()).name


def test_read_only_ledger_refuses_cleanly(tmp_path, demo, contested, ext4_fs):
    """The ledger's file system turns read-only under a serving beacon: queries refused with 503,
    nothing spent, reads fine, /readyz 503, the CLI refuses with one line. The kernel keeps an
    emergency read-only file system so until it is unmounted: recovery is stop, fsck, mount, start,
    and nothing committed is lost. Mounted read-only at start, ``mbeacon serve`` refuses to start."""
    where, image = ext4_fs
    path = where / "ledger.sqlite3"
    url, keys = _ledger_with_alice(path)
    c = 40
    config = _config(tmp_path, demo, url, c=c)
    queries = iter(contested)
    with FaultServer(config, tmp_path, workers=2) as server:
        before = [ask(server.url, keys["alice"], next(queries)) for _ in range(10)]
        assert {o.status for o in before} == {200}
        spent = _budget(server.url, keys["alice"])
        trigger = Path(f"/sys/fs/ext4/{_device(where)}/trigger_fs_error")
        if not trigger.exists():
            pytest.skip(f"{trigger} is missing: cannot make the file system read-only under the server")
        trigger.write_text("mbeacon fault test\n")
        with pytest.raises(OSError, match=r"Read-only file system"):
            (where / "probe").write_text("x")
        ro = [ask(server.url, keys["alice"], next(queries)) for _ in range(30)]
        ro += [ask(server.url, keys["alice"], o.query) for o in before]
        statuses = Counter(o.status for o in ro)
        assert set(statuses) <= {200, 503} and statuses[503] >= 35, statuses
        _assert_503_is_clean(ro)
        assert _budget(server.url, keys["alice"]) == spent, "budget spent on a read-only ledger"
        ready = _readyz(server.url)
        assert ready == (503, {"status": "not ready", "checks": {"store": "ok", "ledger": "unavailable"}})
        _assert_cli_refused(_cli("users", "add", "bob", "--config", str(config)), "read-only")
        log = server.log()
    _no_tracebacks([log])
    # recovery: unmount, repair, mount again; everything committed before the fault is there
    assert subprocess.run(["umount", str(where)], capture_output=True).returncode == 0
    fsck = subprocess.run(["e2fsck", "-f", "-y", str(image)], capture_output=True, text=True, timeout=300)
    assert fsck.returncode in (0, 1), fsck.stdout + fsck.stderr  # 1: errors corrected
    # mounted read-only at start: `mbeacon serve` and the CLI refuse with one clear line
    assert _mount("-o", "loop,ro", str(image), str(where)).returncode == 0
    with pytest.raises(RuntimeError, match=r"error: cannot serve: ledger database .*read-only") as refused:
        FaultServer(config, tmp_path, workers=1).start()
    assert "Traceback" not in str(refused.value)
    _assert_cli_refused(_cli("users", "add", "bob", "--config", str(config)), "read-only")
    assert subprocess.run(["umount", str(where)], capture_output=True).returncode == 0
    assert _mount("-o", "loop", str(image), str(where)).returncode == 0
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    with FaultServer(config, tmp_path, workers=2) as server:
        assert _budget(server.url, keys["alice"]) == spent
        again = [ask(server.url, keys["alice"], o.query) for o in before]
        # Answers that spent a positive were fsynced with their spend and must all be there. Free
        # (prior) answers are synced with the next checkpoint (database.py, ``sqlite_sync``): like a
        # power cut, the kernel's emergency remount may drop them, and they are answered afresh.
        for first, second in zip(before, again, strict=True):
            assert second.status == 200
            if first.result["info"]["answeredFrom"] == "data":
                assert second.result["info"]["cached"], f"a spent positive's answer was lost: {first.query}"
                assert answer_of(second.result) == answer_of(first.result)
        kept = [f for f, o in zip(before, again, strict=True) if o.result["info"]["cached"]]
        lost = len(before) - len(kept)
        again += [ask(server.url, keys["alice"], next(queries)) for _ in range(5)]
        assert {o.status for o in again} <= {200, 429}, Counter(o.status for o in again)
        log = server.log()
    _no_tracebacks([log])
    ledger = Ledger.open(url)
    try:
        counts = check_ledger(ledger, kept + ro + again, ["alice"], c)
    finally:
        ledger.close()
    print(f"\nread-only: while read-only {dict(statuses)}, readyz {ready}; ledger after repair {counts},"
          f" free answers not yet synced and so answered afresh: {lost} of {len(before)}")  # fmt: skip

"""The privacy ledger on SQLite and on PostgreSQL: migrations, keys, accounts, the cache, the audit log.

PostgreSQL tests use ``$MBEACON_TEST_POSTGRES`` (default ``postgresql://postgres@127.0.0.1:5432/test``)
and a fresh schema per test (dropped afterwards); they are skipped, with the reason, if the server
cannot be reached.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mbeacon.beacon import keys
from mbeacon.beacon.budget import Account, AccountParams
from mbeacon.beacon.config import dataset_policy
from mbeacon.beacon.errors import AlreadyExists, InvalidRequest, UnknownTarget
from mbeacon.beacon.ledger import (
    AuditRow,
    CachedAnswer,
    Ledger,
    LedgerUnavailable,
    connect,
    schema,
)
from mbeacon.beacon.ledger import ledger as ledger_module
from mbeacon.beacon.ledger.database import Tx
from mbeacon.beacon.sanitisers import account_params
from mbeacon.privacy.svt2 import SVT2State

PG_URL = os.environ.get("MBEACON_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
PARAMS = account_params(dataset_policy(c=5, epsilon=1.0))
# what a refused write looks like: SQLite trigger errors surface as sqlite3 errors, PostgreSQL ones
# as LedgerUnavailable (the API's 503)
REFUSED = (LedgerUnavailable, sqlite3.DatabaseError)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/ledger.sqlite3"
        return
    psycopg = pytest.importorskip("psycopg")
    try:
        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as error:
        pytest.skip(f"PostgreSQL not reachable at {PG_URL} (set MBEACON_TEST_POSTGRES): {error}")
    name = f"mbeacon_test_{secrets.token_hex(6)}"
    admin.execute(f"CREATE SCHEMA {name}")
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{name}"
    finally:
        admin.execute(f"DROP SCHEMA {name} CASCADE")
        admin.close()


@pytest.fixture
def ledger(database_url: str) -> Iterator[Ledger]:
    opened = Ledger.open(database_url)
    yield opened
    opened.close()


def all_rows(ledger: Ledger) -> str:
    """Every row of every table, as text."""
    with ledger.db.transaction(write=False) as tx:
        if ledger.db.dialect == "sqlite":
            tx.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        else:
            tx.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            )
        tables = [row[0] for row in tx.fetchall()]
        out = []
        for table in tables:
            tx.execute(f"SELECT * FROM {table}")
            out.append(f"{table}: {tx.fetchall()!r}")
    assert "users" in tables and "audit_log" in tables
    return "\n".join(out)


def audit_rows(ledger: Ledger) -> list[tuple]:
    with ledger.db.transaction(write=False) as tx:
        tx.execute("SELECT id, time, event, actor, principal, dataset, detail FROM audit_log ORDER BY id")
        return tx.fetchall()


# --- migrations -------------------------------------------------------------------------------


def test_migrations_apply_once(database_url: str) -> None:
    fresh = Ledger.open(database_url, migrate=False)
    try:
        assert schema.current_version(fresh.db) == 0
        assert schema.upgrade(fresh.db) == [v for v, _, _ in schema.MIGRATIONS]
        assert schema.upgrade(fresh.db) == []
        assert schema.current_version(fresh.db) == schema.LATEST
    finally:
        fresh.close()
    again = Ledger.open(database_url)  # every start-up upgrades: a no-op now
    try:
        with again.db.transaction(write=False) as tx:
            tx.execute("SELECT version FROM schema_version ORDER BY version")
            assert [row[0] for row in tx.fetchall()] == [v for v, _, _ in schema.MIGRATIONS]
        assert schema.current_version(again.db) == schema.LATEST
    finally:
        again.close()


def test_concurrent_start_ups_migrate_once(database_url: str) -> None:
    if database_url.startswith("sqlite:///"):  # in WAL mode already: see the test below for a fresh file
        sqlite3.connect(database_url.removeprefix("sqlite:///")).execute("PRAGMA journal_mode=WAL").close()
    ledgers = [Ledger.open(database_url, migrate=False) for _ in range(4)]
    applied: list[list[int]] = []
    failures: list[BaseException] = []
    barrier = threading.Barrier(len(ledgers))

    def start(ledger: Ledger) -> None:
        try:
            barrier.wait()
            applied.append(schema.upgrade(ledger.db))
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=start, args=(ledger,)) for ledger in ledgers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert not failures, failures
        assert sorted(applied, key=len) == [[]] * 3 + [[v for v, _, _ in schema.MIGRATIONS]]
        assert schema.current_version(ledgers[0].db) == schema.LATEST
    finally:
        for ledger in ledgers:
            ledger.close()


def _sqlite_tables(path: Path) -> dict[str, str]:
    with sqlite3.connect(path) as conn:
        return dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall())


KEPT = {"accounts": "principal, dataset, params, z1, z2, positives, created, updated"}  # all but queries
USERS_V1 = "name, role, tier, group_name, key_id, key_salt, key_hash, created, revoked"  # version 4 adds one


def test_sqlite_version_2_keeps_every_row_of_a_version_1_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ledger written by version 1 comes out of the upgrade with every row (the accounts without
    their counter of answers, now counted from the cache), an audit log that still refuses changes
    and ids that keep growing, in tables of the new layout."""
    path = tmp_path / "ledger.sqlite3"
    with monkeypatch.context() as old:  # this MBeacon as it was at version 1
        old.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:1])
        old.setattr(schema, "LATEST", 1)
        v1 = Ledger.open(f"sqlite:///{path}")
    try:
        with v1.db.transaction() as tx:
            for name in ("alice", "bob"):  # a user row as version 1 wrote it
                tx.execute(
                    "INSERT INTO users (name, role, tier, key_id, key_salt, key_hash, created)"
                    " VALUES (?, 'researcher', 'REGISTERED', ?, '00', '00', '2026-01-01')",
                    (name, name * 2),
                )
            for holder in ("user:alice", "user:bob"):  # an account row as version 1 wrote it
                tx.execute(
                    "INSERT INTO accounts (principal, dataset, params, z1, z2, positives, queries, created,"
                    " updated) VALUES (?, 'demo', ?, 1.5, -2.25, 2, 2, '2026-01-01', '2026-01-02')",
                    (holder, PARAMS.to_storage()),
                )
                v1.store_answers(tx, holder, "demo", [("k1", CachedAnswer(True, "data", None)),
                                                      ("k2", CachedAnswer(False, "prior", 3))])  # fmt: skip
            v1.append_audit(tx, [AuditRow("query", "alice", "user:alice", "demo", '{"q": 1}', "data", False)])
        accounts_before = v1.accounts()
        with v1.db.transaction(write=False) as tx:
            rows_before = {
                table: sorted(tx.execute(f"SELECT {KEPT.get(table, '*')} FROM {table}").fetchall())
                for table in ("users", "accounts", "answers", "audit_log", "budget_overrides")
            }
        assert "AUTOINCREMENT" in _sqlite_tables(path)["audit_log"]
    finally:
        v1.close()
    assert rows_before["answers"] and rows_before["audit_log"]

    ledger = Ledger.open(f"sqlite:///{path}")  # start-up upgrades to the latest version
    try:
        assert schema.current_version(ledger.db) == schema.LATEST
        with ledger.db.transaction(write=False) as tx:
            for table, rows in rows_before.items():
                columns = USERS_V1 if table == "users" else "*"
                assert sorted(tx.execute(f"SELECT {columns} FROM {table}").fetchall()) == rows, table
        assert {user.expires for user in ledger.users()} == {None}  # version 4: no key expires
        assert ledger.accounts_and_answers("user:bob") == [(ledger.account("user:bob", "demo"), 2)]
        assert ledger.accounts() == accounts_before
        tables = _sqlite_tables(path)
        assert tables["accounts"].rstrip().endswith("WITHOUT ROWID")
        assert tables["answers"].rstrip().endswith("WITHOUT ROWID")
        assert "AUTOINCREMENT" not in tables["audit_log"]
        assert not {name for name in tables if name.endswith("_rebuilt")}
        with ledger.db.transaction() as tx:
            assert ledger.cached_answers(tx, "user:bob", "demo", ["k2", "k3"]) == {
                "k2": CachedAnswer(False, "prior", 3)
            }
            ledger.append_audit(tx, [AuditRow("query", "bob", "user:bob", "demo", '{"q": 2}', "prior", True)])
        ids = [row[0] for row in audit_rows(ledger)]
        assert ids == sorted(set(ids)) and ids[-1] > max(row[0] for row in rows_before["audit_log"])
        for statement in ("UPDATE audit_log SET event = 'nothing'", "DELETE FROM audit_log WHERE id = 1"):
            with pytest.raises(REFUSED, match="append-only"), ledger.db.transaction() as tx:
                tx.execute(statement)
        with pytest.raises(REFUSED), ledger.db.transaction() as tx:  # the primary keys still hold
            ledger.store_answers(tx, "user:bob", "demo", [("k1", CachedAnswer(True, "data", None))])
    finally:
        ledger.close()


def test_sqlite_start_up_waits_for_a_concurrent_writer(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another process is writing the new file (e.g. migrating it)
    other.execute("CREATE TABLE elsewhere (x INTEGER)")
    release = threading.Timer(0.3, other.execute, ("COMMIT",))
    release.start()
    try:
        ledger = Ledger.open(f"sqlite:///{path}")  # must wait for the busy timeout (30 s), not fail
        ledger.close()
    finally:
        release.join()
        other.close()


def test_a_newer_schema_is_refused(ledger: Ledger, database_url: str) -> None:
    with ledger.db.transaction() as tx:
        tx.execute(
            "INSERT INTO schema_version (version, description, applied) VALUES (?, ?, ?)",
            (schema.LATEST + 1, "from the future", "2099-01-01"),
        )
    db = connect(database_url)  # what Ledger.open runs at start-up
    try:
        with pytest.raises(RuntimeError, match="newer than this MBeacon"):
            schema.upgrade(db)
    finally:
        db.close()


def test_connect_rejects_unknown_urls() -> None:
    for url in ("mysql://localhost/ledger", "sqlite://", "ledger.sqlite3"):
        with pytest.raises(ValueError, match="database url"):
            connect(url)


# --- users and keys ---------------------------------------------------------------------------


def test_keys_are_stored_only_as_salted_hashes(ledger: Ledger, database_url: str) -> None:
    issued = [ledger.add_user(f"user{i}", tier="REGISTERED") for i in range(3)]
    issued.append(ledger.add_user("ops", role="admin"))
    issued.append(ledger.rotate_key("user0"))
    dump = all_rows(ledger)
    for key in issued:
        key_id, secret = keys.split(key)
        assert key not in dump and secret not in dump
        assert key_id in dump or key == issued[0]  # the key id finds the row (rotated away for user0)
    with ledger.db.transaction(write=False) as tx:
        tx.execute("SELECT key_salt, key_hash FROM users")
        salts, hashes = zip(*tx.fetchall(), strict=True)
    assert len(set(salts)) == len(salts) and len(set(hashes)) == len(hashes)
    if database_url.startswith("sqlite:///"):  # not in the file, its WAL or anything beside it
        folder = Path(database_url.removeprefix("sqlite:///")).parent
        raw = b"".join(p.read_bytes() for p in folder.iterdir() if p.is_file())
        assert raw
        for key in issued:
            assert keys.split(key)[1].encode() not in raw


def test_authenticate(ledger: Ledger) -> None:
    key = ledger.add_user("alice", tier="CONTROLLED", group="lab")
    user = ledger.authenticate(key)
    assert user is not None
    assert (user.name, user.role, user.tier, user.group) == ("alice", "researcher", "CONTROLLED", "lab")
    assert user.revoked is None
    key_id, secret = keys.split(key)
    wrong_secret = f"mbk_{key_id}_{'A' * 43}"
    unknown_id = f"mbk_{'0' * 12}_{secret}"
    for bad in (wrong_secret, unknown_id, key + "x", key[:-1], "", "mbk", key.upper(), f"Bearer {key}"):
        assert ledger.authenticate(bad) is None, bad
    new = ledger.rotate_key("alice")
    assert ledger.authenticate(key) is None
    assert ledger.authenticate(new).name == "alice"
    ledger.revoke_user("alice")
    assert ledger.authenticate(new) is None
    assert ledger.user("alice").revoked is not None
    with pytest.raises(AlreadyExists, match="was revoked"):
        ledger.add_user("alice")  # the name is alice's: it points to rotate
    back = ledger.rotate_key("alice")  # a revoked user comes back with a new key only
    assert ledger.authenticate(new) is None and ledger.authenticate(back).name == "alice"
    with pytest.raises(UnknownTarget):
        ledger.rotate_key("nobody")
    with pytest.raises(UnknownTarget):
        ledger.revoke_user("nobody")
    with pytest.raises(InvalidRequest):
        ledger.add_user("bob", role="superuser")
    events = [row[2] for row in audit_rows(ledger)]
    assert events == ["user_add", "key_rotate", "user_revoke", "user_reinstate"]


# --- budget accounts, cache, audit ------------------------------------------------------------


def _must_not_open() -> AccountParams:
    raise AssertionError("an existing account must not be opened again")


def test_lock_and_save_account_round_trip(ledger: Ledger) -> None:
    with ledger.db.transaction() as tx:
        account = ledger.lock_account(tx, "user:alice", "demo", lambda: PARAMS)
        assert (account.principal, account.dataset, account.params) == ("user:alice", "demo", PARAMS)
        assert account.state.count == 0
        ledger.save_account(tx, account, SVT2State(1.5, -2.25, 2))
    stored = ledger.account("user:alice", "demo")
    assert (stored.state.z1, stored.state.z2, stored.state.count) == (1.5, -2.25, 2)
    assert stored.params == PARAMS and stored.created == account.created
    assert "1.5" not in repr(stored.state) and "2.25" not in repr(stored.state)

    with ledger.db.transaction() as tx:
        again = ledger.lock_account(tx, "user:alice", "demo", _must_not_open)
        assert again.state == stored.state
    assert [(a.principal, a.dataset) for a in ledger.accounts()] == [("user:alice", "demo")]
    assert ledger.accounts("user:bob") == []


def test_the_account_and_its_cached_answers_come_back_together(ledger: Ledger) -> None:
    """The one-statement lookup gives what the account lookup and the cache lookup give one after the
    other: for a new account, for cached and uncached keys, duplicates, and more keys than one lookup
    takes (then the two lookups run)."""
    keys = ["k0", "k1", "k2", "k1"]
    with ledger.db.transaction() as tx:
        account, cached = ledger.lock_account_and_answers(tx, "user:alice", "demo", keys, lambda: PARAMS)
        assert (account.principal, account.params, account.state.count) == ("user:alice", PARAMS, 0)
        assert cached == {}
        ledger.store_answers(tx, "user:alice", "demo", [("k1", CachedAnswer(True, "data", None)),
                                                        ("k9", CachedAnswer(False, "prior", 3))])  # fmt: skip
        ledger.save_account(tx, account, SVT2State(account.state.z1, account.state.z2, 1))
    many = [f"x{i}" for i in range(ledger_module._KEYS_PER_LOOKUP)] + ["k9", "k0"]

    for wanted in (keys, ["k0"], ["k9", "k9"], many):
        with ledger.db.transaction() as tx:
            together = ledger.lock_account_and_answers(tx, "user:alice", "demo", wanted, _must_not_open)
            apart = (
                ledger.lock_account(tx, "user:alice", "demo", _must_not_open),
                ledger.cached_answers(tx, "user:alice", "demo", wanted),
            )
        assert together == apart
        assert together[0].state.count == 1
    assert together[1] == {"k9": CachedAnswer(False, "prior", 3)}


def test_a_free_answer_leaves_the_account_row_alone(ledger: Ledger) -> None:
    """Only a state change writes the account; the answers it gave are counted from its cache rows."""

    def row() -> tuple:
        with ledger.db.transaction(write=False) as tx:
            return tx.execute("SELECT * FROM accounts WHERE principal = 'user:alice'").fetchone()

    with ledger.db.transaction() as tx:
        ledger.lock_account(tx, "user:alice", "demo", lambda: PARAMS)
    opened = row()
    for n, key in enumerate(("k1", "k2"), start=1):
        with ledger.db.transaction() as tx:
            account = ledger.lock_account(tx, "user:alice", "demo", lambda: PARAMS)
            ledger.save_account(tx, account, account.state)  # a free answer: the state is unchanged
            ledger.store_answers(tx, "user:alice", "demo", [(key, CachedAnswer(False, "prior", None))])
            assert not tx.durable
        assert row() == opened
        assert ledger.accounts_and_answers() == [(ledger.account("user:alice", "demo"), n)]
    with ledger.db.transaction() as tx:
        account = ledger.lock_account(tx, "user:alice", "demo", lambda: PARAMS)
        ledger.save_account(tx, account, SVT2State(account.state.z1, account.state.z2, 1))
        ledger.store_answers(tx, "user:alice", "demo", [("k3", CachedAnswer(True, "data", None))])
    assert row() != opened
    assert ledger.accounts_and_answers("user:alice") == [(ledger.account("user:alice", "demo"), 3)]
    assert ledger.accounts_and_answers("user:bob") == []


def test_rows_of_one_transaction_carry_one_time(ledger: Ledger) -> None:
    with ledger.db.transaction() as tx:
        account = ledger.lock_account(tx, "user:alice", "demo", lambda: PARAMS)
        ledger.store_answers(tx, "user:alice", "demo", [("k", CachedAnswer(True, "prior", None))])
        ledger.append_audit(tx, [AuditRow("query", "alice", "user:alice", "demo")])
        spent = SVT2State(account.state.z1, account.state.z2, 1)
        ledger.save_account(tx, account, spent)
    with ledger.db.transaction(write=False) as tx:
        times = {
            tx.execute(f"SELECT {column} FROM {table}").fetchone()[0]
            for table, column in (("accounts", "created"), ("accounts", "updated"), ("answers", "created"),
                                  ("audit_log", "time"))
        }  # fmt: skip
    assert len(times) == 1


def test_account_parameters_parse_to_equal_shared_instances() -> None:
    text = PARAMS.to_storage()
    assert AccountParams.from_storage(text) == PARAMS
    assert AccountParams.from_storage(text) is AccountParams.from_storage(text)  # frozen, so sharing is safe


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_opens_its_own_sqlite_connection(tmp_path: Path) -> None:
    ledger = Ledger.open(f"sqlite:///{tmp_path}/ledger.sqlite3")
    key = ledger.add_user("alice")
    parent = ledger.db._connection()
    pid = os.fork()
    if pid == 0:  # the child: a connection opened before the fork must never be used here
        ok = ledger.db._connection() is not parent and ledger.authenticate(key) is not None
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert ledger.db._connection() is parent and ledger.authenticate(key).name == "alice"
    ledger.close()


def test_a_failed_transaction_leaves_nothing(ledger: Ledger) -> None:
    with pytest.raises(ZeroDivisionError), ledger.db.transaction() as tx:
        account = ledger.lock_account(tx, "user:alice", "demo", lambda: PARAMS)
        ledger.store_answers(tx, "user:alice", "demo", [("k", CachedAnswer(True, "data", None))])
        ledger.append_audit(tx, [AuditRow("query", "alice", "user:alice", "demo")])
        ledger.save_account(tx, account, SVT2State(0.0, 0.0, 1))
        1 / 0  # noqa: B018
    assert ledger.account("user:alice", "demo") is None
    assert audit_rows(ledger) == []


def test_override_sets_the_parameters_of_the_next_account(ledger: Ledger) -> None:
    small = account_params(dataset_policy(c=2, epsilon=0.5))
    assert ledger.set_override("user:alice", "demo", small, actor="admin:ops") is False
    with ledger.db.transaction() as tx:
        assert ledger.lock_account(tx, "user:alice", "demo", lambda: PARAMS).params == small
        assert ledger.lock_account(tx, "user:bob", "demo", lambda: PARAMS).params == PARAMS
    assert ledger.set_override("user:alice", "demo", PARAMS, actor="admin:ops") is True  # open: waits
    assert ledger.account("user:alice", "demo").params == small


def test_reset_removes_account_and_cache_and_is_audited(ledger: Ledger) -> None:
    with ledger.db.transaction() as tx:
        account = ledger.lock_account(tx, "user:alice", "demo", lambda: PARAMS)
        ledger.save_account(tx, account, SVT2State(3.0, -1.0, 5))
        ledger.store_answers(tx, "user:alice", "demo", [("q1", CachedAnswer(True, "data", None)),
                                                        ("q2", CachedAnswer(False, "prior", 3))])  # fmt: skip
        ledger.lock_account(tx, "user:bob", "demo", lambda: PARAMS)
        ledger.store_answers(tx, "user:bob", "demo", [("q1", CachedAnswer(False, "prior", None))])
    with ledger.db.transaction() as tx:
        cached = ledger.cached_answers(tx, "user:alice", "demo", ["q1", "q2", "q3", "q1"])
    assert cached == {"q1": CachedAnswer(True, "data", None), "q2": CachedAnswer(False, "prior", 3)}
    assert ledger.reset_account("user:alice", "demo", actor="admin:ops") is True
    assert ledger.account("user:alice", "demo") is None
    with ledger.db.transaction() as tx:
        assert ledger.cached_answers(tx, "user:alice", "demo", ["q1", "q2"]) == {}
        assert set(ledger.cached_answers(tx, "user:bob", "demo", ["q1"])) == {"q1"}  # others untouched
    assert ledger.account("user:bob", "demo") is not None
    assert ledger.reset_account("user:alice", "demo", actor="admin:ops") is False  # nothing to reset
    resets = [row for row in audit_rows(ledger) if row[2] == "budget_reset"]
    assert [(r[3], r[4], r[5]) for r in resets] == [("admin:ops", "user:alice", "demo")] * 2
    assert '"positivesUsed": 5' in resets[0][6] and '"before": null' in resets[1][6]
    entries = ledger.audit_log(principal="user:alice")
    assert [e["event"] for e in entries] == ["budget_reset", "budget_reset"]  # newest first


def test_audit_log_is_append_only(ledger: Ledger) -> None:
    ledger.add_user("alice")
    with ledger.db.transaction() as tx:
        ledger.append_audit(tx, [AuditRow("query", "alice", "user:alice", "demo", '{"q": 1}', "data", False)])
    before = audit_rows(ledger)
    assert len(before) == 2
    statements = [
        "UPDATE audit_log SET event = 'nothing'",
        "DELETE FROM audit_log",
        "DELETE FROM audit_log WHERE id = 1",
    ]
    if ledger.db.dialect == "postgresql":
        statements.append("TRUNCATE audit_log")
    for statement in statements:
        with pytest.raises(REFUSED, match="append-only"), ledger.db.transaction() as tx:
            tx.execute(statement)
    assert audit_rows(ledger) == before
    assert ledger.audit_log(limit=1)[0]["event"] == "query"


def test_only_new_thresholds_are_synced_under_the_writer_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New secret thresholds (an account opened, a redraw) are durable before any other writer can
    read them; a positive on unchanged thresholds is synced after the lock is released, but before
    its transaction returns (the answer waits for it); a free answer is not synced at all."""
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger.open(f"sqlite:///{path}")
    db = ledger.db
    sync = db._sync_wal
    lock_held_at_sync: list[bool] = []

    def probing_sync() -> None:
        fd = os.open(f"{path}.lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another open file: conflicts if held
            fcntl.flock(fd, fcntl.LOCK_UN)
            lock_held_at_sync.append(False)
        except BlockingIOError:
            lock_held_at_sync.append(True)
        finally:
            os.close(fd)
        sync()

    monkeypatch.setattr(db, "_sync_wal", probing_sync)

    def save(change: Callable[[SVT2State], SVT2State]) -> list[bool]:
        with db.transaction() as tx:
            account = ledger.lock_account(tx, "user:alice", "demo", lambda: PARAMS)
            ledger.save_account(tx, account, change(account.state))
            inside = list(lock_held_at_sync)
        assert lock_held_at_sync[: len(inside)] == inside
        return lock_held_at_sync[len(inside) :]

    try:
        with db.transaction() as tx:  # opens the account: thresholds drawn
            ledger.lock_account(tx, "user:alice", "demo", lambda: PARAMS)
        assert lock_held_at_sync == [True]
        assert save(lambda s: SVT2State(s.z1, s.z2, s.count + 1)) == [False]  # a positive
        assert save(lambda s: s) == []  # a free answer
        assert save(lambda s: SVT2State(s.z1 + 1.0, s.z2, s.count + 1)) == [True]  # redraw
        assert ledger.account("user:alice", "demo").state.count == 2

        def failing_sync() -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(db, "_sync_wal", failing_sync)
        with pytest.raises(LedgerUnavailable, match="sync failed"):
            save(lambda s: SVT2State(s.z1, s.z2, s.count + 1))
        with pytest.raises(LedgerUnavailable, match="sync failed"):
            db.ping()  # not ready until a write succeeds again
    finally:
        ledger.close()


@pytest.mark.parametrize("lookup", ["account", "account and answers"])
def test_concurrent_spending_serialises_on_the_account(database_url: str, lookup: str) -> None:
    """Each thread has its own connection; every increment must survive (no lost update), whichever
    lookup locks the account (PostgreSQL's row lock is taken by the SELECT, in a join only ``OF a``)."""
    ledger = Ledger.open(database_url)
    errors: list[BaseException] = []

    def lock(tx: Tx) -> Account:
        if lookup == "account":
            return ledger.lock_account(tx, "global", "demo", lambda: PARAMS)
        return ledger.lock_account_and_answers(tx, "global", "demo", ["k"], lambda: PARAMS)[0]

    def spend(times: int) -> None:
        try:
            for _ in range(times):
                with ledger.db.transaction() as tx:
                    account = lock(tx)
                    state = account.state
                    ledger.save_account(tx, account, SVT2State(state.z1, state.z2, state.count + 1))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=spend, args=(15,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert not errors, errors
        assert ledger.account("global", "demo").state.count == 60
    finally:
        ledger.close()


def test_a_transaction_that_waited_for_the_account_lock_sees_the_answers_cached_meanwhile(
    ledger: Ledger,
) -> None:
    """Two requests of one budget holder ask one query at once. The second waits for the account
    lock; once it has it, it must see the answer the first cached, or it would answer the query
    afresh (a second positive for one query) and, on PostgreSQL, fail on the cache's primary key
    (the 503 of a load test). PostgreSQL re-reads only the locked row after such a wait, not the
    rows a single statement joined to it, so the cache must be read after the lock is held."""
    with ledger.db.transaction() as tx:  # the account exists, nothing cached yet
        ledger.lock_account_and_answers(tx, "group:lab", "demo", ["k"], lambda: PARAMS)
    first_has_lock = threading.Event()
    seen: list[dict] = []

    def second() -> None:
        first_has_lock.wait()
        with ledger.db.transaction() as tx:
            seen.append(ledger.lock_account_and_answers(tx, "group:lab", "demo", ["k"], _must_not_open)[1])

    waiter = threading.Thread(target=second)
    waiter.start()
    with ledger.db.transaction() as tx:
        ledger.lock_account_and_answers(tx, "group:lab", "demo", ["k"], _must_not_open)
        first_has_lock.set()
        time.sleep(0.5)  # the second transaction is now blocked on the account row
        ledger.store_answers(tx, "group:lab", "demo", [("k", CachedAnswer(True, "data", None))])
    waiter.join(timeout=30)
    assert seen == [{"k": CachedAnswer(True, "data", None)}]


# --- key expiry (schema version 4) ----------------------------------------------------------------


def test_a_key_works_until_it_expires_and_rotation_keeps_or_sets_the_expiry(ledger: Ledger) -> None:
    from datetime import UTC, datetime, timedelta

    from mbeacon.beacon.errors import InvalidRequest

    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    future = (datetime.now(UTC) + timedelta(days=90)).isoformat()
    lasting = ledger.add_user("alice", expires=future, actor="test")
    gone = ledger.add_user("bob", expires=past, actor="test")
    assert ledger.authenticate(lasting).expires == future
    assert ledger.authenticate(gone) is None  # expired: as a revoked key
    assert ledger.user("bob").expires == past  # still a user, with their budget
    with pytest.raises(InvalidRequest, match=r"'bob'.s key expired at .*--expires-in"):
        ledger.rotate_key("bob", actor="test")  # keeping an expiry that has passed would be a dead key
    renewed = ledger.rotate_key("bob", actor="test", expires=future)
    assert ledger.authenticate(renewed).expires == future
    kept = ledger.rotate_key("alice", actor="test")  # the default: the user's expiry
    assert ledger.authenticate(kept).expires == future
    forever = ledger.rotate_key("alice", actor="test", expires=None)
    assert ledger.authenticate(forever).expires is None
    assert "expires=" in ledger.audit_log(limit=None)[-1]["detail"]

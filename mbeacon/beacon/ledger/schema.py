"""The ledger's schema, as numbered migrations applied in order and recorded in ``schema_version``.

A migration is never edited once released; a change is a new migration. ``upgrade`` runs at every
start-up (and as ``mbeacon db upgrade``) under a write lock (SQLite ``BEGIN IMMEDIATE``, a
PostgreSQL advisory lock), so workers and hosts starting together apply each migration once.

Tables:

* ``users``: API keys as salted SHA-256 hashes (keys are 256-bit random secrets, so a slow hash buys
  nothing), role (researcher or admin), tier, group.
* ``accounts``: the SVT² state per budget holder and dataset, with the public parameters frozen when
  the account was opened (see docs/service.md, "Changing a dataset's parameters"). ``z1``/``z2``
  are the secret noisy threshold offsets.
* ``answers``: the answer cache (identical query, identical answer, no cost).
* ``budget_overrides``: operator-set parameters for one budget holder and dataset.
* ``audit_log``: append-only (triggers refuse UPDATE and DELETE) record of queries and operator
  actions; never thresholds, keys or raw counts.

Version 2 drops the accounts' ``queries`` counter (an account's answers are counted from its cache
rows) and changes how SQLite stores three tables (see ``_SQLITE_V2``).

Version 3 adds ``pmw_updates``: the histogram updates of ``online-pmw`` accounts, one row per spent
positive (``seq`` = 0, 1, ... in the order they were released), each the range ``[lo, hi]`` of one
probe and ``value``, the synthetic mass that range was moved to (the released noisy count over N,
clipped into (0, 1)). Written in the transaction that spends the positive, under the account's row
lock; deleted with the account by a reset. Not secret in the differential-privacy sense (a function
of released values), but never shown: only the answers computed from them are.

Version 4 adds ``users.expires``: when the user's key stops working (an ISO time, UTC; NULL: never).
"""

from __future__ import annotations

from datetime import UTC, datetime

from mbeacon.beacon.ledger.database import Database

_COMMON_V1 = [
    """CREATE TABLE users (
        name TEXT PRIMARY KEY,
        role TEXT NOT NULL,
        tier TEXT NOT NULL,
        group_name TEXT,
        key_id TEXT NOT NULL UNIQUE,
        key_salt TEXT NOT NULL,
        key_hash TEXT NOT NULL,
        created TEXT NOT NULL,
        revoked TEXT
    )""",
    """CREATE TABLE accounts (
        principal TEXT NOT NULL,
        dataset TEXT NOT NULL,
        params TEXT NOT NULL,
        z1 DOUBLE PRECISION NOT NULL,
        z2 DOUBLE PRECISION NOT NULL,
        positives INTEGER NOT NULL,
        queries INTEGER NOT NULL,
        created TEXT NOT NULL,
        updated TEXT NOT NULL,
        PRIMARY KEY (principal, dataset)
    )""",
    """CREATE TABLE answers (
        principal TEXT NOT NULL,
        dataset TEXT NOT NULL,
        query_key TEXT NOT NULL,
        answer_exists INTEGER NOT NULL,
        answered_from TEXT NOT NULL,
        count_value INTEGER,
        created TEXT NOT NULL,
        PRIMARY KEY (principal, dataset, query_key)
    )""",
    """CREATE TABLE budget_overrides (
        principal TEXT NOT NULL,
        dataset TEXT NOT NULL,
        params TEXT NOT NULL,
        set_by TEXT NOT NULL,
        time TEXT NOT NULL,
        PRIMARY KEY (principal, dataset)
    )""",
]

_AUDIT_COLUMNS = """
        time TEXT NOT NULL,
        event TEXT NOT NULL,
        actor TEXT,
        principal TEXT,
        dataset TEXT,
        query TEXT,
        answered_from TEXT,
        cached INTEGER,
        detail TEXT
"""

_SQLITE_V1 = [
    *_COMMON_V1,
    f"CREATE TABLE audit_log (id INTEGER PRIMARY KEY AUTOINCREMENT, {_AUDIT_COLUMNS})",
    """CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
       BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END""",
    """CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
       BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END""",
]

_POSTGRES_V1 = [
    *_COMMON_V1,
    f"CREATE TABLE audit_log (id BIGSERIAL PRIMARY KEY, {_AUDIT_COLUMNS})",
    """CREATE FUNCTION mbeacon_audit_append_only() RETURNS trigger AS $$
       BEGIN RAISE EXCEPTION 'audit_log is append-only'; END $$ LANGUAGE plpgsql""",
    """CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
       FOR EACH ROW EXECUTE FUNCTION mbeacon_audit_append_only()""",
    """CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
       FOR EACH STATEMENT EXECUTE FUNCTION mbeacon_audit_append_only()""",
]


def _sqlite_rebuild(table: str, create: str, columns: str) -> list[str]:
    """Statements that rebuild ``table`` as ``create`` (a CREATE TABLE of ``<table>_rebuilt``),
    keeping every row. Dropping a table drops its triggers before its rows, so none fires."""
    return [
        create,
        f"INSERT INTO {table}_rebuilt ({columns}) SELECT {columns} FROM {table}",
        f"DROP TABLE {table}",
        f"ALTER TABLE {table}_rebuilt RENAME TO {table}",
    ]


_AUDIT_APPEND_ONLY = _SQLITE_V1[-2:]  # the two triggers, dropped with the old table
# Version 2 drops ``accounts.queries``: a free answer no longer writes the account's row (a page of
# the log per request); the number of answers an account gave is that of its cache rows.
_ACCOUNTS_V2 = _COMMON_V1[1].replace("        queries INTEGER NOT NULL,\n", "")

# Version 2 (SQLite): every request writes a cached answer and an audit row (and the account, when
# it spends a positive), and each B-tree a commit touches is a page more to write to the log (and,
# after another worker's commit has emptied SQLite's page cache, to read back). The account and the
# answer cache become WITHOUT ROWID tables (the row lives in its primary key's B-tree instead of a
# table plus an index); the audit log drops AUTOINCREMENT, which kept a counter row in
# ``sqlite_sequence`` up to date on every insert. AUTOINCREMENT only differs from the plain rowid in
# never reusing the id of a deleted last row, and the triggers forbid deleting audit rows: ids still
# only grow.
_SQLITE_V2 = [
    *_sqlite_rebuild(
        "accounts",
        _ACCOUNTS_V2.replace("CREATE TABLE accounts", "CREATE TABLE accounts_rebuilt") + " WITHOUT ROWID",
        "principal, dataset, params, z1, z2, positives, created, updated",
    ),
    *_sqlite_rebuild(
        "answers",
        _COMMON_V1[2].replace("CREATE TABLE answers", "CREATE TABLE answers_rebuilt") + " WITHOUT ROWID",
        "principal, dataset, query_key, answer_exists, answered_from, count_value, created",
    ),
    *_sqlite_rebuild(
        "audit_log",
        f"CREATE TABLE audit_log_rebuilt (id INTEGER PRIMARY KEY, {_AUDIT_COLUMNS})",
        "id, time, event, actor, principal, dataset, query, answered_from, cached, detail",
    ),
    *_AUDIT_APPEND_ONLY,
]

_PMW_UPDATES = """CREATE TABLE pmw_updates (
        principal TEXT NOT NULL,
        dataset TEXT NOT NULL,
        seq INTEGER NOT NULL,
        probe TEXT NOT NULL,
        lo DOUBLE PRECISION NOT NULL,
        hi DOUBLE PRECISION NOT NULL,
        value DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (principal, dataset, seq)
    )"""
_PMW_UPDATES_BY_PROBE = "CREATE INDEX pmw_updates_by_probe ON pmw_updates (principal, dataset, probe, seq)"

# (version, description, {dialect: statements})
MIGRATIONS: list[tuple[int, str, dict[str, list[str]]]] = [
    (1, "users, accounts, answer cache, overrides, append-only audit log",
     {"sqlite": _SQLITE_V1, "postgresql": _POSTGRES_V1}),
    (2, "accounts without a queries counter (counted from the cache); SQLite: accounts and answer cache "
        "WITHOUT ROWID, audit log without AUTOINCREMENT (fewer pages written per request)",
     {"sqlite": _SQLITE_V2, "postgresql": ["ALTER TABLE accounts DROP COLUMN queries"]}),
    (3, "online-pmw histogram updates, one row per spent positive",
     {"sqlite": [_PMW_UPDATES + " WITHOUT ROWID", _PMW_UPDATES_BY_PROBE],
      "postgresql": [_PMW_UPDATES, _PMW_UPDATES_BY_PROBE]}),
    (4, "users.expires: when a key stops working (NULL: never)",
     {"sqlite": ["ALTER TABLE users ADD COLUMN expires TEXT"],
      "postgresql": ["ALTER TABLE users ADD COLUMN expires TEXT"]}),
]  # fmt: skip

LATEST = MIGRATIONS[-1][0]
_ADVISORY_LOCK = 0x4D42_4541  # "MBEA"


def current_version(db: Database) -> int:
    with db.transaction(write=False) as tx:
        if db.dialect == "sqlite":
            tx.execute("SELECT name FROM sqlite_master WHERE type='table' AND name='schema_version'")
        else:
            tx.execute("SELECT to_regclass('schema_version')::text")
        row = tx.fetchone()
        if not row or row[0] is None:
            return 0
        tx.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version")
        return int(tx.fetchone()[0])


def upgrade(db: Database) -> list[int]:
    """Apply every migration the database lacks; return the versions applied (empty if current)."""
    if current_version(db) == LATEST:
        return []
    applied: list[int] = []
    with db.transaction(write=True) as tx:
        if db.dialect == "postgresql":
            tx.execute("SELECT pg_advisory_xact_lock(?)", (_ADVISORY_LOCK,))
        tx.execute(
            "CREATE TABLE IF NOT EXISTS schema_version "
            "(version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied TEXT NOT NULL)"
        )
        tx.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version")
        have = int(tx.fetchone()[0])
        if have > LATEST:
            raise RuntimeError(
                f"ledger schema version {have} is newer than this MBeacon ({LATEST}); upgrade MBeacon"
            )
        for version, description, statements in MIGRATIONS:
            if version <= have:
                continue
            for statement in statements[db.dialect]:
                tx.execute(statement)
            tx.execute(
                "INSERT INTO schema_version (version, description, applied) VALUES (?, ?, ?)",
                (version, description, datetime.now(UTC).isoformat()),
            )
            applied.append(version)
    return applied

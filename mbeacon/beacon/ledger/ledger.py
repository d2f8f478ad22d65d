"""The privacy ledger: users and keys, budget accounts with their SVT² state, the answer cache and the
append-only audit log, over SQLite or PostgreSQL (:mod:`.database`).

Every method that changes budget state takes the open transaction ``tx`` of the caller, so that the
account lock, the state change, the cached answers and the audit rows of one request commit
together, before the answer leaves the process.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from mbeacon.beacon import keys
from mbeacon.beacon.budget import Account, AccountParams
from mbeacon.beacon.errors import AlreadyExists, InvalidRequest, UnknownTarget
from mbeacon.beacon.holders import OIDC_PREFIX
from mbeacon.beacon.ledger import schema
from mbeacon.beacon.ledger.database import Database, Tx, connect
from mbeacon.beacon.sanitisers import sanitiser_of
from mbeacon.beacon.sanitisers.online_pmw_state import PMWUpdate
from mbeacon.privacy.svt2 import SVT2State

ROLES = ("researcher", "admin")


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def stamp(tx: Tx) -> str:
    """The time of the transaction ``tx``: taken once, so every row it writes carries the same time."""
    if tx.stamp is None:
        tx.stamp = now()
    return tx.stamp


@dataclass(frozen=True)
class User:
    name: str
    role: str
    tier: str
    group: str | None
    created: str
    revoked: str | None
    expires: str | None = None

    def to_json(self) -> dict:
        """The user as the admin API and ``mbeacon users list --json`` show it (never the key)."""
        return {
            "name": self.name,
            "role": self.role,
            "tier": self.tier,
            "group": self.group,
            "created": self.created,
            "revoked": self.revoked,
            "expires": self.expires,
        }


@dataclass(frozen=True)
class CachedAnswer:
    exists: bool
    answered_from: str
    count: int | None


@dataclass(frozen=True)
class AuditRow:
    event: str
    actor: str | None
    principal: str | None = None
    dataset: str | None = None
    query: str | None = None
    answered_from: str | None = None
    cached: bool | None = None
    detail: str | None = None


_USER_COLUMNS = "name, role, tier, group_name, created, revoked, expires"
#: ``rotate_key``'s default: the new key keeps the user's expiry.
KEEP = "keep"
_ACCOUNT_COLUMNS = "principal, dataset, params, z1, z2, positives, created"
_ACCOUNT_COLUMNS_OF_A = ", ".join(f"a.{c}" for c in _ACCOUNT_COLUMNS.split(", "))  # table alias a
_KEYS_PER_LOOKUP = 500  # query keys per cache lookup statement (bound parameters stay well under limits)


def _account(row: tuple) -> Account:
    principal, dataset, params, z1, z2, positives, created = row
    return Account(
        principal, dataset, AccountParams.from_storage(params), SVT2State(z1, z2, positives), created
    )


class Ledger:
    """High-level ledger operations; one instance per process is enough (connections are per pid)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @classmethod
    def open(cls, url: str, *, migrate: bool = True, sqlite_sync: str = "state") -> Ledger:
        ledger = cls(connect(url, sqlite_sync=sqlite_sync))
        if migrate:
            try:
                ledger.migrate()
            except BaseException:
                ledger.close()
                raise
        return ledger

    def migrate(self) -> list[int]:
        """Create the tables, or apply the migrations the ledger lacks; the versions applied."""
        return schema.upgrade(self.db)

    def close(self) -> None:
        self.db.close()

    # --- users and keys ------------------------------------------------------------------------

    def add_user(
        self, name: str, *, tier: str = "REGISTERED", role: str = "researcher", group: str | None = None,
        actor: str = "operator", expires: str | None = None,
    ) -> str:  # fmt: skip
        """Create a user and return their key (the only time it exists in clear), working until
        ``expires`` (an ISO time, UTC; None: until rotated or revoked). A name taken, by
        an active or a revoked user, is refused: a revoked user comes back with :meth:`rotate_key`."""
        if role not in ROLES:
            raise InvalidRequest(f"role must be one of {', '.join(ROLES)}")
        if name.startswith(OIDC_PREFIX):
            raise InvalidRequest(
                f"user names starting with {OIDC_PREFIX!r} are kept for researchers signed in with tokens"
            )
        new = keys.mint()
        with self.db.transaction() as tx:
            tx.execute("SELECT revoked FROM users WHERE name = ?", (name,))
            row = tx.fetchone()
            if row is not None and row[0] is not None:
                raise AlreadyExists(
                    f"user {name!r} was revoked: `mbeacon users rotate {name}` gives them a new key and "
                    "their access back, with the budget they had (a new name would be a new budget holder)"
                )
            if row is not None:
                raise AlreadyExists(
                    f"user {name!r} exists: `mbeacon users rotate {name}` gives them a new key, "
                    "or choose another name"
                )
            tx.execute(
                "INSERT INTO users (name, role, tier, group_name, key_id, key_salt, key_hash, created,"
                " expires)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (name, role, tier, group, new.key_id, new.salt, new.digest, now(), expires),
            )
            detail = f"{name} role={role} tier={tier}" + (f" expires={expires}" if expires else "")
            self.append_audit(tx, [AuditRow("user_add", actor, f"user:{name}", detail=detail)])
        return new.key

    def rotate_key(self, name: str, *, actor: str = "operator", expires: str | None = KEEP) -> str:
        """Give a user a new key; the old key stops working at once. The new key works until
        ``expires`` (None: no expiry; :data:`KEEP`: the user's expiry, refused once it has passed).
        A revoked user is reinstated (audited as ``user_reinstate``): the one way back for a name,
        keeping its budget."""
        new = keys.mint()
        with self.db.transaction() as tx:
            tx.execute("SELECT revoked, expires FROM users WHERE name = ?", (name,))
            row = tx.fetchone()
            if row is None:
                raise UnknownTarget(f"no user {name!r} (create one with `mbeacon users add {name}`)")
            if expires == KEEP:
                expires = row[1]
                if keys.expired(expires):
                    raise InvalidRequest(
                        f"{name!r}'s key expired at {expires}: give the new key an expiry "
                        "(--expires DATE or --expires-in 90d) or none (--no-expiry)"
                    )
            tx.execute(
                "UPDATE users SET key_id = ?, key_salt = ?, key_hash = ?, revoked = NULL, expires = ?"
                " WHERE name = ?",
                (new.key_id, new.salt, new.digest, expires, name),
            )
            event = "key_rotate" if row[0] is None else "user_reinstate"
            detail = name + (f" expires={expires}" if expires else "")
            self.append_audit(tx, [AuditRow(event, actor, f"user:{name}", detail=detail)])
        return new.key

    def revoke_user(self, name: str, *, actor: str = "operator") -> None:
        with self.db.transaction() as tx:
            tx.execute("SELECT revoked FROM users WHERE name = ?", (name,))
            row = tx.fetchone()
            if row is None:
                raise UnknownTarget(f"no user {name!r}")
            if row[0] is None:
                tx.execute("UPDATE users SET revoked = ? WHERE name = ?", (now(), name))
                self.append_audit(tx, [AuditRow("user_revoke", actor, f"user:{name}", detail=name)])

    def users(self) -> list[User]:
        with self.db.transaction(write=False) as tx:
            tx.execute(f"SELECT {_USER_COLUMNS} FROM users ORDER BY name")
            return [User(*row) for row in tx.fetchall()]

    def user(self, name: str) -> User | None:
        with self.db.transaction(write=False) as tx:
            tx.execute(f"SELECT {_USER_COLUMNS} FROM users WHERE name = ?", (name,))
            row = tx.fetchone()
        return User(*row) if row else None

    def authenticate(self, key: str) -> User | None:
        """The active user holding ``key``, or None (same work whether or not the key id exists)."""
        parts = keys.split(key)
        if parts is None:
            keys.verify(key[:43], None, None)
            return None
        key_id, secret = parts
        row = self.db.fetch_one(
            f"SELECT {_USER_COLUMNS}, key_salt, key_hash FROM users WHERE key_id = ?", (key_id,)
        )
        if row is None:
            keys.verify(secret, None, None)
            return None
        if not keys.verify(secret, row[7], row[8]) or row[5] is not None or keys.expired(row[6]):
            return None
        return User(*row[:7])

    # --- budget accounts -----------------------------------------------------------------------

    def _read_account(self, tx: Tx, principal: str, dataset: str, lock: bool) -> Account | None:
        tx.execute(
            f"SELECT {_ACCOUNT_COLUMNS} FROM accounts"
            " WHERE principal = ? AND dataset = ?" + (self.db.lock_clause() if lock else ""),
            (principal, dataset),
        )
        row = tx.fetchone()
        return None if row is None else _account(row)

    def lock_account(
        self, tx: Tx, principal: str, dataset: str, params_for_new: Callable[[], AccountParams]
    ) -> Account:
        """The account, locked until ``tx`` ends; opened (fresh secret thresholds) if absent."""
        account = self._read_account(tx, principal, dataset, lock=True)
        if account is not None:
            return account
        params = self.override(tx, principal, dataset) or params_for_new()
        return self._open_account(tx, principal, dataset, params)

    def lock_account_and_answers(
        self, tx: Tx, principal: str, dataset: str, query_keys: Sequence[str],
        params_for_new: Callable[[], AccountParams],
    ) -> tuple[Account, dict[str, CachedAnswer]]:  # fmt: skip
        """:meth:`lock_account` and :meth:`cached_answers` of ``query_keys``. The account row is locked;
        its cached answers need no lock of their own, since only a transaction holding the account's
        lock writes them, but they must be read *after* the lock is held.

        On SQLite the writer lock is taken before the transaction reads anything, so one statement
        does both when the account exists and the keys fit one lookup (every single query but an
        account's first). On PostgreSQL a ``SELECT ... FOR UPDATE`` that waited for another
        transaction re-reads only the locked row, not the rows the statement joined to it: a joined
        cache lookup would miss the answers the other transaction stored, and the query would be
        answered afresh. There the cache is read by a second statement, under the lock."""
        unique = list(dict.fromkeys(query_keys))
        if self.db.dialect == "sqlite" and 0 < len(unique) <= _KEYS_PER_LOOKUP:
            tx.execute(
                f"SELECT {_ACCOUNT_COLUMNS_OF_A}, c.query_key, c.answer_exists, c.answered_from,"
                " c.count_value FROM accounts a LEFT JOIN answers c ON c.principal = a.principal"
                f" AND c.dataset = a.dataset AND c.query_key IN ({', '.join('?' * len(unique))})"
                " WHERE a.principal = ? AND a.dataset = ?" + self.db.lock_clause("a"),
                (*unique, principal, dataset),
            )
            rows = tx.fetchall()
            if rows:  # one row per cached key, or one row of NULLs beside the account
                found = {key: CachedAnswer(bool(exists), source, count)
                         for *_, key, exists, source, count in rows if key is not None}  # fmt: skip
                return _account(rows[0][:7]), found
        account = self.lock_account(tx, principal, dataset, params_for_new)
        return account, self.cached_answers(tx, principal, dataset, unique)

    def params_for_new(
        self, principal: str, dataset: str, default: Callable[[], AccountParams]
    ) -> AccountParams:
        """The parameters an account would be opened with now: an operator override, else ``default``."""
        with self.db.transaction(write=False) as tx:
            return self.override(tx, principal, dataset) or default()

    def _open_account(self, tx: Tx, principal: str, dataset: str, params: AccountParams) -> Account:
        state = sanitiser_of(params.mechanism).start_state(params)
        at = stamp(tx)
        tx.durable = tx.new_secrets = True  # secret thresholds are drawn: they must survive once used
        tx.execute(
            "INSERT INTO accounts (principal, dataset, params, z1, z2, positives, created, updated)"
            " VALUES (?, ?, ?, ?, ?, 0, ?, ?) ON CONFLICT (principal, dataset) DO NOTHING",
            (principal, dataset, params.to_storage(), state.z1, state.z2, at, at),
        )
        account = self._read_account(tx, principal, dataset, lock=True)
        assert account is not None
        return account

    def save_account(self, tx: Tx, account: Account, state: SVT2State) -> None:
        """Store the account's new SVT² state (a positive spent; with redraw, new thresholds too).

        Free answers leave the state as it was and the account row untouched: their number is that
        of the account's cached answers (:meth:`accounts_and_answers`), so the row need not count them.
        """
        if state == account.state:
            return
        tx.durable = True  # a positive spent
        if (state.z1, state.z2) != (account.state.z1, account.state.z2):
            tx.new_secrets = True  # redraw: new thresholds
        tx.execute(
            "UPDATE accounts SET z1 = ?, z2 = ?, positives = ?, updated = ?"
            " WHERE principal = ? AND dataset = ?",
            (state.z1, state.z2, state.count, stamp(tx), account.principal, account.dataset),
        )

    def pmw_updates(
        self, tx: Tx, principal: str, dataset: str, probes: Iterable[str]
    ) -> dict[str, list[PMWUpdate]]:
        """The ``online-pmw`` histogram updates of ``probes`` on this account, each probe's in the order
        they were released. Read under the account's lock: only a transaction holding it writes them."""
        wanted = list(dict.fromkeys(probes))
        found: dict[str, list[PMWUpdate]] = {p: [] for p in wanted}
        for start in range(0, len(wanted), _KEYS_PER_LOOKUP):
            chunk = wanted[start : start + _KEYS_PER_LOOKUP]
            tx.execute(
                "SELECT probe, lo, hi, value FROM pmw_updates WHERE principal = ? AND dataset = ?"
                f" AND probe IN ({', '.join('?' * len(chunk))}) ORDER BY seq",
                (principal, dataset, *chunk),
            )
            for probe, lo, hi, value in tx.fetchall():
                found[probe].append(PMWUpdate(probe, lo, hi, value))
        return found

    def store_pmw_updates(self, tx: Tx, account: Account, updates: Sequence[PMWUpdate]) -> None:
        """Record the updates of the positives this transaction spent: the first is number
        ``account.state.count`` (the positives spent before), so ``seq`` counts the account's positives
        and a second writer of the same positive fails on the primary key instead of overspending."""
        first = account.state.count
        tx.executemany(
            "INSERT INTO pmw_updates (principal, dataset, seq, probe, lo, hi, value)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(account.principal, account.dataset, first + k, u.probe, u.lo, u.hi, u.value)
             for k, u in enumerate(updates)],
        )  # fmt: skip

    def account(self, principal: str, dataset: str) -> Account | None:
        with self.db.transaction(write=False) as tx:
            return self._read_account(tx, principal, dataset, lock=False)

    def accounts(self, principal: str | None = None) -> list[Account]:
        """Every budget account (of one holder), ordered by holder and dataset."""
        return [account for account, _ in self.accounts_and_answers(principal)]

    def accounts_and_answers(self, principal: str | None = None) -> list[tuple[Account, int]]:
        """:meth:`accounts`, each with the number of answers it has given (cached repeats excluded).

        Every answer that is not refused is cached in the transaction that gives it, and a reset
        deletes an account's cache rows with it: the count is that of the account's cache rows
        (read through the cache's primary key), so no counter is written for free answers.
        """
        sql = (
            f"SELECT {_ACCOUNT_COLUMNS_OF_A}, (SELECT COUNT(*) FROM answers c"
            " WHERE c.principal = a.principal AND c.dataset = a.dataset) FROM accounts a"
        )
        params: tuple = ()
        if principal is not None:
            sql += " WHERE a.principal = ?"
            params = (principal,)
        with self.db.transaction(write=False) as tx:
            tx.execute(sql + " ORDER BY a.principal, a.dataset", params)
            return [(_account(row[:-1]), row[-1]) for row in tx.fetchall()]

    def reset_account(self, principal: str, dataset: str, *, actor: str) -> bool:
        """Delete the account, its cached answers and its ``online-pmw`` updates (a fresh budget and
        the bare prior on next use); audited."""
        with self.db.transaction() as tx:
            account = self._read_account(tx, principal, dataset, lock=True)
            tx.execute("DELETE FROM answers WHERE principal = ? AND dataset = ?", (principal, dataset))
            tx.execute("DELETE FROM pmw_updates WHERE principal = ? AND dataset = ?", (principal, dataset))
            tx.execute("DELETE FROM accounts WHERE principal = ? AND dataset = ?", (principal, dataset))
            spent = account.budget() if account else None
            self.append_audit(
                tx,
                [AuditRow("budget_reset", actor, principal, dataset, detail=json.dumps({"before": spent}))],
            )
        return account is not None

    # --- operator overrides --------------------------------------------------------------------

    def override(self, tx: Tx, principal: str, dataset: str) -> AccountParams | None:
        tx.execute(
            "SELECT params FROM budget_overrides WHERE principal = ? AND dataset = ?", (principal, dataset)
        )
        row = tx.fetchone()
        return AccountParams.from_storage(row[0]) if row else None

    def set_override(self, principal: str, dataset: str, params: AccountParams, *, actor: str) -> bool:
        """Parameters for this holder's next account on ``dataset``; True if an account is open now."""
        with self.db.transaction() as tx:
            tx.execute(
                "DELETE FROM budget_overrides WHERE principal = ? AND dataset = ?", (principal, dataset)
            )
            tx.execute(
                "INSERT INTO budget_overrides (principal, dataset, params, set_by, time)"
                " VALUES (?, ?, ?, ?, ?)",
                (principal, dataset, params.to_storage(), actor, now()),
            )
            self.append_audit(
                tx, [AuditRow("budget_set", actor, principal, dataset, detail=params.to_storage())]
            )
            return self._read_account(tx, principal, dataset, lock=False) is not None

    # --- answer cache and audit log ------------------------------------------------------------

    def cached_answers(
        self, tx: Tx, principal: str, dataset: str, query_keys: Sequence[str]
    ) -> dict[str, CachedAnswer]:
        found: dict[str, CachedAnswer] = {}
        unique = list(dict.fromkeys(query_keys))
        for start in range(0, len(unique), _KEYS_PER_LOOKUP):
            chunk = unique[start : start + _KEYS_PER_LOOKUP]
            marks = ", ".join("?" * len(chunk))
            tx.execute(
                "SELECT query_key, answer_exists, answered_from, count_value FROM answers"
                f" WHERE principal = ? AND dataset = ? AND query_key IN ({marks})",
                (principal, dataset, *chunk),
            )
            for key, exists, source, count in tx.fetchall():
                found[key] = CachedAnswer(bool(exists), source, count)
        return found

    def store_answers(
        self, tx: Tx, principal: str, dataset: str, answers: Iterable[tuple[str, CachedAnswer]]
    ) -> None:
        at = stamp(tx)
        tx.executemany(
            "INSERT INTO answers (principal, dataset, query_key, answer_exists, answered_from, count_value,"
            " created) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(principal, dataset, k, int(a.exists), a.answered_from, a.count, at) for k, a in answers],
        )

    def append_audit(self, tx: Tx, rows: Sequence[AuditRow]) -> None:
        at = stamp(tx)
        tx.executemany(
            "INSERT INTO audit_log (time, event, actor, principal, dataset, query, answered_from, cached,"
            " detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (at, r.event, r.actor, r.principal, r.dataset, r.query, r.answered_from,
                 None if r.cached is None else int(r.cached), r.detail)
                for r in rows
            ],
        )  # fmt: skip

    def audit_log(
        self, *, limit: int | None = 100, principal: str | None = None, since: str | None = None,
        actor: str | None = None, events: Sequence[str] = (), dataset: str | None = None,
        before_id: int | None = None,
    ) -> list[dict]:  # fmt: skip
        """Audit entries, newest first: at most ``limit`` (None: all), of one holder (``principal``),
        at or after ``since`` (an ISO time in the log's own form, UTC), by ``actor``, of the ``events``
        named, on ``dataset``, older than entry ``before_id`` (to page through a long log)."""
        sql = (
            "SELECT id, time, event, actor, principal, dataset, query, answered_from, cached, detail"
            " FROM audit_log"
        )
        where: list[str] = []
        params: list = []
        for column, value in (("principal", principal), ("actor", actor), ("dataset", dataset)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if since is not None:
            where.append("time >= ?")
            params.append(since)
        if before_id is not None:
            where.append("id < ?")
            params.append(before_id)
        if events:
            where.append(f"event IN ({', '.join('?' * len(events))})")
            params.extend(events)
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        with self.db.transaction(write=False) as tx:
            tx.execute(sql, tuple(params))
            names = ("id", "time", "event", "actor", "principal", "dataset", "query", "answeredFrom",
                     "cached", "detail")  # fmt: skip
            entries = [dict(zip(names, row, strict=True)) for row in tx.fetchall()]
        for entry in entries:
            entry["cached"] = None if entry["cached"] is None else bool(entry["cached"])
        return entries

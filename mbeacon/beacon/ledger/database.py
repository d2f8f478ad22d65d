"""Connections to the ledger database, SQLite or PostgreSQL, opened per process (after fork).

Both backends expose the same small surface: ``transaction()`` yields a :class:`Tx` whose
``execute``/``executemany`` take ``?`` placeholders, ``fetch_one`` runs one read-only statement,
atomic on its own, without the two extra round trips of an explicit transaction (the key check of
every request), and ``lock_clause()`` says how to lock a budget account row. Choices, and why:

* **SQLite** (default, one host): WAL journal so readers never block the writer, ``BEGIN IMMEDIATE``
  so two workers cannot both read an account and then both write it. Writers queue on an advisory
  file lock (``flock`` on ``<ledger>.lock``) before ``BEGIN IMMEDIATE``: the kernel wakes the next
  writer the moment the lock is free, whereas SQLite's busy handler polls with sleeps that show up
  as spikes in the tail latency under load. The kernel drops the lock of a
  killed process. The busy timeout stays as the fallback for writers that do not take the file
  lock (``sqlite3`` on the command line). One connection per thread and process. Durability: every
  commit survives a crash of the process (SIGKILL included). A transaction that changes budget
  state (opens an account, i.e. draws its secret thresholds, or spends a positive) sets
  ``tx.durable`` and the write-ahead log is fsynced before the answer is released, so it also
  survives power loss. Other commits (cached answers and audit rows of free, prior-agreeing
  answers) are synced with the next fsync of the log, a budget-changing commit's or the next
  checkpoint's (``synchronous = NORMAL``, at most ``CHECKPOINT_PAGES`` pages): losing them in a power
  failure costs no privacy, since SVT² pays for any number of such answers with the same threshold
  pair and a lost cache entry only means the query is answered afresh. ``sqlite_sync = "full"``
  syncs every commit instead (the audit log then survives power loss too, at the cost of one fsync
  per request).

  When the fsync happens: a commit that writes new secret thresholds (``tx.new_secrets``: an
  account opened, or redrawn with the ``redraw`` variant) is synced before the writer lock is
  released, so no other transaction can read, and answer with, thresholds that a power failure
  could still take back (it would then answer with a second pair that the ledger never paid for).
  A positive spent on unchanged thresholds is synced after the lock is released, so other writers
  do not wait for the disk, and on a slow disk concurrent fsyncs share one flush; its own answer
  still waits for the sync. Another worker may meanwhile answer from the unsynced state, but only
  with the same threshold pair and a positive count that its own answer cannot raise without a
  sync of its own (a positive it spends is synced before it is released, and that sync covers the
  earlier commit too). If power fails before that sync, the ledger loses only positives whose answers
  were never released, and every answer that was released was paid for.
* **PostgreSQL** (several hosts): psycopg 3 with a connection pool per process; an account row is
  locked with ``SELECT ... FOR UPDATE`` inside the transaction, so hosts serialise on it. Every
  connection is checked as it leaves the pool, and a broken one (its backend terminated, the server
  restarted or failed over) is replaced at once; a transaction whose connection dies midway fails
  and is rolled back by the server. While no connection can be made a request waits at most
  ``POOL_TIMEOUT_S`` and is refused; the pool keeps reconnecting, so no restart is needed.

Any backend failure surfaces as :class:`LedgerUnavailable`, which the API turns into HTTP 503: a
request whose ledger write failed is never answered.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from mbeacon.process import PROCESS

BUSY_TIMEOUT_S = 30.0
POOL_TIMEOUT_S = 5.0  # a request waits this long for a PostgreSQL connection, then gets 503
RECONNECT_TIMEOUT_S = 10.0  # the pool's reconnection backoff starts again at 1 s after this long
MIN_FREE_BYTES = 64 * 1024  # less free space on the SQLite ledger's file system: /readyz says not ready
WRITE_FAILURE_S = 30.0  # /readyz says not ready this long after a failed write (unless one succeeds)
#: SQLite's page cache per connection. A batch of 1,000 new queries dirties about 1,300 pages (its
#: cache rows land all over the answers index); with the default 2 MiB cache SQLite spills dirty
#: pages to the log before the commit and reads them back. Only pages in use take memory.
CACHE_KIB = 32 * 1024
#: Pages in the write-ahead log before a commit copies them into the database (SQLite's default is
#: 1,000). A page changed by many commits in between (the answers index, the accounts) is copied
#: once rather than once per checkpoint, which saves batches CPU. Free, unsynced commits wait longer
#: for the checkpoint's fsync (see the module docstring).
CHECKPOINT_PAGES = 10_000


class LedgerUnavailable(RuntimeError):
    """The ledger database could not be reached or refused the write; nothing was answered."""


class Tx:
    """One open transaction; rows come back as tuples."""

    def __init__(self, cursor: Any, placeholder: str) -> None:
        self._cursor = cursor
        self._placeholder = placeholder
        self.durable = False  # set when the transaction changes budget state (see module docstring)
        self.new_secrets = False  # set when it writes new secret thresholds (synced under the lock)
        self.stamp: str | None = None  # the time written into its rows, taken once (see ledger.stamp)

    def _sql(self, sql: str) -> str:
        return sql if self._placeholder == "?" else sql.replace("?", self._placeholder)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Tx:
        if self._placeholder == "?":
            self._cursor.execute(sql, tuple(params))
        else:  # psycopg: no parameters means no %-formatting of the statement
            self._cursor.execute(self._sql(sql), tuple(params) if params else None)
        return self

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            self._cursor.executemany(self._sql(sql), [tuple(r) for r in rows])

    def fetchone(self) -> tuple | None:
        return self._cursor.fetchone()

    def fetchall(self) -> list[tuple]:
        return list(self._cursor.fetchall())


class Database:
    """Common interface; see :func:`connect`."""

    dialect: str

    def lock_clause(self, table: str = "") -> str:
        """What ends a SELECT that locks the budget account rows it reads until the transaction ends
        (of ``table``, a name or alias, in a join). Nothing on SQLite: its writers take turns."""
        return ""

    def transaction(self, write: bool = True) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def ping(self) -> None:
        self.fetch_one("SELECT 1")

    def fetch_one(self, sql: str, params: Sequence[Any] = ()) -> tuple | None:
        """The first row of one read-only statement (atomic on its own: no explicit transaction)."""
        with self.transaction(write=False) as tx:
            return tx.execute(sql, params).fetchone()


class SQLiteDatabase(Database):
    dialect = "sqlite"

    def __init__(self, path: str | Path, *, sync_every_commit: bool = False) -> None:
        self.path = str(path)
        self.sync_every_commit = sync_every_commit
        self._local = threading.local()
        self._write_failure: tuple[float, str] | None = None  # (when, why) of the last failed write

    def _connection(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use in this process (one ``getpid`` per fork)."""
        local = self._local
        conn = getattr(local, "conn", None)
        if conn is not None and local.pid == PROCESS.pid:
            return conn
        conn = None
        try:
            if self.path != ":memory:":  # on first use: a ledger opened but never used creates nothing
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            _set_wal(conn)
            conn.execute(f"PRAGMA synchronous={'FULL' if self.sync_every_commit else 'NORMAL'}")
            conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA cache_size={-CACHE_KIB}")
            conn.execute(f"PRAGMA wal_autocheckpoint={CHECKPOINT_PAGES}")
        except (sqlite3.Error, OSError) as error:
            if conn is not None:
                conn.close()
            raise LedgerUnavailable(f"ledger database {self.path}: {error}{self._space_problem()}") from error
        local.conn, local.pid, local.lock_fd = conn, PROCESS.pid, None
        return conn

    def _discard(self) -> None:
        """Close this thread's connection and lock file; its next transaction opens them afresh."""
        local = self._local
        conn, fd = getattr(local, "conn", None), getattr(local, "lock_fd", None)
        if conn is not None and local.pid == PROCESS.pid:
            with suppress(sqlite3.Error):
                conn.close()
            if fd is not None:
                with suppress(OSError):
                    os.close(fd)
        local.conn = local.lock_fd = None

    def _lock_fd(self) -> int:
        """This thread's descriptor of the writers' lock file, opened by its first write.

        flock locks belong to an open file: one descriptor per thread, so threads exclude each other.
        Readers never need it, so they keep working on a read-only file system.
        """
        fd = self._local.lock_fd
        if fd is None:
            try:
                fd = self._local.lock_fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
            except OSError as error:
                raise LedgerUnavailable(f"ledger database {self.path}: lock file: {error}") from error
        return fd

    def _space_problem(self) -> str:
        """Why the ledger's file system cannot take a write (read-only, full), as a message suffix."""
        try:
            fs = os.statvfs(Path(self.path).parent)
        except OSError:
            return ""
        if fs.f_flag & os.ST_RDONLY:
            return " (the file system is read-only)"
        free = (fs.f_bfree if os.geteuid() == 0 else fs.f_bavail) * fs.f_frsize
        return " (the file system is full)" if free < MIN_FREE_BYTES else ""

    def ping(self) -> None:
        """The ledger answers a read and can take writes (readiness): its file system is neither
        read-only nor full, and no write failed in this process in the last ``WRITE_FAILURE_S`` s
        without one succeeding since (an emergency read-only remount or an I/O error shows only so)."""
        self.fetch_one("SELECT 1")
        if self.path != ":memory:" and (problem := self._space_problem()):
            raise LedgerUnavailable(f"ledger database {self.path}: not writable{problem}")
        failure = self._write_failure
        if failure is not None and (ago := time.monotonic() - failure[0]) < WRITE_FAILURE_S:
            raise LedgerUnavailable(f"the last write failed {ago:.0f} s ago: {failure[1]}")

    def fetch_one(self, sql: str, params: Sequence[Any] = ()) -> tuple | None:
        try:
            return self._connection().execute(sql, tuple(params)).fetchone()
        except sqlite3.Error as error:
            raise LedgerUnavailable(f"ledger database {self.path}: {error}") from error

    @contextmanager
    def transaction(self, write: bool = True) -> Iterator[Tx]:
        """One transaction; a writer first queues on the file lock, then ``BEGIN IMMEDIATE``."""
        conn = self._connection()
        lock_fd = self._lock_fd() if write else None
        if lock_fd is not None:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
        failed = sync_after_unlock = False
        try:
            try:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.Error as error:
                raise LedgerUnavailable(
                    f"ledger database {self.path}: {error}{self._space_problem()}"
                ) from error
            tx = Tx(conn.cursor(), "?")
            try:
                yield tx
            except sqlite3.OperationalError as error:  # disk full, read-only file, lock timeout
                _quietly(conn.execute, "ROLLBACK")
                raise LedgerUnavailable(
                    f"ledger database {self.path}: {error}{self._space_problem()}"
                ) from error
            except BaseException:
                _quietly(conn.execute, "ROLLBACK")
                raise
            self._commit(conn, tx)
            sync_after_unlock = tx.durable and not tx.new_secrets and not self.sync_every_commit
        except LedgerUnavailable as error:
            if write:  # remembered for /readyz (see ping)
                self._write_failure = (time.monotonic(), str(error))
                failed = True
            raise
        else:
            if write and self._write_failure is not None:
                self._write_failure = None
        finally:
            if lock_fd is not None:
                fcntl.flock(lock_fd, fcntl.LOCK_UN)
            if failed:  # after a disk, I/O or read-only error the next write starts on a new connection
                self._discard()
        if sync_after_unlock:  # a positive on unchanged thresholds: other writers need not wait
            try:
                self._sync_wal()
            except OSError as error:
                message = f"ledger database {self.path}: sync failed: {error}{self._space_problem()}"
                self._write_failure = (time.monotonic(), message)
                raise LedgerUnavailable(message) from error

    def _commit(self, conn: sqlite3.Connection, tx: Tx) -> None:
        """COMMIT, and fsync the log at once if the transaction wrote new secret thresholds (see the
        module docstring; a positive spent on unchanged thresholds is synced after the lock)."""
        try:
            conn.execute("COMMIT")
            if tx.durable and tx.new_secrets and not self.sync_every_commit:
                self._sync_wal()
        except (sqlite3.Error, OSError) as error:
            _quietly(conn.execute, "ROLLBACK")
            raise LedgerUnavailable(
                f"ledger database {self.path}: commit failed: {error}{self._space_problem()}"
            ) from error

    def _sync_wal(self) -> None:
        """Make the last commit durable: fsync the write-ahead log (what ``synchronous = FULL`` does)."""
        target = self.path + "-wal" if os.path.exists(self.path + "-wal") else self.path
        fd = os.open(target, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == PROCESS.pid:
            conn.close()
            if self._local.lock_fd is not None:
                os.close(self._local.lock_fd)
        self._local = threading.local()


class PostgresDatabase(Database):
    dialect = "postgresql"

    def lock_clause(self, table: str = "") -> str:
        return f" FOR UPDATE OF {table}" if table else " FOR UPDATE"

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 8) -> None:
        if importlib.util.find_spec("psycopg") is None or importlib.util.find_spec("psycopg_pool") is None:
            raise LedgerUnavailable(
                "a postgresql:// ledger needs the 'postgres' extra: pip install 'mbeacon[postgres]'"
            )
        self.url = url
        self._sizes = (min_size, max_size)
        self._pool: Any = None
        self._pid: int | None = None
        self._lock = threading.Lock()

    def _get_pool(self) -> Any:
        if self._pool is not None and self._pid == PROCESS.pid:
            return self._pool
        with self._lock:
            if self._pool is None or self._pid != PROCESS.pid:
                from psycopg_pool import ConnectionPool

                self._pool = ConnectionPool(
                    self.url,
                    min_size=self._sizes[0],
                    max_size=self._sizes[1],
                    open=True,
                    timeout=POOL_TIMEOUT_S,
                    reconnect_timeout=RECONNECT_TIMEOUT_S,
                    kwargs={"autocommit": False},
                )
                self._pid = PROCESS.pid
        return self._pool

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        """A pooled connection that answered a check just now.

        The pool's own ``check`` sleeps with exponential backoff (1 s, 2 s, ...) after every broken
        connection it meets, and after a server restart or a failover every idle connection is
        broken: requests then hung for seconds. Here a broken connection is handed back (the pool
        drops it and opens a replacement in the background) and the next one is tried at once.
        """
        import psycopg
        from psycopg_pool import ConnectionPool

        pool = self._get_pool()
        for _ in range(self._sizes[1] + 1):
            conn = pool.getconn()
            try:
                ConnectionPool.check_connection(conn)
            except psycopg.Error:
                pool.putconn(conn)
                continue
            try:
                yield conn
            finally:
                pool.putconn(conn)
            return
        raise LedgerUnavailable("ledger database: every pooled connection was broken")

    @contextmanager
    def transaction(self, write: bool = True) -> Iterator[Tx]:
        import psycopg
        from psycopg_pool import PoolTimeout

        try:
            with self._connection() as conn, conn.transaction(), conn.cursor() as cursor:
                yield Tx(cursor, "%s")
        except (psycopg.Error, PoolTimeout) as error:
            raise LedgerUnavailable(f"ledger database: {type(error).__name__}: {error}") from error

    def close(self) -> None:
        if self._pool is not None and self._pid == PROCESS.pid:
            self._pool.close()
        self._pool = None


def _set_wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL; the switch ignores the busy timeout, so retry while another process writes."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _quietly(fn: Any, *args: Any) -> None:
    with suppress(sqlite3.Error):
        fn(*args)


def connect(url: str, *, sqlite_sync: str = "state") -> Database:
    """``sqlite:///relative.db``, ``sqlite:////absolute.db`` or ``postgresql://...``."""
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else ""
        if not path:
            raise ValueError(f"database url {url!r}: write sqlite:///path/to/ledger.sqlite3")
        return SQLiteDatabase(path, sync_every_commit=sqlite_sync == "full")
    if parsed.scheme in ("postgresql", "postgres"):
        return PostgresDatabase(url)
    raise ValueError(f"database url {url!r}: use sqlite:///PATH or postgresql://...")

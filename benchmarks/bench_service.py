"""The service under load: a real ``mbeacon serve`` (gunicorn) answering SVT²-protected queries.

One gunicorn server per run, started as a subprocess on a free loopback port, on the demo store
(``ensure_demo``: 2,000 probes x 60 patients) in a temporary directory with a fresh SQLite ledger
there. The load comes from :mod:`benchmarks.loadgen` (raw asyncio HTTP/1.1 keep-alive clients) in
this process, so the generator and the server share the machine's cores, as they would on one host.
Its keep-alive connections are spread evenly over the workers (:class:`loadgen.Spread`, with
:meth:`Server.connection_owners` reading ``/proc``): left to gunicorn's accept race, connections
opened together mostly land on one worker and the run would measure one core.

* **Single query**: ``GET /api/methylation?probeId=..&minValue=..&maxValue=..`` with a bearer key,
  every request a query nobody asked before (a distinct probe/range; users in rotation), so each one
  runs the whole path: rate limiter, key check, parse, alpha from the store, beta from the prior,
  SVT² step, ledger transaction (account lock, state, answer cache row, audit row, commit with
  fsync) and the JSON response. Baseline side by side: ``GET /livez`` of the same app under the same
  server settings, which runs the same request hooks (metrics, access log) and nothing else: the
  framework's ceiling. Closed loop (clients sending back to back), interleaved rounds, median.
  Target: SVT² throughput >= 0.5x the ceiling's.
* **p99 at 50% load**: an open-loop test at a fixed offered rate of half the ceiling's measured
  throughput, latency from each request's scheduled send time (queueing counts). Target p99 <= 20 ms.
  Recorded too: the p99 at half the SVT² path's *own* saturated throughput (its latency when it is
  not overloaded) and the p99 of the closed-loop runs (saturation).
* **Batch**: a POST of 1,000 new queries (``includeResultsetResponses = ALL``: every answer is
  serialised). One client sending back to back: answers/s = 1,000 / median request latency; two
  concurrent clients recorded too. Target >= 20,000 answers/s; the baseline is the single-query
  path's saturated throughput (what batching buys).

* **Ledger floor** (for the record): after that server stops, ``benchmarks.floor_server`` (the same
  app plus ``GET /bench/floor``, under the same settings, on the same store and ledger) serves the
  least a free SVT² answer must do: the key check and a free answer's ledger transaction (account
  read and locked with its cached answers, cache row, audit row, commit), nothing else. Closed-loop
  rounds interleave ``/livez``, the floor and the SVT² endpoint on that server. In units of one
  ``/livez`` request, 0.5x allows SVT² 2.0; what the floor takes is out of reach of any change to the
  SVT²-specific work, and the rest is what that work may cost.

The policy lets the budget last the whole run (``c = 100000``, ``epsilon = 10``, ``on_exhausted =
"prior"``, no rate limit): every request is answered with the full SVT² and ledger work. After the
server stops, the ledger is read back to check that no answer came from the cache. The notes give
the CPU time per request of the server (master + workers, from ``/proc``) and of the generator:
the throughput ratio is essentially the ratio of the two paths' CPU costs.

Server setting: ``WORKERS`` x ``THREADS`` = 4 x 1 on this 2-core machine, chosen with ``python -m
benchmarks.bench_service --sweep 2x1 2x2 2x4 4x1 4x2 4x4 3x2`` (one full plan per setting, on
2026-11-21, the machine shared with other jobs). SVT² requests/s (ratio to /livez; server CPU ms
per SVT² request; SVT² p99 ms at half its own throughput): 2x1 864 (0.25; 1.74; 13), 2x2 1,064
(0.28; 1.56; 9.4), 2x4 1,283 (0.29; 1.17; 5.0), 4x1 1,574 (0.30; 1.11; 6.6), 4x2 1,493 (0.28;
1.15; 42.6), 4x4 (``mbeacon serve``'s default) 1,255 (0.23; 1.30; 7.6), 3x2 919 (0.28; 1.50; 11.9).
Closed-loop clients are 2 x workers x threads, so the p99 at saturation grows with the thread count
(17 ms at 4x1, 140 ms at 4x4), partly from SQLite's busy handler: a writer that finds the ledger
locked sleeps in 1, 2, 5, 10... ms steps. One thread per worker is for measuring only: gthread hands
each new connection to a worker thread that waits up to 5 s for its first request, so in production
a silent client could hold a one-thread worker that long.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import floor_server, loadgen
from benchmarks.common import Result, speed_ratio

GROUP = "service"
HOST = "127.0.0.1"
WORKERS = 4
THREADS = 1
USERS = 8
PACED_CONNECTIONS = 32
BATCH = 1_000
P99_TARGET_MS = 20.0
BATCH_TARGET = 20_000.0

CONFIG = """\
# Written by benchmarks/bench_service.py: a budget that lasts the whole run, no rate limit.
beacon_id = "org.mbeacon.bench"
environment = "test"
store = {store}
database_url = {ledger}
default_prior = {prior}
anonymous = "refuse"
rate_limit_per_minute = 0
max_batch = {batch}

[defaults]
mechanism = "svt2"
epsilon = 10.0
c = 100000
threshold = 1
variant = "single"
scope = "user"
on_exhausted = "prior"
tier = "REGISTERED"
"""


@dataclass(frozen=True)
class Plan:
    """Durations (s) and repeats of one run."""

    warmup: float
    rounds: int
    seconds: float
    paced_rounds: int
    paced_seconds: float
    batch_requests: int
    batch_pair_seconds: float

    @classmethod
    def of(cls, quick: bool) -> Plan:
        if quick:
            return cls(
                warmup=0.3,
                rounds=2,
                seconds=0.6,
                paced_rounds=1,
                paced_seconds=0.6,
                batch_requests=3,
                batch_pair_seconds=0.8,
            )
        return cls(
            warmup=1.0,
            rounds=5,
            seconds=3.0,
            paced_rounds=3,
            paced_seconds=3.0,
            batch_requests=15,
            batch_pair_seconds=3.0,
        )


# --- the workload --------------------------------------------------------------------------------


class Queries:
    """Request bytes for queries nobody asked before: query n is probe ``n % P`` with a range that
    depends on ``n // P`` only (lo in steps of 0.0005 up to 0.5, width 0.2 + 1e-5 steps), distinct
    for the first 2,000 x 30 million queries. Keys rotate over the users."""

    def __init__(self, probes: list[str], keys: list[str], host: str) -> None:
        self.probes = probes
        self.auth = [f"Authorization: Bearer {key}\r\n" for key in keys]
        self.host = host
        self.n = 0

    def _next(self) -> tuple[int, str, str, str]:
        n = self.n
        self.n += 1
        k, p = divmod(n, len(self.probes))
        lo = (k % 1000) / 2000
        hi = lo + 0.2 + (k // 1000) * 1e-5
        return n, self.probes[p], f"{lo:.6f}", f"{hi:.6f}"

    def get(self, path: str = "/api/methylation") -> bytes:
        n, probe, lo, hi = self._next()
        return (
            f"GET {path}?probeId={probe}&minValue={lo}&maxValue={hi} HTTP/1.1\r\n"
            f"Host: {self.host}\r\n{self.auth[n % len(self.auth)]}\r\n"
        ).encode()

    def batch_body(self, size: int = BATCH, include: str = "ALL") -> tuple[int, bytes]:
        params = []
        first = self.n
        for _ in range(size):
            _, probe, lo, hi = self._next()
            params.append({"probeId": probe, "minValue": float(lo), "maxValue": float(hi)})
        body = {
            "meta": {"apiVersion": "v2.0.0"},
            "query": {"requestParameters": params, "includeResultsetResponses": include},
        }
        return first, json.dumps(body, separators=(",", ":")).encode()

    def batch(self) -> bytes:
        first, body = self.batch_body()
        key = self.auth[first % len(self.auth)].split(": ", 1)[1].strip()
        headers = {"Authorization": key, "Content-Type": "application/json"}
        return loadgen.build_request("POST", "/api/methylation", self.host, headers=headers, body=body)


@dataclass
class Setup:
    root: Path
    config: Path
    ledger: Path
    keys: list[str]
    probes: list[str]


def prepare(root: Path, users: int = USERS) -> Setup:
    """Demo store, config and ledger with ``users`` researcher keys under ``root``."""
    from mbeacon.beacon.ledger import Ledger
    from mbeacon.store.cohorts import CohortStore
    from mbeacon.store.demo import ensure_demo

    demo = ensure_demo(root / "demo")
    ledger_path = root / "ledger.sqlite3"
    config = root / "mbeacon.toml"
    config.write_text(
        CONFIG.format(
            store=json.dumps(str(demo.store)),
            ledger=json.dumps(f"sqlite:///{ledger_path}"),
            prior=json.dumps(demo.prior),
            batch=BATCH,
        )
    )
    ledger = Ledger.open(f"sqlite:///{ledger_path}")
    try:
        keys = [ledger.add_user(f"bench{i}", actor="benchmark") for i in range(users)]
    finally:
        ledger.close()
    cohort = CohortStore(demo.store).open(demo.dataset)
    probes = [str(p) for ids, _ in cohort.blocks() for p in ids]
    return Setup(root, config, ledger_path, keys, probes)


def ledger_check(path: Path) -> dict[str, int]:
    """What the ledger recorded: queries audited, how many came from the cache, positives spent."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        audited, cached = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(cached), 0) FROM audit_log WHERE event = 'query'"
        ).fetchone()
        (positives,) = conn.execute("SELECT COALESCE(SUM(positives), 0) FROM accounts").fetchone()
        (queries,) = conn.execute("SELECT COUNT(*) FROM answers").fetchone()  # answers given
    return {"audited": audited, "cached": cached, "positives": positives, "account_queries": queries}


# --- the server ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


SERVE = ("-m", "mbeacon.cli", "serve")
FLOOR_SERVE = ("-m", "benchmarks.floor_server")  # the same app and settings, plus the ledger floor's route


class Server:
    """``mbeacon serve`` (or ``command``, which takes the same options) in its own process group;
    :meth:`stop` ends the master and every worker."""

    def __init__(
        self, config: Path, workdir: Path, *, workers: int, threads: int, command: tuple[str, ...] = SERVE
    ) -> None:
        self.config = config
        self.command = command
        self.workdir = workdir
        self.workers = workers
        self.threads = threads
        self.port = free_port()
        self.log_path = workdir / f"server-{self.port}.log"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> Server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MBEACON_")}
        metrics = self.workdir / f"metrics-{self.port}"
        metrics.mkdir()
        env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics)
        command = [
            sys.executable,
            *self.command,
            "--config",
            str(self.config),
            "--bind",
            f"{HOST}:{self.port}",
            "--workers",
            str(self.workers),
            "--threads",
            str(self.threads),
        ]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own process group: stop() can end stray workers too
            )
        try:
            loadgen.wait_ready(
                HOST,
                self.port,
                "/readyz",
                timeout=timeout,
                alive=lambda: self.process is not None and self.process.poll() is None,
            )
        except RuntimeError as error:
            self.stop()
            raise RuntimeError(f"{error}; server log:\n{self.log_tail()}") from None
        return self

    def _processes(self) -> dict[int, list[bytes]]:
        """``/proc/PID/stat`` fields (after the command name) of the master and its workers."""
        found: dict[int, list[bytes]] = {}
        if self.process is None or not os.path.isdir("/proc"):
            return found
        master = self.process.pid
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(entry.name) == master or int(fields[1]) == master:  # fields[1]: the parent's pid
                found[int(entry.name)] = fields
        return found

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system) used so far by the master and its live workers; None off Linux."""
        stats = self._processes()
        if not stats:
            return None
        return sum(int(f[11]) + int(f[12]) for f in stats.values()) / os.sysconf("SC_CLK_TCK")  # utime, stime

    def connection_owners(self, client_ports: list[int]) -> dict[int, int]:
        """Which worker (pid) accepted each loopback connection, by the client's port, from Linux's
        ``/proc``: the server-side socket's inode, then the worker holding it. A connection that no
        worker has accepted yet is left out."""
        wanted = set(client_ports)
        inodes: dict[str, int] = {}
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with contextlib.suppress(OSError), open(table) as fh:
                next(fh, None)
                for line in fh:
                    fields = line.split()
                    if int(fields[1].rsplit(":", 1)[1], 16) != self.port or fields[9] == "0":
                        continue
                    client = int(fields[2].rsplit(":", 1)[1], 16)
                    if client in wanted:
                        inodes[f"socket:[{fields[9]}]"] = client
        owners: dict[int, int] = {}
        master = self.process.pid if self.process else None
        for pid in self._processes():
            if pid == master:
                continue
            with contextlib.suppress(OSError):
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    with contextlib.suppress(OSError):
                        client = inodes.get(os.readlink(f"/proc/{pid}/fd/{fd}"))
                        if client is not None:
                            owners[client] = pid
        return owners

    def spread(self) -> loadgen.Spread | None:
        """Spread keep-alive connections over the workers (see :class:`loadgen.Spread`); Linux only."""
        return loadgen.Spread(self.connection_owners, self.workers) if os.path.isdir("/proc/net") else None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM (gunicorn's graceful stop), SIGKILL to the group after a timeout; idempotent."""
        proc = self.process
        if proc is None:
            return
        self.process = None
        group = proc.pid  # start_new_session: the master leads its own process group
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGKILL)
                proc.wait(timeout=10)
        # Workers exit with their master; give them a moment, then make sure none is left.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.killpg(group, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- measuring -----------------------------------------------------------------------------------


def clients_for(workers: int, threads: int) -> int:
    """Closed-loop clients: twice the server's request threads, so none of them waits for work."""
    return max(4, 2 * workers * threads)


def measure(server: Server, queries: Queries, plan: Plan) -> dict[str, Any]:
    """Every measurement of the group against one running server (see the module docstring)."""
    port, workers, threads = server.port, server.workers, server.threads
    livez = loadgen.build_request("GET", "/livez", f"{HOST}:{port}")
    fns = {"ceiling": lambda: livez, "svt2": queries.get}
    spread = server.spread()

    def observed(run: Callable[..., loadgen.LoadResult], *args: Any, **kwargs: Any) -> loadgen.LoadResult:
        return _observed(server, spread, run, *args, **kwargs)

    def paced(name: str, rate: float) -> loadgen.LoadResult:
        return observed(
            loadgen.paced,
            fns[name],
            rate=rate,
            duration=plan.paced_seconds,
            connections=PACED_CONNECTIONS,
            grace=plan.paced_seconds,
        )

    names = list(fns)
    saturated = _saturated_rounds(server, spread, fns, plan)
    clients = clients_for(workers, threads)
    ceiling_rps = statistics.median(x.rps for x in saturated["ceiling"])
    svt2_rps = statistics.median(x.rps for x in saturated["svt2"])

    def paced_rounds(rate: float) -> dict[str, list[loadgen.LoadResult]]:
        runs: dict[str, list[loadgen.LoadResult]] = {name: [] for name in fns}
        for r in range(plan.paced_rounds):
            for name in names[r % 2 :] + names[: r % 2]:
                runs[name].append(paced(name, rate))
        return runs

    rate = 0.5 * ceiling_rps
    at_half = paced_rounds(rate)  # the target's load: half the ceiling
    own_rate = 0.5 * svt2_rps
    at_own = paced_rounds(own_rate)  # half of what the SVT² path itself sustains

    observed(loadgen.closed_loop, queries.batch, clients=1, duration=30, max_requests=1)  # warm-up
    one = observed(
        loadgen.closed_loop, queries.batch, clients=1, duration=60, max_requests=plan.batch_requests
    )
    two = observed(loadgen.closed_loop, queries.batch, clients=2, duration=plan.batch_pair_seconds)

    every = [
        *saturated["ceiling"],
        *saturated["svt2"],
        *at_half["ceiling"],
        *at_half["svt2"],
        *at_own["ceiling"],
        *at_own["svt2"],
        one,
        two,
    ]
    return {
        "workers": workers,
        "threads": threads,
        "clients": clients,
        "ceiling_rps": ceiling_rps,
        "svt2_rps": svt2_rps,
        "svt2_p50_sat_ms": _median(saturated["svt2"], "p50") * 1e3,
        "svt2_p99_sat_ms": _median(saturated["svt2"], "p99") * 1e3,
        "ceiling_p99_sat_ms": _median(saturated["ceiling"], "p99") * 1e3,
        "svt2_server_cpu_ms": _median(saturated["svt2"], "server_cpu_ms"),
        "ceiling_server_cpu_ms": _median(saturated["ceiling"], "server_cpu_ms"),
        "svt2_server_cores": _median(saturated["svt2"], "server_cores"),
        "ceiling_server_cores": _median(saturated["ceiling"], "server_cores"),
        "svt2_client_cores": _median(saturated["svt2"], "client_cores"),
        "ceiling_client_cores": _median(saturated["ceiling"], "client_cores"),
        "paced_rps": rate,
        "paced_seconds": plan.paced_seconds,
        "svt2_p50_paced_ms": _median(at_half["svt2"], "p50") * 1e3,
        "svt2_p99_paced_ms": _median(at_half["svt2"], "p99") * 1e3,
        "ceiling_p99_paced_ms": _median(at_half["ceiling"], "p99") * 1e3,
        "svt2_paced_achieved_rps": _median(at_half["svt2"], "rps"),
        "svt2_paced_errors": sum(x.errors for x in at_half["svt2"]),
        "own_paced_rps": own_rate,
        "svt2_p50_own_ms": _median(at_own["svt2"], "p50") * 1e3,
        "svt2_p99_own_ms": _median(at_own["svt2"], "p99") * 1e3,
        "ceiling_p99_own_ms": _median(at_own["ceiling"], "p99") * 1e3,
        "batch_median_s": one.p50,
        "batch_answers_per_s": BATCH / one.p50 if one.latencies else 0.0,
        "batch_server_cpu_ms": one.extra.get("server_cpu_ms"),
        "batch2_answers_per_s": two.rps * BATCH,
        "batch2_median_s": two.p50,
        "errors": sum(x.errors for x in every),
        "error_samples": [s for x in every for s in x.error_samples][:5],
        "saturated_errors": _errors([*saturated["ceiling"], *saturated["svt2"]]),
        "own_paced_errors": _errors([*at_own["ceiling"], *at_own["svt2"]]),
        "batch_errors": _errors([one, two]),
        "runs": {
            "saturated": {k: [x.summary() for x in v] for k, v in saturated.items()},
            "paced": {k: [x.summary() for x in v] for k, v in at_half.items()},
            "paced_own": {k: [x.summary() for x in v] for k, v in at_own.items()},
            "batch_one_client": one.summary(),
            "batch_two_clients": two.summary(),
        },
    }


def _observed(
    server: Server, spread: loadgen.Spread | None, run: Callable[..., loadgen.LoadResult], *args: Any,
    **kwargs: Any,
) -> loadgen.LoadResult:  # fmt: skip
    """``run(...)`` with connections spread over the workers and the CPU time per request of the
    server (master + workers) and of the generator, over the measured window."""
    res = run(HOST, server.port, *args, spread=spread, meter=server.cpu_seconds, **kwargs)
    if res.metered is not None:
        res.extra["server_cores"] = round(res.metered / res.seconds, 3)
        res.extra["server_cpu_ms"] = round(res.metered / max(1, res.count) * 1e3, 3)
    res.extra["client_cores"] = round(res.cpu_seconds / res.seconds, 3)
    res.extra["client_cpu_ms"] = round(res.cpu_seconds / max(1, res.count) * 1e3, 3)
    return res


def _saturated_rounds(
    server: Server, spread: loadgen.Spread | None, fns: dict[str, loadgen.RequestFactory], plan: Plan
) -> dict[str, list[loadgen.LoadResult]]:
    """A warm-up run of each request kind (it opens cohorts, priors and ledger connections in every
    worker thread), then ``plan.rounds`` closed-loop rounds of every kind, the order rotating by one
    each round so that no kind always follows the same one."""
    clients = clients_for(server.workers, server.threads)

    def closed(name: str, seconds: float) -> loadgen.LoadResult:
        return _observed(server, spread, loadgen.closed_loop, fns[name], clients=clients, duration=seconds)

    for name in fns:
        closed(name, plan.warmup)
    names = list(fns)
    runs: dict[str, list[loadgen.LoadResult]] = {name: [] for name in fns}
    for r in range(plan.rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            runs[name].append(closed(name, plan.seconds))
    return runs


def measure_floor(server: Server, queries: Queries, plan: Plan) -> dict[str, Any]:
    """The ledger floor (``benchmarks.floor_server``) beside ``/livez`` and the real SVT² endpoint, in
    the same closed-loop rounds on one server: how much of an SVT² request's cost the ledger's
    contract alone takes, and how much is left to the SVT²-specific work."""
    livez = loadgen.build_request("GET", "/livez", f"{HOST}:{server.port}")
    fns = {
        "ceiling": lambda: livez,
        "floor": lambda: queries.get(floor_server.FLOOR_PATH),
        "svt2": queries.get,
    }
    runs = _saturated_rounds(server, server.spread(), fns, plan)

    def ratio(name: str) -> float:
        return statistics.median(a.rps / b.rps for a, b in zip(runs[name], runs["ceiling"], strict=True))

    return {
        "ceiling_rps": _median(runs["ceiling"], "rps"),
        "floor_rps": _median(runs["floor"], "rps"),
        "svt2_rps": _median(runs["svt2"], "rps"),
        "floor_ratio": ratio("floor"),
        "svt2_ratio": ratio("svt2"),
        "ceiling_server_cpu_ms": _median(runs["ceiling"], "server_cpu_ms"),
        "floor_server_cpu_ms": _median(runs["floor"], "server_cpu_ms"),
        "svt2_server_cpu_ms": _median(runs["svt2"], "server_cpu_ms"),
        "rounds": plan.rounds,
        "errors": _errors([x for v in runs.values() for x in v]),
        "runs": {k: [x.summary() for x in v] for k, v in runs.items()},
    }


def _median(results: list[loadgen.LoadResult], what: str) -> float:
    """The median over ``results`` of one of their fields (``rps``, ``p99``...) or extras
    (``server_cpu_ms``...), the runs that lack it left out; NaN if none has it."""
    values = [getattr(x, what) if hasattr(x, what) else x.extra.get(what) for x in results]
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else math.nan


def _errors(runs: list[loadgen.LoadResult]) -> str:
    """``""`` or ``"; N errors (first: ...)"`` for a note."""
    count = sum(x.errors for x in runs)
    samples = sorted({s for x in runs for s in x.error_samples})
    return f"; {count} errors ({', '.join(samples[:3])})" if count else ""


def serve_and_measure(
    setup: Setup, plan: Plan, *, workers: int, threads: int, queries: Queries | None = None
) -> dict[str, Any]:
    queries = queries or Queries(setup.probes, setup.keys, HOST)
    server = Server(setup.config, setup.root, workers=workers, threads=threads)
    try:
        server.start()
        figures = measure(server, queries, plan)
    finally:
        server.stop()
    figures["queries_sent"] = queries.n
    figures["ledger_sync"] = ledger_sync(setup.config)
    return figures


def serve_floor(setup: Setup, plan: Plan, queries: Queries) -> dict[str, Any]:
    """:func:`measure_floor` on its own server (``benchmarks.floor_server``, the main run's settings)."""
    server = Server(setup.config, setup.root, workers=WORKERS, threads=THREADS, command=FLOOR_SERVE)
    try:
        server.start()
        return measure_floor(server, queries, plan)
    finally:
        server.stop()


def ledger_sync(config: Path) -> str:
    """How the SQLite ledger syncs its commits under this config, in words for the notes."""
    from mbeacon.beacon.config import load_config

    mode = getattr(load_config(config, env={}), "sqlite_sync", None)
    if mode == "state":
        return "WAL, sqlite_sync = state: fsync only for commits that change budget state"
    if mode == "full":
        return "WAL, sqlite_sync = full: every commit fsynced"
    return "WAL, synchronous = FULL: every commit fsynced"


# --- the group -----------------------------------------------------------------------------------


def results(f: dict[str, Any], check: dict[str, int], quick: bool) -> list[Result]:
    judged = not quick  # --quick is a smoke run (sub-second rounds): no verdict
    setting = (
        f"gunicorn gthread, {f['workers']} workers x {f['threads']} thread(s), SQLite ledger "
        f"({f['ledger_sync']}); load generator in this process ({f['clients']} keep-alive clients, "
        f"spread evenly over the workers)"
    )
    ledger = (
        f"ledger afterwards: {check['audited']:,} queries audited, {check['cached']} from the cache, "
        f"{check['positives']:,} positives spent"
    )
    ratio = speed_ratio(f["svt2_rps"], f["ceiling_rps"], "requests/s")
    cpu = ""
    if not math.isnan(f["svt2_server_cpu_ms"]):
        cpu = (
            f"; server CPU per request {f['svt2_server_cpu_ms']:.2f} ms (SVT²) vs "
            f"{f['ceiling_server_cpu_ms']:.2f} ms (/livez), server busy {f['svt2_server_cores']:.2f} vs "
            f"{f['ceiling_server_cores']:.2f} cores, generator {f['svt2_client_cores']:.2f} vs "
            f"{f['ceiling_client_cores']:.2f} cores"
        )
    detail = {k: v for k, v in f.items() if k != "runs"} | {"ledger": check, "runs": f["runs"]}
    single_per_s = f["svt2_rps"]
    plan_seconds = f["paced_seconds"]
    overload = ""
    if f["paced_rps"] > f["svt2_rps"]:
        overload = (
            f"; the offered load is above the SVT² path's saturated throughput ({f['svt2_rps']:.0f}/s), so "
            f"the queue grows for the whole run and this p99 grows with the run's length"
        )
        if f["svt2_paced_errors"]:
            overload += f" ({f['svt2_paced_errors']} requests still unanswered at the end)"
    return [
        Result(
            "service: single query (SVT², ledger) vs /livez",
            f["svt2_rps"],
            f["ceiling_rps"],
            "requests/s",
            ratio,
            ">= 0.5x",
            (ratio is not None and ratio >= 0.5) if judged else None,
            baseline_name="GET /livez of the same app and server settings (the framework's ceiling)",
            note=(
                f"{setting}; closed loop, median of {len(f['runs']['saturated']['svt2'])} interleaved "
                f"rounds; every query new (distinct probe/range, {USERS} users){cpu}; {ledger}"
                f"{f['saturated_errors']}"
            ),
            detail=detail,
        ),
        Result(
            "service: p99 at 50% of ceiling load",
            f["svt2_p99_paced_ms"],
            f["ceiling_p99_paced_ms"],
            "ms",
            speed_ratio(f["svt2_p99_paced_ms"], f["ceiling_p99_paced_ms"], "ms"),
            f"<= {P99_TARGET_MS:g} ms",
            (f["svt2_p99_paced_ms"] <= P99_TARGET_MS) if judged else None,
            baseline_name="p99 of GET /livez at the same offered load",
            note=(
                f"open loop at {f['paced_rps']:.0f} requests/s (half the ceiling's throughput) for "
                f"{plan_seconds:g} s, latency from the scheduled send time; SVT² p50 "
                f"{f['svt2_p50_paced_ms']:.2f} ms, achieved {f['svt2_paced_achieved_rps']:.0f}/s; median of "
                f"{len(f['runs']['paced']['svt2'])} rounds{overload}"
            ),
        ),
        Result(
            "service: p99 at 50% of SVT²'s own throughput",
            f["svt2_p99_own_ms"],
            f["ceiling_p99_own_ms"],
            "ms",
            speed_ratio(f["svt2_p99_own_ms"], f["ceiling_p99_own_ms"], "ms"),
            "for the record",
            None,
            baseline_name="p99 of GET /livez at the same offered load",
            note=(
                f"open loop at {f['own_paced_rps']:.0f} requests/s (half the SVT² path's saturated "
                f"throughput): the latency the path gives when it is not overloaded; SVT² p50 "
                f"{f['svt2_p50_own_ms']:.2f} ms{f['own_paced_errors']}"
            ),
        ),
        Result(
            "service: p99 at saturation",
            f["svt2_p99_sat_ms"],
            f["ceiling_p99_sat_ms"],
            "ms",
            speed_ratio(f["svt2_p99_sat_ms"], f["ceiling_p99_sat_ms"], "ms"),
            "for the record",
            None,
            baseline_name="p99 of GET /livez in the same closed-loop rounds",
            note=f"closed loop, {f['clients']} clients back to back; SVT² p50 {f['svt2_p50_sat_ms']:.2f} ms",
        ),
        Result(
            "service: batch of 1,000 queries",
            f["batch_answers_per_s"],
            single_per_s,
            "answers/s",
            speed_ratio(f["batch_answers_per_s"], single_per_s, "answers/s"),
            f">= {BATCH_TARGET:,.0f}/s",
            (f["batch_answers_per_s"] >= BATCH_TARGET) if judged else None,
            baseline_name="single-query GET path, saturated (answers/s = requests/s)",
            note=(
                f"POST of 1,000 new queries (all answers in the response), one client: 1,000 / median "
                f"latency ({f['batch_median_s'] * 1e3:.1f} ms, {f['runs']['batch_one_client']['count']} "
                f"requests); two concurrent clients: {f['batch2_answers_per_s']:,.0f} answers/s in all"
                f"{f['batch_errors']}"
            ),
        ),
    ]


def floor_result(f: dict[str, Any]) -> Result:
    """The ledger floor's row: its throughput against /livez, and what that leaves the SVT² work."""
    svt2_units, floor_units = 1 / f["svt2_ratio"], 1 / f["floor_ratio"]
    room = f"which leaves {2 - floor_units:.2f}" if floor_units < 2 else "so the floor alone leaves nothing"
    cpu = ""
    if not math.isnan(f["floor_server_cpu_ms"]):
        cpu = (
            f"; server CPU per request {f['floor_server_cpu_ms']:.2f} ms (floor) vs "
            f"{f['ceiling_server_cpu_ms']:.2f} ms (/livez) and {f['svt2_server_cpu_ms']:.2f} ms (SVT²)"
        )
    return Result(
        "service: ledger floor (key check, free answer's transaction) vs /livez",
        f["floor_rps"],
        f["ceiling_rps"],
        "requests/s",
        f["floor_ratio"],
        "for the record",
        None,
        baseline_name="GET /livez of the same app and server settings (the framework's ceiling)",
        note=(
            f"GET /bench/floor of benchmarks.floor_server (the beacon's app plus that route, the same "
            f"gunicorn settings): the key check and a free answer's ledger transaction (account read "
            f"and locked with its cached answers, cache row, audit row, commit), nothing else; closed "
            f"loop, median of {f['rounds']} rounds interleaving /livez, the floor and SVT² on that "
            f"server (SVT² {f['svt2_ratio']:.3f}x of /livez there). In units of one /livez request, "
            f"SVT² costs {svt2_units:.2f} and the floor {floor_units:.2f}: the 0.5x target allows 2.00, "
            f"{room} for what SVT² adds to the floor (parsing, store, prior, SVT² step, fsync of spent "
            f"positives, metrics, Beacon response), which takes {svt2_units - floor_units:.2f} now"
            f"{cpu}{f['errors']}"
        ),
        detail={k: v for k, v in f.items() if k != "runs"} | {"runs": f["runs"]},
    )


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """While inside, SIGTERM raises SystemExit in the main thread, so ``finally`` blocks still stop the
    server and remove the temporary directory (by default SIGTERM ends Python without unwinding)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def unwind(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(quick: bool) -> list[Result]:
    plan = Plan.of(quick)
    with sigterm_unwinds(), tempfile.TemporaryDirectory(prefix="mbeacon-bench-service-") as tmp:
        setup = prepare(Path(tmp))
        queries = Queries(setup.probes, setup.keys, HOST)  # shared: the floor's queries are new too
        figures = serve_and_measure(setup, plan, workers=WORKERS, threads=THREADS, queries=queries)
        check = ledger_check(setup.ledger)
        floor = serve_floor(setup, plan, queries)
    return [*results(figures, check, quick), floor_result(floor)]


SWEEP_COLUMNS = {
    "W": "workers",
    "T": "threads",
    "clients": "clients",
    "livez/s": "ceiling_rps",
    "svt2/s": "svt2_rps",
    "ratio": None,
    "srv ms livez": "ceiling_server_cpu_ms",
    "srv ms svt2": "svt2_server_cpu_ms",
    "srv cores livez": "ceiling_server_cores",
    "srv cores svt2": "svt2_server_cores",
    "gen cores": "svt2_client_cores",
    "p99 sat": "svt2_p99_sat_ms",
    "p99 @50%": "svt2_p99_paced_ms",
    "p99 @own50%": "svt2_p99_own_ms",
    "batch/s": "batch_answers_per_s",
    "batch x2/s": "batch2_answers_per_s",
}


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


def sweep(settings: list[tuple[int, int]], quick: bool) -> None:
    """Measure each (workers, threads) setting on one store and ledger; print one line per setting.

    Columns: requests/s of /livez and SVT² (closed loop), their ratio, server CPU milliseconds per
    request (master + workers, from /proc), the generator's CPU in cores during the SVT² runs, SVT²
    p99 (ms) at saturation and at half the ceiling's rate, batch answers/s with one and two clients.
    """
    plan = Plan.of(quick)
    print("  ".join(f"{c:>12}" for c in SWEEP_COLUMNS), flush=True)
    with sigterm_unwinds(), tempfile.TemporaryDirectory(prefix="mbeacon-bench-service-") as tmp:
        setup = prepare(Path(tmp))
        for workers, threads in settings:
            f = serve_and_measure(setup, plan, workers=workers, threads=threads)
            f["ratio"] = f["svt2_rps"] / f["ceiling_rps"]
            cells = [f[key or name] for name, key in SWEEP_COLUMNS.items()]
            line = "  ".join(f"{_cell(c):>12}" for c in cells)
            errors = f["saturated_errors"] + f["own_paced_errors"] + f["batch_errors"]  # not the overload's
            print(line + errors, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_service")
    parser.add_argument("--sweep", nargs="*", metavar="WxT", help="settings to compare, e.g. 2x2 4x4")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.sweep is not None:
        chosen = args.sweep or ["1x4", "2x1", "2x2", "2x4", "3x2", "4x1", "4x2", "4x4"]
        sweep([tuple(int(x) for x in s.split("x")) for s in chosen], args.quick)  # type: ignore[misc]
        return 0
    from benchmarks.common import machine_info, print_table

    print_table(run(args.quick), machine_info(), title="mbeacon benchmarks: service")
    return 0


if __name__ == "__main__":
    sys.exit(main())

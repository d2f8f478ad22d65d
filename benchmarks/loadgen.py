"""A small HTTP/1.1 load generator over raw asyncio streams, for benchmarks against a local server.

No third-party client: the generator shares the machine with the server it measures, so it does as
little as it can per request. Each virtual client owns one keep-alive connection and sends one
request at a time (no pipelining); a response is read as its header block plus ``Content-Length``
bytes (the server under test always sends one; chunked responses are not supported). Requests are
prebuilt bytes from a factory the caller gives, called once per request (so every request can be
new, e.g. a distinct query that no cache can answer).

Two modes:

* :func:`closed_loop`: N clients for D seconds, each sending its next request as soon as the last
  one is answered. Measures the server's saturated throughput; latency is send to last byte.
* :func:`paced`: an open-loop test at a fixed offered rate. Request i is *scheduled* at
  ``start + i / rate`` and its latency is measured from that scheduled time, not from when a
  connection was free to send it, so time spent queueing behind a slow server counts (no
  coordinated omission). Requests are handed to a pool of connections; the pool is large enough
  for the rate, and if it is not, the wait shows up in the latencies, as it would for real callers.

Connections are opened before the clock starts. A pre-forking server whose workers share one listening
socket (gunicorn) lets whichever worker wakes first accept, so connections opened together mostly land
on one worker, which then serves the whole load on one core while the others idle; give a
:class:`Spread` (which server process accepted a connection) and the generator spreads its connections
evenly over the processes.

Both are bounded in time (and count) and refuse anything but a loopback address. A non-2xx status,
a connection error or a request still unanswered at the end of the grace period is an error; the
latency percentiles are over the successful requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import defaultdict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

LOOPBACK = ("127.0.0.1", "::1", "localhost")
RequestFactory = Callable[[], bytes]
Meter = Callable[[], float | None]  # a counter read at the start and the end of the measured window
MAX_HEADER_BYTES = 65_536
OPEN_TIMEOUT_S = 30.0  # opening (and spreading) the connections of one run


def build_request(
    method: str, path: str, host: str, *, headers: dict[str, str] | None = None, body: bytes = b""
) -> bytes:
    """The bytes of one HTTP/1.1 keep-alive request."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """One HTTP/1.1 response: its status, its body and whether the server closes the connection."""
    head = await reader.readuntil(b"\r\n\r\n")
    if len(head) > MAX_HEADER_BYTES:
        raise ValueError("response header block too large")
    status = int(head[9:12])
    lower = head.lower()
    at = lower.find(b"\r\ncontent-length:")
    if at < 0:
        raise ValueError(f"response {status} without Content-Length")
    end = lower.index(b"\r\n", at + 2)
    length = int(lower[at + 17 : end])
    body = await reader.readexactly(length) if length else b""
    return status, body, b"\r\nconnection: close" in lower


@dataclass(frozen=True)
class Spread:
    """How to spread keep-alive connections evenly over a server's ``processes``.

    ``owners(ports)``: which server process accepted each connection, by the connections' local ports
    (a port is missing while no process has accepted it yet). The generator opens its connections,
    keeps at most an even share on each process and replaces the rest, for at most ``passes`` rounds.
    While it connects the replacements it keeps the processes that have their share busy with a
    request each, so that an idle process wins the race to accept.
    """

    owners: Callable[[list[int]], dict[int, Hashable]]
    processes: int
    passes: int = 20


@dataclass
class LoadResult:
    """What one load run measured; latencies in seconds (percentiles over successful requests)."""

    mode: str  # "closed" or "paced"
    clients: int
    seconds: float
    count: int
    errors: int
    offered_rps: float | None = None
    latencies: list[float] = field(default_factory=list, repr=False)
    error_samples: list[str] = field(default_factory=list)
    cpu_seconds: float = 0.0  # the generator's own CPU time (this process) during the run
    metered: float | None = None  # how much the caller's ``meter`` advanced during the run
    extra: dict[str, Any] = field(default_factory=dict)  # the caller's own figures about the run

    @property
    def rps(self) -> float:
        """Successful requests per second of wall-clock time."""
        return self.count / self.seconds if self.seconds > 0 else 0.0

    def percentile(self, q: float) -> float:
        """Nearest-rank percentile ``q`` (0-100) of the latencies; NaN if nothing succeeded."""
        if not self.latencies:
            return math.nan
        ordered = sorted(self.latencies)
        rank = max(1, math.ceil(q / 100 * len(ordered)))
        return ordered[rank - 1]

    @property
    def p50(self) -> float:
        return self.percentile(50)

    @property
    def p99(self) -> float:
        return self.percentile(99)

    def summary(self) -> dict[str, Any]:
        """Plain numbers for JSON and notes (latencies in milliseconds)."""
        return {
            "mode": self.mode,
            "clients": self.clients,
            "offered_rps": self.offered_rps,
            "seconds": round(self.seconds, 3),
            "count": self.count,
            "errors": self.errors,
            "rps": round(self.rps, 1),
            "p50_ms": round(self.p50 * 1e3, 3),
            "p99_ms": round(self.p99 * 1e3, 3),
            "max_ms": round(max(self.latencies, default=math.nan) * 1e3, 3),
            "client_cpu_s": round(self.cpu_seconds, 3),
            "error_samples": self.error_samples[:3],
            **self.extra,
        }


class _Recorder:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors = 0
        self.samples: list[str] = []

    def error(self, what: str) -> None:
        self.errors += 1
        if len(self.samples) < 5:
            self.samples.append(what)


class _Connection:
    """One keep-alive connection; reconnects after an error or a ``Connection: close``."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.local_port = 0

    async def connect(self) -> int:
        """Open the connection; the local port."""
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.local_port = self.writer.get_extra_info("sockname")[1]
        return self.local_port

    async def request(self, payload: bytes) -> int:
        """Send one request and read its whole response; the status code."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.reader, self.writer
        assert reader is not None
        writer.write(payload)
        status, _, close = await read_response(reader)
        if close:
            self.close()
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def _one(conn: _Connection, payload: bytes, started: float, rec: _Recorder) -> None:
    try:
        status = await conn.request(payload)
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as error:
        conn.close()
        rec.error(f"{type(error).__name__}: {error}")
        await asyncio.sleep(0.01)  # a refused connection must not become a busy loop
        return
    if 200 <= status < 300:
        rec.latencies.append(time.perf_counter() - started)
    else:
        rec.error(f"HTTP {status}")


def _check_host(host: str) -> None:
    if host not in LOOPBACK:
        raise ValueError(f"the load generator only targets loopback addresses, not {host!r}")


async def _open(
    host: str, port: int, n: int, spread: Spread | None, make: RequestFactory
) -> tuple[list[_Connection], list[int]]:
    """``n`` open connections, spread over the server's processes when ``spread`` is given; and how
    many connections each process got (largest first; empty without ``spread``)."""
    if spread is None:
        conns = [_Connection(host, port) for _ in range(n)]
        for conn in conns:
            await conn.connect()
        return conns, []
    share = math.ceil(n / spread.processes)
    placed: dict[Hashable, list[_Connection]] = defaultdict(list)
    for attempt in range(spread.passes):
        missing = n - sum(len(group) for group in placed.values())
        if not missing:
            break
        full = [group[0] for group in placed.values() if len(group) >= share]
        busy = [asyncio.create_task(conn.request(make())) for conn in full]
        fresh = [_Connection(host, port) for _ in range(missing)]
        for conn in fresh:
            await conn.connect()
        # A request on each new connection at once: a gthread worker hands a new connection to one of
        # its threads, which waits up to 5 s for the request (and serves nothing else meanwhile).
        tried = [asyncio.create_task(conn.request(make())) for conn in fresh]
        await asyncio.gather(*busy, *tried, return_exceptions=True)
        owners = await _owners(spread, [conn.local_port for conn in fresh])
        last = attempt == spread.passes - 1
        for conn in fresh:
            owner = owners.get(conn.local_port)
            if last or owner is None or len(placed[owner]) < share:
                placed[owner].append(conn)
            else:
                conn.close()  # that process has its share already: try again
    return [c for group in placed.values() for c in group], sorted(map(len, placed.values()), reverse=True)


async def _owners(spread: Spread, ports: list[int], wait: float = 0.25) -> dict[int, Hashable]:
    """The process that accepted each connection (by local port), waiting up to ``wait`` s for accept()."""
    deadline = time.perf_counter() + wait
    while len(owners := spread.owners(ports)) < len(ports) and time.perf_counter() < deadline:
        await asyncio.sleep(0.002)
    return owners


def _result(
    mode: str, connections: int, rate: float | None, rec: _Recorder, elapsed: float, cpu: float,
    metered: float | None, placed: list[int] | None,
) -> LoadResult:  # fmt: skip
    """The record of one run, closed or paced (the generator's own CPU time included)."""
    result = LoadResult(
        mode,
        connections,
        elapsed,
        len(rec.latencies),
        rec.errors,
        rate,
        rec.latencies,
        rec.samples,
        time.process_time() - cpu,
    )
    result.metered = metered
    if placed:
        result.extra["connections_per_process"] = placed
    return result


def _advance(meter: Meter | None, before: float | None) -> float | None:
    after = meter() if meter else None
    return None if before is None or after is None else after - before


async def _closed(
    host: str,
    port: int,
    make: RequestFactory,
    clients: int,
    duration: float,
    max_requests: int | None,
    grace: float,
    spread: Spread | None,
    meter: Meter | None,
) -> LoadResult:
    rec = _Recorder()
    budget = [max_requests if max_requests is not None else math.inf]
    conns, placed = await asyncio.wait_for(_open(host, port, clients, spread, make), OPEN_TIMEOUT_S)
    metered = meter() if meter else None
    cpu = time.process_time()
    start = time.perf_counter()
    deadline = start + duration

    async def client(conn: _Connection) -> None:
        while time.perf_counter() < deadline and budget[0] > 0:
            budget[0] -= 1
            payload = make()
            await _one(conn, payload, time.perf_counter(), rec)

    tasks = [asyncio.create_task(client(c)) for c in conns]
    try:
        _, pending = await asyncio.wait(tasks, timeout=duration + grace)
        for task in pending:  # still waiting for an answer after the grace period
            task.cancel()
            rec.error("no response before the end of the run")
        await asyncio.gather(*pending, return_exceptions=True)
    finally:
        for conn in conns:
            conn.close()
    return _result(
        "closed", clients, None, rec, time.perf_counter() - start, cpu, _advance(meter, metered), placed
    )


async def _paced(
    host: str,
    port: int,
    make: RequestFactory,
    rate: float,
    duration: float,
    connections: int,
    grace: float,
    spread: Spread | None,
    meter: Meter | None,
) -> LoadResult:
    rec = _Recorder()
    total = max(1, int(rate * duration))
    queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
    conns, placed = await asyncio.wait_for(_open(host, port, connections, spread, make), OPEN_TIMEOUT_S)
    metered = meter() if meter else None
    cpu = time.process_time()
    start = time.perf_counter() + 0.01

    async def schedule() -> None:
        for i in range(total):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0.0005:
                await asyncio.sleep(delay)
            queue.put_nowait((due, make()))
        for _ in conns:
            queue.put_nowait(None)

    async def sender(conn: _Connection) -> None:
        while (item := await queue.get()) is not None:
            due, payload = item
            await _one(conn, payload, due, rec)

    tasks = [asyncio.create_task(schedule())] + [asyncio.create_task(sender(c)) for c in conns]
    try:
        _, pending = await asyncio.wait(tasks, timeout=duration + grace)
        unanswered = total - len(rec.latencies) - rec.errors
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for _ in range(max(0, unanswered)):
            rec.error("not answered before the end of the run")
    finally:
        for conn in conns:
            conn.close()
    return _result(
        "paced", connections, rate, rec, time.perf_counter() - start, cpu, _advance(meter, metered), placed
    )


def closed_loop(
    host: str,
    port: int,
    make: RequestFactory,
    *,
    clients: int,
    duration: float,
    max_requests: int | None = None,
    grace: float = 10.0,
    spread: Spread | None = None,
    meter: Meter | None = None,
) -> LoadResult:
    """``clients`` connections sending back-to-back for ``duration`` seconds (at most ``max_requests``)."""
    _check_host(host)
    return asyncio.run(_closed(host, port, make, clients, duration, max_requests, grace, spread, meter))


def paced(
    host: str,
    port: int,
    make: RequestFactory,
    *,
    rate: float,
    duration: float,
    connections: int = 32,
    grace: float = 10.0,
    spread: Spread | None = None,
    meter: Meter | None = None,
) -> LoadResult:
    """``rate`` requests/s for ``duration`` seconds, latency from each request's scheduled send time."""
    _check_host(host)
    if rate <= 0:
        raise ValueError("rate must be positive")
    return asyncio.run(_paced(host, port, make, rate, duration, connections, grace, spread, meter))


def wait_ready(host: str, port: int, path: str, *, timeout: float, alive: Callable[[], bool]) -> None:
    """Poll ``GET path`` until it answers 200; ``alive()`` False (the server died) or timeout: error."""
    _check_host(host)
    payload = build_request("GET", path, f"{host}:{port}")

    async def probe() -> int:
        conn = _Connection(host, port)
        try:
            async with asyncio.timeout(2.0):
                return await conn.request(payload)
        finally:
            conn.close()

    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError("the server exited during start-up")
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
            status = asyncio.run(probe())
            if status == 200:
                return
            last = f"HTTP {status}"
        time.sleep(0.1)
    raise RuntimeError(f"server not ready within {timeout:.0f} s ({last})")

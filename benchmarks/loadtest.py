"""A load driver for the beacon: many users and datasets at once, over plain asyncio streams.

Why: the ledger's promise (at most c answers from the data per budget holder and dataset, the same
answer to the same question, nothing lost) must hold under realistic mixed load, not only in the
single-user tests. This driver produces that load and keeps, per response, what it needs to check the
promise afterwards against the ledger (``tests/test_load.py``) and to report throughput
(``benchmarks/bench_load.py``).

Each of ``concurrency`` virtual users acts for one caller (the keys in rotation, so several virtual
users share a key) and sends, one request at a time, a mix of:

* **new single queries**: ``GET /api/methylation`` with a query this caller has not asked before, on
  every visible dataset or on one;
* **new batches**: a ``POST`` of 10-200 new queries (all datasets, one dataset, or a dataset per item);
* **repeats**: earlier answered queries of the same caller, as a ``GET`` or a small batch ``POST``.
  Each must come back ``cached`` with the identical answer.

Once a dataset refuses a caller for lack of budget (a 429, or a ``refused`` result set), the caller
sends no new queries there, as a client that reads its 429s would; repeats still go there.

Each virtual user keeps one keep-alive connection per server URL and sends its requests to the
servers in turn (see :class:`Connection` for why not httpx). Before the load, each key's
visible datasets, budget holders and c come from ``GET /api/budget``. Every response records its
status and latency. Every released result set records, per (budget holder, dataset), the query
``(probeId, minValue, maxValue)`` and ``answeredFrom``. The summary counts, per holder and dataset,
the distinct queries answered from the data and the fresh (uncached) ``data`` answers. If nothing
was lost or spent twice, both equal the ledger account's positives. It also counts any two answers
to one query of one holder that differ.

The run stops at ``duration`` seconds or ``max_requests`` requests, whichever comes first. Requests
still in flight after a grace period are cancelled and counted as ``unfinished``. The driver only
targets loopback addresses unless ``allow_remote`` is given.

Command line (for operators)::

    python -m benchmarks.loadtest --url http://127.0.0.1:8000 --keys-file keys.txt --store data/store \\
        --duration 30 --requests 3000 --concurrency 32 --json load.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import math
import random
import sys
import time
import urllib.parse
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.loadgen import build_request, read_response

Query = tuple[str, float, float]  # (probeId, minValue, maxValue): a query's identity in the cache
API = "/api/methylation"


def check_loopback(url: str, *, allow_remote: bool = False) -> None:
    """Refuse a URL whose host is not a loopback address (a load test must not hit others' servers)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"{url}: give an http:// URL with a host (the driver speaks plain HTTP/1.1)")
    if allow_remote:
        return
    try:
        loopback = ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        loopback = parts.hostname == "localhost"
    if not loopback:
        raise ValueError(f"{url}: not a loopback address; pass allow_remote (--allow-remote) to load it")


class TransportError(Exception):
    """The connection failed, closed early, timed out or sent a response the driver cannot read."""


class Connection:
    """One HTTP/1.1 keep-alive connection to one server, one request at a time (no pipelining).

    Plain asyncio streams rather than an HTTP client library: the driver shares the cores with the
    server it loads, and httpx's ``AsyncClient`` costs several times more CPU per request and slows
    down sharply with many concurrent requests on one pool (encode/httpx#3215), so the run would
    measure the client. The response is read as its header block plus ``Content-Length`` bytes (the
    beacon always sends one).
    """

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.authority = parts.netloc.rpartition("@")[2] or f"{self.host}:{self.port}"  # the Host header
        self.prefix = parts.path.rstrip("/")
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    def build(self, method: str, path: str, *, params: dict[str, Any] | None = None,
              body: Any = None, key: str | None = None) -> bytes:  # fmt: skip
        """The request bytes: ``params`` as the query string, ``body`` as JSON, ``key`` as bearer."""
        target = self.prefix + path + ("?" + urllib.parse.urlencode(params) if params else "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        data = b""
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        return build_request(method, target, self.authority, headers=headers, body=data)

    async def request(self, payload: bytes, timeout: float) -> tuple[int, bytes]:
        """Send one request; its status and body. Any failure closes the connection and raises
        :class:`TransportError`."""
        try:
            async with asyncio.timeout(timeout):
                return await self._exchange(payload)
        except (OSError, EOFError, TimeoutError, ValueError, asyncio.LimitOverrunError) as error:
            self.close()
            raise TransportError(f"{type(error).__name__}: {error}") from None

    async def _exchange(self, payload: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.reader, self.writer
        assert reader is not None
        writer.write(payload)
        await writer.drain()
        status, body, close = await read_response(reader)
        if close:
            self.close()
        return status, body

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


@dataclass(frozen=True)
class Mix:
    """What a virtual user sends next, as shares of its requests (normalised), and batch sizes."""

    single: float = 0.55
    batch: float = 0.15
    repeat: float = 0.30
    batch_min: int = 10
    batch_max: int = 200
    repeat_batch: float = 0.2  # share of repeats sent as a POST of several earlier queries
    all_datasets: float = 0.4  # share of new queries on every open dataset (the rest: on one)
    respect_refusals: bool = True  # once refused on a dataset, a caller sends no new queries there

    def pick(self, rng: random.Random) -> str:
        return rng.choices(("single", "batch", "repeat"), (self.single, self.batch, self.repeat))[0]


@dataclass
class Caller:
    """One key and what ``/api/budget`` says about it."""

    key: str
    name: str
    tier: str
    holders: dict[str, str]  # dataset -> budget holder
    limits: dict[str, int]  # dataset -> c (positivesTotal)


class QuerySource:
    """New queries for one caller: its own shuffle of the pool; each later pass over the pool shifts
    every range by a further 1e-4, so the queries stay new (and keep their character) as long as the
    run lasts."""

    def __init__(self, pool: Sequence[Query], rng: random.Random) -> None:
        if not pool:
            raise ValueError("the query pool is empty")
        self.pool = list(pool)
        rng.shuffle(self.pool)
        self.n = 0

    def next(self) -> Query:
        passes, i = divmod(self.n, len(self.pool))
        self.n += 1
        probe, lo, hi = self.pool[i]
        shift = passes * 1e-4
        if hi + shift > 1.0:
            shift = -min(shift, lo)
        return probe, round(lo + shift, 6), round(hi + shift, 6)


def random_pool(probes: Sequence[str], size: int, seed: int = 0) -> list[Query]:
    """Random range queries on the given probes (for operators who have probe ids and no queries)."""
    rng = random.Random(seed)
    pool = []
    for _ in range(size):
        width = rng.choice((0.01, 0.02, 0.05, 0.1, 0.2, 0.4))
        lo = round(rng.uniform(0.0, 1.0 - width), 4)
        pool.append((rng.choice(probes), lo, round(lo + width, 4)))
    return pool


def contested_ranges(store: Path, prior_name: str, dataset: str) -> list[Query]:
    """Narrow ranges holding >= 5 of the cohort's patients where the prior expects < 0.5: SVT² answers
    these from the data often, so a load of them fights over the budget. Reads the cohort's values,
    so it is for tests and benchmarks on a store of their own, never for a real attack."""
    import itertools

    import numpy as np

    from mbeacon.store.cohorts import CohortStore
    from mbeacon.store.priors import load_prior

    cohort = CohortStore(store).open(dataset)
    prior = load_prior(store, prior_name)
    ids = cohort.probe_ids
    values = cohort.rows(np.arange(len(ids)))
    ranges: list[Query] = []
    for q, width in itertools.product((30, 40, 50, 60, 70), (0.01, 0.02, 0.03)):
        centre = np.nanpercentile(values, q, axis=1)
        lo, hi = np.clip(centre - width / 2, 0, 1), np.clip(centre + width / 2, 0, 1)
        alpha = np.sum((values >= lo[:, None]) & (values <= hi[:, None]), axis=1)
        beta = cohort.n_patients * prior.probability(ids, lo, hi)
        for i in np.flatnonzero((alpha >= 5) & (beta < 0.5)):
            ranges.append((str(ids[i]), round(float(lo[i]), 6), round(float(hi[i]), 6)))
    return ranges


@dataclass
class Tally:
    """What one budget holder received on one dataset."""

    holder: str
    dataset: str
    c: int
    users: set[str] = field(default_factory=set)
    answers: int = 0
    data: set[Query] = field(default_factory=set)  # distinct queries answered from the data
    fresh_data: int = 0  # ``data`` answers not marked cached: each one spent a positive
    cached: int = 0
    refused: int = 0
    exhausted: int = 0  # answered from the prior because the budget is spent
    max_positives_used: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "holder": self.holder,
            "dataset": self.dataset,
            "c": self.c,
            "users": sorted(self.users),
            "answers": self.answers,
            "distinct_data": len(self.data),
            "fresh_data": self.fresh_data,
            "cached": self.cached,
            "refused": self.refused,
            "budget_exhausted": self.exhausted,
            "max_positives_used": self.max_positives_used,
        }


def _percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0-100); NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


class Recorder:
    """Everything the run saw: statuses, latencies, answers per (holder, dataset), repeat checks."""

    def __init__(self, callers: Sequence[Caller]) -> None:
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.statuses: dict[str, Counter[int]] = defaultdict(Counter)
        self.tallies: dict[tuple[str, str], Tally] = {}
        for caller in callers:
            for dataset, holder in caller.holders.items():
                tally = self.tallies.setdefault(
                    (holder, dataset), Tally(holder, dataset, caller.limits[dataset])
                )
                tally.users.add(caller.name)
        self.user_data: dict[tuple[str, str], set[Query]] = defaultdict(set)
        self.first: dict[tuple[str, str, Query], tuple[bool, str]] = {}  # (holder, dataset, query)
        self.answered: dict[str, list[tuple[str, Query]]] = defaultdict(list)  # per user, for repeats
        self.closed: dict[str, set[str]] = defaultdict(set)  # per user: datasets that refused (budget)
        self._answered_seen: set[tuple[str, str, Query]] = set()
        self.inconsistent = 0
        self.repeats_checked = 0
        self.repeat_failures = 0
        self.samples: list[str] = []  # first few problems, for the report
        self.transport_errors = 0
        self.unfinished = 0
        self.answers = 0

    def problem(self, text: str) -> None:
        if len(self.samples) < 10:
            self.samples.append(text)

    def record(self, caller: Caller, kind: str, status: int, latency: float) -> None:
        self.statuses[kind][status] += 1
        self.latencies[kind].append(latency)

    def result_sets(self, caller: Caller, body: dict, repeat_of: list[tuple[str, Query]] | None) -> None:
        """Tally every released result set; for a repeat, check each came back cached and identical."""
        sets = body["response"]["resultSets"]
        self.answers += len(sets)
        for rs in sets:
            dataset, info = rs["id"], rs["info"]
            low, high = info["range"]
            query: Query = (info["probeId"], float(low), float(high))
            source, exists, cached = info["answeredFrom"], bool(rs["exists"]), bool(info["cached"])
            holder = caller.holders[dataset]
            tally = self.tallies[(holder, dataset)]
            tally.answers += 1
            tally.cached += cached
            tally.max_positives_used = max(tally.max_positives_used, int(info.get("positivesUsed", 0)))
            if source == "refused":
                tally.refused += 1
                self.closed[caller.name].add(dataset)
                continue
            tally.exhausted += bool(info.get("budgetExhausted"))
            if source == "data":
                tally.data.add(query)
                self.user_data[(caller.name, dataset)].add(query)
                tally.fresh_data += not cached
            first = self.first.setdefault((holder, dataset, query), (exists, source))
            if first != (exists, source):
                self.inconsistent += 1
                self.problem(f"{holder} {dataset} {query}: {first} then {(exists, source)}")
            if repeat_of is not None:
                self.repeats_checked += 1
                if not cached or first != (exists, source):
                    self.repeat_failures += 1
                    self.problem(f"repeat of {query} on {dataset} by {caller.name}: cached={cached}")
            elif (caller.name, dataset, query) not in self._answered_seen:
                self._answered_seen.add((caller.name, dataset, query))
                self.answered[caller.name].append((dataset, query))
        if repeat_of is not None and len(sets) != len(repeat_of):
            self.repeat_failures += 1
            self.problem(f"repeat of {len(repeat_of)} answers by {caller.name} gave {len(sets)} result sets")

    def summary(self, seconds: float) -> dict[str, Any]:
        every = [x for values in self.latencies.values() for x in values]
        statuses: Counter[int] = sum(self.statuses.values(), Counter())
        requests = sum(statuses.values())
        by_kind = {
            kind: {
                "requests": sum(self.statuses[kind].values()),
                "p50_ms": round(_percentile(values, 50) * 1e3, 2),
                "p99_ms": round(_percentile(values, 99) * 1e3, 2),
                "statuses": {str(k): v for k, v in sorted(self.statuses[kind].items())},
            }
            for kind, values in sorted(self.latencies.items())
        }
        per_user: dict[str, dict[str, int]] = defaultdict(dict)
        for (user, dataset), queries in sorted(self.user_data.items()):
            per_user[user][dataset] = len(queries)
        return {
            "seconds": round(seconds, 3),
            "requests": requests,
            "answers": self.answers,
            "requests_per_s": round(requests / seconds, 1) if seconds > 0 else 0.0,
            "answers_per_s": round(self.answers / seconds, 1) if seconds > 0 else 0.0,
            "p50_ms": round(_percentile(every, 50) * 1e3, 2),
            "p99_ms": round(_percentile(every, 99) * 1e3, 2),
            "max_ms": round(max(every, default=math.nan) * 1e3, 2),
            "statuses": {str(k): v for k, v in sorted(statuses.items())},
            "server_errors": sum(v for k, v in statuses.items() if k >= 500),
            "transport_errors": self.transport_errors,
            "unfinished": self.unfinished,
            "by_kind": by_kind,
            "repeats": {"checked": self.repeats_checked, "failures": self.repeat_failures},
            "inconsistent_answers": self.inconsistent,
            "problems": self.samples,
            "holders": {f"{h}|{d}": t.summary() for (h, d), t in sorted(self.tallies.items())},
            "per_user_data": dict(per_user),
        }


async def discover(url: str, key: str, timeout: float = 30.0) -> Caller:
    """The caller's name, tier, visible datasets, budget holders and c, from ``GET /api/budget``."""
    conn = Connection(url)
    try:
        status, raw = await conn.request(conn.build("GET", "/api/budget", key=key), timeout)
    finally:
        conn.close()
    if status != 200:
        raise ValueError(f"{url}/api/budget answered HTTP {status} for a key: {raw[:200]!r}")
    body = json.loads(raw)["response"]
    budgets = body["budgets"]
    holders = {d: b["budgetHolder"] for d, b in budgets.items()}
    limits = {d: int(b["positivesTotal"]) for d, b in budgets.items()}
    return Caller(key, body["user"], body["tier"], holders, limits)


def _params(query: Query, datasets: list[str] | None) -> dict[str, Any]:
    probe, lo, hi = query
    params: dict[str, Any] = {"probeId": probe, "minValue": lo, "maxValue": hi}
    if datasets:
        params["datasetIds"] = datasets
    return params


def _batch_body(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "meta": {"apiVersion": "v2.0.0"},
        "query": {"requestParameters": items, "includeResultsetResponses": "ALL"},
    }


class _VirtualUser:
    """One client loop: picks the next request from the mix, sends it, records the response. It owns
    one keep-alive connection per server and sends its requests to the servers in turn."""

    def __init__(
        self, index: int, caller: Caller, urls: Sequence[str], source: QuerySource, mix: Mix,
        rec: Recorder, rng: random.Random,
    ) -> None:  # fmt: skip
        self.index, self.caller, self.source = index, caller, source
        self.connections = [Connection(url) for url in urls]
        self.mix, self.rec, self.rng = mix, rec, rng
        self.datasets = sorted(caller.holders)
        self.sent = 0

    def _datasets(self) -> list[str] | None:
        """Every open dataset (None: every visible one) or one of them. A dataset is closed to new
        queries once it refused this caller for lack of budget (with ``Mix.respect_refusals``), as a
        client that reads its 429s would do; repeats still go there (the cache answers them)."""
        closed = self.rec.closed[self.caller.name] if self.mix.respect_refusals else set()
        open_ = [d for d in self.datasets if d not in closed] or self.datasets
        if self.rng.random() < self.mix.all_datasets:
            return None if len(open_) == len(self.datasets) else open_
        return [self.rng.choice(open_)] if open_ else None

    def _next(self) -> tuple[str, str, dict[str, Any] | None, Any, list[tuple[str, Query]] | None]:
        """(kind, method, query-string parameters, JSON body, the repeated (dataset, query) pairs)."""
        kind = self.mix.pick(self.rng)
        earlier = self.rec.answered[self.caller.name]
        if kind == "repeat" and not earlier:
            kind = "single"
        if kind == "single":
            params = _params(self.source.next(), self._datasets())
            if "datasetIds" in params:
                params["datasetIds"] = ",".join(params["datasetIds"])
            return kind, "GET", {**params, "includeResultsetResponses": "ALL"}, None, None
        if kind == "batch":
            size = self.rng.randint(self.mix.batch_min, self.mix.batch_max)
            mode = self.rng.choice(("all", "one", "each"))
            shared = self._datasets() if mode == "one" else None
            items = []
            for _ in range(size):
                datasets = shared if mode != "each" else self._datasets()
                items.append(_params(self.source.next(), datasets))
            return kind, "POST", None, _batch_body(items), None
        if self.rng.random() < self.mix.repeat_batch:
            chosen = self.rng.sample(earlier, min(len(earlier), self.rng.randint(5, 30)))
            items = [_params(q, [d]) for d, q in chosen]  # one dataset per item: one result set each
            return "repeat", "POST", None, _batch_body(items), chosen
        dataset, query = self.rng.choice(earlier)
        params = {**_params(query, None), "datasetIds": dataset, "includeResultsetResponses": "ALL"}
        return "repeat", "GET", params, None, [(dataset, query)]

    async def run(self, deadline: float, budget: list[int], timeout: float) -> None:
        try:
            while time.perf_counter() < deadline and budget[0] > 0:
                budget[0] -= 1
                await self._one(timeout)
        finally:
            for conn in self.connections:
                conn.close()

    async def _one(self, timeout: float) -> None:
        kind, method, params, body, repeat_of = self._next()
        conn = self.connections[(self.index + self.sent) % len(self.connections)]
        self.sent += 1
        payload = conn.build(method, API, params=params, body=body, key=self.caller.key)
        started = time.perf_counter()
        try:
            status, raw = await conn.request(payload, timeout)
        except TransportError as error:
            self.rec.transport_errors += 1
            self.rec.problem(f"{kind} {method}: {error}")
            await asyncio.sleep(0.05)  # a refused connection must not become a busy loop
            return
        self.rec.record(self.caller, kind, status, time.perf_counter() - started)
        if status == 200:
            self.rec.result_sets(self.caller, json.loads(raw), repeat_of)
        elif repeat_of is not None:
            self.rec.repeat_failures += 1
            self.rec.problem(f"repeat by {self.caller.name} got HTTP {status}: {raw[:200]!r}")
        elif status == 429:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                self.rec.closed[self.caller.name].add(json.loads(raw)["info"]["dataset"])
        else:
            self.rec.problem(f"{kind} {method} HTTP {status}: {raw[:300]!r}")


@dataclass
class LoadReport:
    """The summary of one run (plain numbers, see :meth:`Recorder.summary`) and its callers."""

    summary: dict[str, Any]
    callers: list[Caller]

    def lines(self) -> list[str]:
        """A short human-readable report."""
        s = self.summary
        out = [
            f"{s['requests']} requests, {s['answers']} answers in {s['seconds']:.1f} s: "
            f"{s['requests_per_s']:.1f} requests/s, {s['answers_per_s']:.0f} answers/s; "
            f"p50 {s['p50_ms']:.1f} ms, p99 {s['p99_ms']:.1f} ms, max {s['max_ms']:.1f} ms",
            f"statuses {s['statuses']}; transport errors {s['transport_errors']}, "
            f"unfinished {s['unfinished']}; repeats checked {s['repeats']['checked']}, "
            f"failures {s['repeats']['failures']}; inconsistent answers {s['inconsistent_answers']}",
        ]
        for kind, k in s["by_kind"].items():
            out.append(f"  {kind:6} {k['requests']:6} requests, p50 {k['p50_ms']} ms, p99 {k['p99_ms']} ms, "
                       f"statuses {k['statuses']}")  # fmt: skip
        by_dataset: dict[str, list[dict]] = defaultdict(list)
        for tally in s["holders"].values():
            by_dataset[tally["dataset"]].append(tally)
        for dataset, tallies in sorted(by_dataset.items()):
            counts = [t["distinct_data"] for t in tallies]
            full = sum(t["distinct_data"] == t["c"] for t in tallies)
            limits = ", ".join(
                f"{c} ({n} holders)" for c, n in sorted(Counter(t["c"] for t in tallies).items())
            )
            out.append(
                f"  {dataset}: c = {limits}, data answers per holder "
                f"min {min(counts)} max {max(counts)} (at c: {full}), "
                f"answers {sum(t['answers'] for t in tallies)}, "
                f"budgetExhausted {sum(t['budget_exhausted'] for t in tallies)}, "
                f"refused {sum(t['refused'] for t in tallies)}"
            )
        out += [f"  problem: {p}" for p in s["problems"]]
        return out


async def _run(
    urls: Sequence[str], keys: Sequence[str], pool: Sequence[Query], *, duration: float, max_requests: int,
    concurrency: int, mix: Mix, timeout: float, grace: float, seed: int,
) -> LoadReport:  # fmt: skip
    callers = list(await asyncio.gather(*(discover(urls[0], key, timeout) for key in keys)))
    rec = Recorder(callers)
    rng = random.Random(seed)
    sources = {c.name: QuerySource(pool, random.Random(rng.random())) for c in callers}
    users = []
    for i in range(concurrency):
        caller = callers[i % len(callers)]
        users.append(
            _VirtualUser(i, caller, urls, sources[caller.name], mix, rec, random.Random(rng.random()))
        )
    start = time.perf_counter()
    budget = [max_requests]
    tasks = [asyncio.create_task(u.run(start + duration, budget, timeout)) for u in users]
    _, pending = await asyncio.wait(tasks, timeout=duration + grace)
    for task in pending:  # a request still waiting after the grace period
        task.cancel()
        rec.unfinished += 1
    await asyncio.gather(*pending, return_exceptions=True)
    return LoadReport(rec.summary(time.perf_counter() - start), callers)


def run_load(
    urls: Sequence[str],
    keys: Sequence[str],
    pool: Sequence[Query],
    *,
    duration: float = 30.0,
    max_requests: int = 3000,
    concurrency: int = 32,
    mix: Mix = Mix(),
    timeout: float = 60.0,
    grace: float = 30.0,
    seed: int = 0,
    allow_remote: bool = False,
) -> LoadReport:
    """Run the mixed load (bounded by ``duration`` seconds and ``max_requests``) and summarise it."""
    if not urls or not keys:
        raise ValueError("give at least one URL and one key")
    if duration <= 0 or max_requests <= 0 or concurrency <= 0:
        raise ValueError("duration, max_requests and concurrency must be positive")
    for url in urls:
        check_loopback(url, allow_remote=allow_remote)
    return asyncio.run(
        _run(
            urls,
            keys,
            pool,
            duration=duration,
            max_requests=max_requests,
            concurrency=concurrency,
            mix=mix,
            timeout=timeout,
            grace=grace,
            seed=seed,
        )
    )


async def _baseline(
    urls: Sequence[str], path: str, duration: float, max_requests: int, concurrency: int, timeout: float
) -> dict[str, Any]:
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    errors = [0]
    start = time.perf_counter()
    deadline, budget = start + duration, [max_requests]

    async def loop(index: int) -> None:
        connections = [Connection(url) for url in urls]
        payloads = [conn.build("GET", path) for conn in connections]
        sent = 0
        try:
            while time.perf_counter() < deadline and budget[0] > 0:
                budget[0] -= 1
                at = (index + sent) % len(connections)
                sent += 1
                began = time.perf_counter()
                try:
                    status, _ = await connections[at].request(payloads[at], timeout)
                except TransportError:
                    errors[0] += 1
                    await asyncio.sleep(0.05)
                    continue
                latencies.append(time.perf_counter() - began)
                statuses[status] += 1
        finally:
            for conn in connections:
                conn.close()

    await asyncio.wait_for(asyncio.gather(*(loop(i) for i in range(concurrency))), duration + timeout)
    elapsed = time.perf_counter() - start
    return {
        "path": path,
        "seconds": round(elapsed, 3),
        "requests": len(latencies),
        "requests_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(_percentile(latencies, 50) * 1e3, 2),
        "p99_ms": round(_percentile(latencies, 99) * 1e3, 2),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "transport_errors": errors[0],
    }


def run_baseline(
    urls: Sequence[str], path: str = "/livez", *, duration: float = 10.0, max_requests: int = 100_000,
    concurrency: int = 32, timeout: float = 30.0, allow_remote: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """The same client, connections and concurrency on a trivial endpoint: the side-by-side ceiling."""
    for url in urls:
        check_loopback(url, allow_remote=allow_remote)
    return asyncio.run(_baseline(urls, path, duration, max_requests, concurrency, timeout))


# --- command line --------------------------------------------------------------------------------


def _read_keys(path: Path) -> list[str]:
    keys = [line.strip() for line in path.read_text().splitlines()]
    return [k for k in keys if k and not k.startswith("#")]


def _read_pool(args: argparse.Namespace) -> list[Query]:
    if args.queries_file:
        items = json.loads(args.queries_file.read_text())
        return [(q["probeId"], float(q.get("minValue", 0.0)), float(q.get("maxValue", 1.0))) for q in items]
    if args.probes_file:
        probes = [p.strip() for p in args.probes_file.read_text().splitlines() if p.strip()]
    else:
        from mbeacon.store.cohorts import CohortStore
        from mbeacon.store.errors import DataError

        try:
            store = CohortStore(args.store)
            probes = sorted({str(p) for d in store.ids() for p in store.open(d).probe_ids})
        except DataError as error:
            raise ValueError(str(error)) from None
    if not probes:
        raise ValueError("no probe ids to query")
    return random_pool(probes, args.pool, args.seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.loadtest",
        description="Mixed load on a beacon (new single queries, batches, cached repeats) from many "
        "keys at once; bounded in requests and time; loopback only unless --allow-remote. Prints "
        "requests/s, p50/p99 and, per budget holder and dataset, the answers released from the data.",
    )
    parser.add_argument("--url", action="append", required=True, help="server base URL (repeatable)")
    parser.add_argument("--keys-file", type=Path, required=True, help="researcher keys, one per line")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--queries-file", type=Path, help="JSON list of {probeId, minValue, maxValue}")
    source.add_argument("--probes-file", type=Path, help="probe ids, one per line (random ranges)")
    source.add_argument("--store", type=Path, help="a local store: its probe ids (random ranges)")
    parser.add_argument("--pool", type=int, default=2000, help="random queries to draw (default 2000)")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds (default 30)")
    parser.add_argument("--requests", type=int, default=3000, help="at most this many (default 3000)")
    parser.add_argument("--concurrency", type=int, default=32, help="virtual users (default 32)")
    parser.add_argument("--timeout", type=float, default=60.0, help="per request, seconds (default 60)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the summary here")
    parser.add_argument("--allow-remote", action="store_true", help="allow a non-loopback URL")
    args = parser.parse_args(argv)
    try:
        for url in args.url:
            check_loopback(url, allow_remote=args.allow_remote)
        keys, pool = _read_keys(args.keys_file), _read_pool(args)
    except (OSError, ValueError, KeyError, TypeError) as error:
        parser.error(f"{type(error).__name__}: {error}")
    try:
        report = run_load(
            args.url, keys, pool, duration=args.duration, max_requests=args.requests,
            concurrency=args.concurrency, timeout=args.timeout, seed=args.seed,
            allow_remote=args.allow_remote,
        )  # fmt: skip
    except (ValueError, TransportError) as error:  # a bad key, a server that does not answer
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("\n".join(report.lines()))
    if args.json:
        args.json.write_text(json.dumps(report.summary, indent=2) + "\n")
    s = report.summary
    return 1 if s["server_errors"] or s["transport_errors"] or s["unfinished"] else 0


if __name__ == "__main__":
    sys.exit(main())

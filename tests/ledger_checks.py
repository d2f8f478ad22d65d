"""Shared checks of the privacy ledger against what clients of a real server received.

Used by the fault-injection tests (``test_faults.py``): contested queries (where SVT² spends positives
often, so the budget is fought over), one query over HTTP, a load of client threads that records
every outcome, and the ledger invariants whose failure would be a privacy breach (an overspend, an
answer released but not committed, cache and audit rows out of step).
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from benchmarks.loadtest import contested_ranges
from mbeacon.beacon.ledger import Ledger

DATASET = "demo-cohort"
LOST = -1  # status recorded when the connection died (a killed worker or master): no answer received


def contested_queries(store: Path, prior_name: str, dataset: str = DATASET) -> list[dict]:
    """Distinct narrow ranges holding >= 5 patients where the prior expects < 0.5 of the cohort."""
    return [{"probeId": probe, "minValue": lo, "maxValue": hi}
            for probe, lo, hi in contested_ranges(store, prior_name, dataset)]  # fmt: skip


def query_key(query: dict) -> tuple:
    return tuple(sorted(query.items()))


@dataclass
class Outcome:
    """One request as the client saw it."""

    user: str
    query: dict
    status: int  # LOST when the connection died
    result: dict | None = None  # the dataset's result set of a 200
    body: dict | None = None  # the JSON body of any other answer
    retry_after: str | None = None
    sent: float = 0.0  # time.monotonic() before sending


def ask(url: str, key: str, query: dict, user: str = "alice", timeout: float = 60.0) -> Outcome:
    """One GET query; a dropped connection is recorded as LOST, never raised."""
    params = {**query, "includeResultsetResponses": "ALL"}
    sent = time.monotonic()
    try:
        response = httpx.get(f"{url}/api/methylation", params=params,
                             headers={"Authorization": f"Bearer {key}"}, timeout=timeout)  # fmt: skip
    except httpx.TransportError:
        return Outcome(user, query, LOST, sent=sent)
    outcome = Outcome(user, query, response.status_code, sent=sent)
    if response.status_code == 200:
        (outcome.result,) = response.json()["response"]["resultSets"]
    else:
        outcome.retry_after = response.headers.get("Retry-After")
        try:
            outcome.body = response.json()
        except ValueError:
            outcome.body = {"raw": response.text[:500]}
    return outcome


class QuerySupply:
    """New queries, thread-safe: the contested ones first, then random narrow ranges (mostly free)."""

    def __init__(self, contested: list[dict], probe_ids: list[str], seed: int = 7) -> None:
        self._contested = iter(contested)
        self._probes = probe_ids
        self._random = random.Random(seed)
        self._seen: set[tuple] = set()
        self._lock = threading.Lock()

    def new(self) -> dict:
        with self._lock:
            for query in self._contested:
                if query_key(query) not in self._seen:
                    self._seen.add(query_key(query))
                    return query
            while True:
                lo = round(self._random.uniform(0.0, 0.9), 4)
                query = {"probeId": self._random.choice(self._probes), "minValue": lo,
                         "maxValue": round(lo + 0.05, 4)}  # fmt: skip
                if query_key(query) not in self._seen:
                    self._seen.add(query_key(query))
                    return query


@dataclass
class Load:
    """Client threads asking new and repeated queries of one server until stopped."""

    url: str
    keys: dict[str, str]  # user -> key; client n asks as user n % len(keys)
    supply: QuerySupply
    clients: int = 12
    repeat_share: float = 0.4
    outcomes: list[Outcome] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._answered: dict[str, list[dict]] = {user: [] for user in self.keys}

    def _client(self, n: int) -> None:
        users = sorted(self.keys)
        user = users[n % len(users)]
        rng = random.Random(n)
        while not self._stop.is_set():
            with self._lock:
                answered = self._answered[user]
                query = rng.choice(answered) if answered and rng.random() < self.repeat_share else None
            outcome = ask(self.url, self.keys[user], query or self.supply.new(), user)
            with self._lock:
                self.outcomes.append(outcome)
                if outcome.status == 200 and query is None:
                    self._answered[user].append(outcome.query)
            if outcome.status == LOST:
                time.sleep(0.05)  # the server is gone or restarting: do not spin

    def start(self, url: str | None = None) -> Load:
        self.url = url or self.url
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._client, args=(n,), daemon=True) for n in range(self.clients)
        ]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)
            assert not thread.is_alive(), "a client thread hung"


def received_answers(outcomes: list[Outcome]) -> dict[tuple[str, tuple], list[dict]]:
    """(user, query) -> every result set a client received for it."""
    found: dict[tuple[str, tuple], list[dict]] = {}
    for o in outcomes:
        if o.status == 200:
            found.setdefault((o.user, query_key(o.query)), []).append(o.result)
    return found


def answer_of(result: dict) -> tuple:
    return result["exists"], result["info"]["answeredFrom"]


@dataclass(frozen=True)
class LedgerCounts:
    answers: int  # cached answer rows
    fresh_audit: int  # audit rows of queries answered afresh
    data_answers: int  # cached answers that came from the data (each spent one positive)
    positives: int  # positives spent over all accounts


def ledger_counts(ledger: Ledger) -> LedgerCounts:
    one = ledger.db.fetch_one
    return LedgerCounts(
        one("SELECT COUNT(*) FROM answers")[0],
        one("SELECT COUNT(*) FROM audit_log WHERE event = 'query' AND cached = 0")[0],
        one("SELECT COUNT(*) FROM answers WHERE answered_from = 'data'")[0],
        one("SELECT COALESCE(SUM(positives), 0) FROM accounts")[0],
    )


def check_ledger(ledger: Ledger, outcomes: list[Outcome], users: list[str], c: int) -> LedgerCounts:
    """The invariants whose failure is a privacy breach; raises AssertionError naming the one broken."""
    received = received_answers(outcomes)
    for (user, query), results in received.items():
        assert len({answer_of(r) for r in results}) == 1, f"{user} got different answers to {query}"
    for user in users:
        account = ledger.account(f"user:{user}", DATASET)
        data = sum(answer_of(rs[0])[1] == "data" for (u, _), rs in received.items() if u == user)
        if account is None:
            assert data == 0, f"{user} received data answers but has no account"
            continue
        assert account.state.count <= c, f"{user} overspent: {account.state.count} positives > c = {c}"
        assert account.epsilon_spent() <= account.params.epsilon + 1e-12, f"{user} overspent epsilon"
        assert data <= account.state.count, f"{user}: a delivered data answer is missing from the ledger"
    counts = ledger_counts(ledger)
    assert counts.answers == counts.fresh_audit, f"cache and audit log out of step: {counts}"
    assert counts.data_answers == counts.positives, f"a spent positive without its cached answer: {counts}"
    return counts


def check_reasked(url: str, keys: dict[str, str], outcomes: list[Outcome], limit: int | None = None) -> int:
    """Ask received answers again: each must come back identical and from the cache (it was committed)."""
    received = sorted(received_answers(outcomes).items(), key=lambda item: repr(item[0]))
    if limit is not None and len(received) > limit:
        received = random.Random(len(received)).sample(received, limit)
    for (user, query), results in received:
        again = ask(url, keys[user], dict(query), user)
        assert again.status == 200, f"re-asking {query} gave {again.status}: {again.body}"
        assert again.result["info"]["cached"] is True, f"{query} was answered but not committed"
        assert answer_of(again.result) == answer_of(results[0]), f"{query} changed its answer"
    return len(received)


def pmw_updates(url: str, holder: str, dataset: str = DATASET) -> list[tuple]:
    """The ``online-pmw`` histogram updates of one account, ``(seq, probe, lo, hi, value)`` by seq."""
    ledger = Ledger.open(url, migrate=False)
    try:
        with ledger.db.transaction(write=False) as tx:
            tx.execute("SELECT seq, probe, lo, hi, value FROM pmw_updates WHERE principal = ? AND dataset = ?"
                       " ORDER BY seq", (holder, dataset))  # fmt: skip
            return [tuple(row) for row in tx.fetchall()]
    finally:
        ledger.close()

"""A store and a real beacon for the tests of what counts as one question
(``test_equivalent_questions.py``) and of questions that are refused before they cost anything
(``test_nonsense_refused.py``).

The store holds the demo cohort and two cohorts of the demo's first :data:`SHARED_PROBES` probes (the
same patients): ``second-cohort`` without probe positions, and ``positioned-cohort`` with a manifest,
so a query by ``referenceName`` + ``start`` can resolve (the demo cohort is located by its made-up
platform annotation). The server is ``mbeacon
serve`` (gunicorn) on a SQLite ledger that the test reads directly.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
from servers import BeaconServer, write_config

from mbeacon.beacon.ledger import Ledger
from mbeacon.store.cohorts import CohortStore, Manifest
from mbeacon.store.demo import DEMO_DATASET, ensure_demo

DEMO = DEMO_DATASET
SECOND = "second-cohort"
POSITIONED = "positioned-cohort"
SHARED_PROBES = 50
CHROMOSOME = "chr7"


def position_of(row: int) -> int:
    """The 1-based manifest position given to the positioned cohort's probe of ``row``."""
    return 1_000 + 10 * row


@dataclass(frozen=True)
class Store:
    root: Path
    prior: str
    shared: list[str]  # the probes of every cohort
    demo_only: list[str]  # probes of the demo cohort that the other two lack


def build_store(base: Path, target: Path) -> Store:
    """The demo store (built once under ``base``) copied to ``target``, plus the two small cohorts."""
    demo = ensure_demo(base / "demo-store")
    shutil.copytree(demo.store, target)
    cohorts = CohortStore(target)
    source = cohorts.open(DEMO)
    ids = source.probe_ids.tolist()
    values = source.rows(np.arange(SHARED_PROBES))
    shared = ids[:SHARED_PROBES]
    # the same probes in the reverse row order: a cohort file of its own (the service refuses one file
    # served under two ids with per-holder budgets), with sample ids of its own: the cohorts stand for
    # other patients (the service refuses two files that hold the same samples)
    cohorts.write(SECOND, [f"{SECOND}-{s}" for s in source.sample_ids.astype(str).tolist()],
                  [(shared[::-1], values[::-1])])  # fmt: skip
    manifest = Manifest(
        np.array(shared, dtype="S64"),
        np.array([CHROMOSOME] * SHARED_PROBES, dtype="S64"),
        np.array([position_of(i) for i in range(SHARED_PROBES)], dtype=np.int64),
    )
    samples = [f"{POSITIONED}-{s}" for s in source.sample_ids.astype(str).tolist()]
    cohorts.write(POSITIONED, samples, [(shared, values)], manifest=manifest)
    return Store(target, demo.prior, shared, ids[SHARED_PROBES:])


@contextmanager
def running_server(store: Store, workdir: Path, policy: dict) -> Iterator[tuple[BeaconServer, str]]:
    """A running beacon on ``store`` (every dataset under ``policy``) and its ledger's URL; stopped
    when the block ends."""
    url = f"sqlite:///{workdir}/ledger.sqlite3"
    Ledger.open(url).close()  # created before the server, so the test may add users to it
    settings = {"store": str(store.root), "database_url": url, "default_prior": store.prior,
                "rate_limit_per_minute": 0}  # fmt: skip
    config = write_config(workdir / "beacon.toml", settings, policy)
    for attempt in range(3):  # another process may take the free port before gunicorn binds it
        server = BeaconServer(config, workdir, workers=2, threads=2)
        try:
            server.start()
            break
        except RuntimeError:
            server.stop()
            if attempt == 2:
                raise
    try:
        yield server, url
    finally:
        server.stop()


def add_user(url: str, name: str) -> str:
    ledger = Ledger.open(url)
    try:
        return ledger.add_user(name)
    finally:
        ledger.close()


def ledger_state(url: str) -> tuple[list, list]:
    """Everything a request may spend or record: each account (state, budget, cached answers) and
    the audit log."""
    ledger = Ledger.open(url)
    try:
        accounts = sorted(
            (a.principal, a.dataset, answers, repr(a.state), json.dumps(a.budget(), sort_keys=True))
            for a, answers in ledger.accounts_and_answers()
        )
        return accounts, ledger.audit_log(limit=100_000)
    finally:
        ledger.close()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def body(params: dict | list, **query: object) -> dict:
    return {"meta": {"apiVersion": "v2.0.0"},
            "query": {"requestParameters": params, "includeResultsetResponses": "ALL", **query}}  # fmt: skip


def get(server: BeaconServer, key: str, params: dict | str) -> httpx.Response:
    """A GET query (``params`` a dict, or a query string sent verbatim)."""
    url = f"{server.url}/api/methylation"
    if isinstance(params, str):
        return httpx.get(f"{url}?{params}&includeResultsetResponses=ALL", headers=bearer(key), timeout=30)
    return httpx.get(
        url, params={**params, "includeResultsetResponses": "ALL"}, headers=bearer(key), timeout=30
    )


def post(server: BeaconServer, key: str, params: dict | list) -> httpx.Response:
    return httpx.post(f"{server.url}/api/methylation", json=body(params), headers=bearer(key), timeout=60)

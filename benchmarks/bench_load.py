"""Mixed load: many users and datasets at once against a real ``mbeacon serve`` (gunicorn).

Why: the service group measures one path at a time (single queries, or batches) for one dataset. This
group measures the mix a deployed beacon sees and checks, after the run, that the privacy ledger held.
The mix is new single queries, batches of 10-200, and repeats served from the answer cache, from 16
users of two tiers on three datasets with different policies (:data:`DATASETS`).

The scenario (:func:`prepare`, shared with ``tests/test_load.py``):

* the demo store (``ensure_demo``: 2,000 probes x 60 patients) plus two cohorts derived from it:
  ``lab-cohort`` (the first 40 patients, values jittered) and ``controlled-cohort`` (the last 30);
* policies: ``demo-cohort`` c = 40, ``on_exhausted = "prior"``, per user; ``lab-cohort`` c = 10,
  refuse, shared per group (4 groups of 4 users); ``controlled-cohort`` c = 3, refuse, redraw, tier
  CONTROLLED (every third user is CONTROLLED); four users have an operator override of c = 5,000 on
  ``demo-cohort``, so some accounts are still in mid-budget at the end;
* the query pool: ranges where the demo cohort disagrees with the prior (several patients where the
  prior expects under half of one), so SVT² answers from the data often and budgets run out during
  the run, plus random ranges.

Rows (no targets set by the issues; ``info``):

* **mixed requests/s**: the load driver (``benchmarks/loadtest.py``, httpx, 32 virtual users) for D
  seconds. Baseline: the same driver with the same connections and concurrency on ``GET /livez`` of
  the same server, measured just before and just after (mean). The note gives answers/s, the status
  histogram and whether the ledger agreed with what the clients received.
* **mixed p99**: the p99 latency of the mixed requests. Baseline: the p99 of ``/livez``.

Server: 4 workers x 2 threads (``tests/servers.py``'s default threads), a SQLite ledger, no rate
limit. The driver and the server share the machine's cores.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import loadtest
from benchmarks.common import Result, speed_ratio

WORKERS = 4
THREADS = 2
USERS = 16
GENEROUS = 4  # users with a larger budget on the first dataset (an operator override)
GENEROUS_C = 5000
CONCURRENCY = 32


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset of the scenario and its policy table."""

    id: str
    patients: slice  # which of the demo cohort's patients it holds
    jitter: float  # standard deviation of the noise added to the demo's values
    policy: dict[str, Any]


DATASETS = (
    DatasetSpec(
        "demo-cohort",
        slice(0, 60),
        0.0,
        {"c": 40, "on_exhausted": "prior", "scope": "user", "tier": "REGISTERED"},
    ),
    DatasetSpec(
        "lab-cohort",
        slice(0, 40),
        0.005,
        {"c": 10, "on_exhausted": "refuse", "scope": "group", "tier": "REGISTERED"},
    ),
    DatasetSpec(
        "controlled-cohort",
        slice(30, 60),
        0.0,
        {"c": 3, "on_exhausted": "refuse", "scope": "user", "tier": "CONTROLLED", "variant": "redraw"},
    ),
)
DEFAULTS = {
    "mechanism": "svt2",
    "epsilon": 20.0,
    "c": 5,
    "threshold": 1,
    "variant": "single",
    "on_exhausted": "refuse",
}


@dataclass(frozen=True)
class Scenario:
    """Everything a load run needs: the config file, the ledger URL, the users' keys, the query pool."""

    store: Path
    config: Path
    database_url: str
    keys: list[str]
    users: dict[str, dict[str, str | None]]  # name -> tier and group
    pool: list[loadtest.Query]


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def build_store(root: Path) -> tuple[Path, str]:
    """The demo store copied under ``root`` plus the derived cohorts of :data:`DATASETS`; (store, prior)."""
    from mbeacon.store.cohorts import CohortStore
    from mbeacon.store.demo import DEMO_DATASET, ensure_demo

    demo = ensure_demo(root / "demo")
    store = CohortStore(demo.store)
    source = store.open(DEMO_DATASET)
    ids = source.probe_ids.tolist()
    values = source.rows(np.arange(len(ids)))
    samples = source.sample_ids.astype(str).tolist()
    rng = np.random.default_rng(6)
    for spec in DATASETS:
        if spec.id == DEMO_DATASET or spec.id in store.ids():
            continue
        part = values[:, spec.patients].astype(np.float64)
        if spec.jitter:
            part = np.clip(part + rng.normal(0.0, spec.jitter, part.shape), 0.0, 1.0)
        # sample ids of its own: the scenario's cohorts stand for other patients (the service refuses
        # two files that hold the same samples)
        own = [f"{spec.id}-{sample}" for sample in samples[spec.patients]]
        store.write(spec.id, own, [(ids, part.astype(np.float32))])
    return demo.store, demo.prior


def contested_pool(store: Path, prior_name: str, extra: int = 300, seed: int = 7) -> list[loadtest.Query]:
    """The demo cohort's contested ranges (``loadtest.contested_ranges``), then ``extra`` random ranges."""
    from mbeacon.store.cohorts import CohortStore
    from mbeacon.store.demo import DEMO_DATASET

    pool = loadtest.contested_ranges(store, prior_name, DEMO_DATASET)
    ids = CohortStore(store).open(DEMO_DATASET).probe_ids
    return pool + loadtest.random_pool([str(p) for p in ids], extra, seed)


def write_config(path: Path, store: Path, prior: str, database_url: str) -> Path:
    """The service config: top-level settings, ``[defaults]`` and one table per dataset."""
    settings = {"store": str(store), "database_url": database_url, "default_prior": prior,
                "rate_limit_per_minute": 0, "environment": "test"}  # fmt: skip
    lines = [f"{k} = {_toml(v)}" for k, v in settings.items()]
    lines += ["", "[defaults]"] + [f"{k} = {_toml(v)}" for k, v in DEFAULTS.items()]
    for spec in DATASETS:
        lines += ["", f"[datasets.{spec.id}]"] + [f"{k} = {_toml(v)}" for k, v in spec.policy.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def add_users(
    database_url: str, users: int = USERS, *, generous: int = GENEROUS
) -> tuple[list[str], dict[str, dict[str, str | None]]]:
    """``users`` researchers, every third CONTROLLED, the rest REGISTERED, in 4 groups; their keys.

    The last ``generous`` users get an operator override of c = :data:`GENEROUS_C` on the first
    dataset, so their budgets there last the run and the ledger's count is checked in mid-budget too,
    not only at c."""
    from mbeacon.beacon.config import dataset_policy
    from mbeacon.beacon.ledger import Ledger
    from mbeacon.beacon.sanitisers import account_params

    first = DATASETS[0]
    params = account_params(dataset_policy(**{**DEFAULTS, **first.policy, "c": GENEROUS_C}))
    ledger = Ledger.open(database_url)
    keys, who = [], {}
    try:
        for i in range(users):
            name, tier, group = f"u{i:02d}", "CONTROLLED" if i % 3 == 0 else "REGISTERED", f"lab{i % 4}"
            keys.append(ledger.add_user(name, tier=tier, group=group, actor="loadtest"))
            who[name] = {"tier": tier, "group": group}
            if i >= users - generous:
                ledger.set_override(f"user:{name}", first.id, params, actor="loadtest")
    finally:
        ledger.close()
    return keys, who


def prepare(root: Path, database_url: str, *, users: int = USERS) -> Scenario:
    """Store, config, users and query pool of the load scenario under ``root``."""
    store, prior = build_store(root)
    config = write_config(root / "load.toml", store, prior, database_url)
    keys, who = add_users(database_url, users)
    return Scenario(store, config, database_url, keys, who, contested_pool(store, prior))


def ledger_accounts(database_url: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (holder, dataset): the account's positives, c, epsilon spent and promised, and the number
    of cached ``data`` answers (each spent positive must have one)."""
    from mbeacon.beacon.ledger import Ledger

    ledger = Ledger.open(database_url, migrate=False)
    try:
        with ledger.db.transaction(write=False) as tx:
            tx.execute(
                "SELECT principal, dataset, COUNT(*) FROM answers WHERE answered_from = 'data'"
                " GROUP BY principal, dataset"
            )
            cached = {(p, d): n for p, d, n in tx.fetchall()}
        return {
            (a.principal, a.dataset): {
                "positives": a.state.count,
                "c": a.params.c,
                "epsilon_spent": a.epsilon_spent(),
                "epsilon": a.params.epsilon,
                "cached_data": cached.get((a.principal, a.dataset), 0),
            }
            for a in ledger.accounts()
        }
    finally:
        ledger.close()


def compare(summary: dict[str, Any], accounts: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """Every disagreement between what the clients received and the ledger (empty: they agree)."""
    problems = []
    received = {(t["holder"], t["dataset"]): t for t in summary["holders"].values()}
    for key in sorted(set(received) | set(accounts)):
        tally = received.get(key, {"distinct_data": 0, "fresh_data": 0})
        account = accounts.get(key, {"positives": 0, "c": None, "cached_data": 0})
        counts = (tally["distinct_data"], tally["fresh_data"], account["positives"], account["cached_data"])
        if len(set(counts)) != 1:
            problems.append(f"{key}: distinct data {counts[0]}, fresh data {counts[1]}, ledger positives "
                            f"{counts[2]}, cached data answers {counts[3]}")  # fmt: skip
        if account["c"] is not None and account["positives"] > account["c"]:
            problems.append(f"{key}: {account['positives']} positives > c = {account['c']}")
    return problems


# --- the benchmark group -------------------------------------------------------------------------


def measure(scenario: Scenario, workdir: Path, *, seconds: float, baseline_seconds: float) -> dict[str, Any]:
    """``/livez``, the mixed load, ``/livez`` again on one server; then the ledger comparison."""
    from benchmarks.bench_service import Server

    with Server(scenario.config, workdir, workers=WORKERS, threads=THREADS) as server:
        url = f"http://127.0.0.1:{server.port}"
        loadtest.run_baseline([url], duration=1.0, concurrency=CONCURRENCY)  # warm the connections
        before = loadtest.run_baseline([url], duration=baseline_seconds, concurrency=CONCURRENCY)
        load = loadtest.run_load([url], scenario.keys, scenario.pool, duration=seconds,
                                 max_requests=1_000_000, concurrency=CONCURRENCY)  # fmt: skip
        after = loadtest.run_baseline([url], duration=baseline_seconds, concurrency=CONCURRENCY)
    problems = compare(load.summary, ledger_accounts(scenario.database_url))
    return {"load": load.summary, "livez": [before, after], "ledger_problems": problems}


def results(f: dict[str, Any], quick: bool) -> list[Result]:
    s, livez = f["load"], f["livez"]
    livez_rps = statistics.mean(x["requests_per_s"] for x in livez)
    livez_p99 = statistics.mean(x["p99_ms"] for x in livez)
    at_c = sum(t["distinct_data"] == t["c"] for t in s["holders"].values())
    agree = "agrees" if not f["ledger_problems"] else f"DISAGREES ({'; '.join(f['ledger_problems'][:3])})"
    common = (
        f"{USERS} users, {len(DATASETS)} datasets (c = "
        f"{', '.join(str(d.policy['c']) for d in DATASETS)}), {CONCURRENCY} virtual users, "
        f"{WORKERS}x{THREADS} gunicorn, SQLite ledger; {s['seconds']:.0f} s" + (" (--quick)" if quick else "")
    )
    detail = {**f, "error": bool(f["ledger_problems"]) or s["server_errors"] > 0}
    return [
        Result(
            "load: mixed requests/s (single, batch 10-200, repeats) vs /livez",
            s["requests_per_s"],
            livez_rps,
            "requests/s",
            speed_ratio(s["requests_per_s"], livez_rps, "/s"),
            "",
            None,
            baseline_name="the same driver and concurrency on GET /livez of the same server, before + after",
            note=(
                f"{common}. {s['requests']} requests, {s['answers_per_s']:,.0f} answers/s; statuses "
                f"{s['statuses']}; repeats checked {s['repeats']['checked']} (failures "
                f"{s['repeats']['failures']}); holders at c: {at_c} of {len(s['holders'])}; the ledger "
                f"{agree} with the clients."
            ),
            detail=detail,
        ),
        Result(
            "load: mixed p99 latency",
            s["p99_ms"],
            livez_p99,
            "ms",
            speed_ratio(s["p99_ms"], livez_p99, "ms"),
            "",
            None,
            baseline_name="p99 of GET /livez under the same driver and concurrency",
            note=f"p50 {s['p50_ms']} ms; per kind: "
            + ", ".join(f"{k} p99 {v['p99_ms']} ms" for k, v in s["by_kind"].items()),
        ),
    ]


def run(quick: bool) -> list[Result]:
    from benchmarks.bench_service import sigterm_unwinds

    seconds, baseline_seconds = (4.0, 1.5) if quick else (30.0, 8.0)
    with sigterm_unwinds(), tempfile.TemporaryDirectory(prefix="mbeacon-bench-load-") as tmp:
        root = Path(tmp)
        scenario = prepare(root, f"sqlite:///{root}/ledger.sqlite3")
        figures = measure(scenario, root, seconds=seconds, baseline_seconds=baseline_seconds)
    return results(figures, quick)


if __name__ == "__main__":
    from benchmarks.common import machine_info, print_table

    print_table(run("--quick" in sys.argv), machine_info(), title="mbeacon benchmarks: load")

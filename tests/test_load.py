"""Load and concurrency (issue 6): many users and datasets at once against real gunicorn servers.

The scenario is ``benchmarks.bench_load``'s: 16 users (every third CONTROLLED, four groups) on three
datasets with different policies (c = 40 with answers from the prior once spent; c = 10 shared per
group, refusing; c = 3 CONTROLLED-only, refusing, redraw). ``benchmarks.loadtest`` drives 32
virtual users at once: new single GETs, batch POSTs of 10-200 queries, and repeats of earlier
queries. The run is bounded in time and requests. Afterwards (``load_checks``), for every (budget
holder, dataset): the distinct queries answered from the data are <= c and equal to the ledger's
positives and its cached ``data`` answers. There is no 5xx, every repeat comes back cached and
identical, and the server log has no traceback.

(a) one server, 4 workers, SQLite ledger; (b) two servers of 2 workers each on different ports
sharing one PostgreSQL schema, each virtual user alternating between them. Both are slow tests. A
fast test checks that the checks themselves catch a lost answer, a double spend and a bad repeat.

Each test prints its report (``pytest -s``) and writes it as JSON under its tmp dir. Speed is
reported, never asserted: the machine is shared.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from load_checks import check_load_against_ledger, private_pg_schema
from servers import BeaconServer

from benchmarks import bench_load, loadtest

DURATION_S = 30.0
MAX_REQUESTS = 3000
CONCURRENCY = 32


@pytest.fixture(scope="module")
def scenario_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[loadtest.Query]]:
    """The three-dataset store, its prior and the query pool, built once for the module."""
    store, prior = bench_load.build_store(tmp_path_factory.mktemp("load"))
    return store, prior, bench_load.contested_pool(store, prior)


@pytest.fixture
def pg_schema() -> Iterator[str]:
    with private_pg_schema() as url:
        yield url


def _run(
    tmp_path: Path, scenario_store, database_url: str, servers: int, workers: int
) -> tuple[loadtest.LoadReport, dict[str, dict[str, Any]], list[str]]:
    """Start ``servers`` servers on one ledger, run the load across them; the report, users, logs."""
    store, prior, pool = scenario_store
    config = bench_load.write_config(tmp_path / "load.toml", store, prior, database_url)
    keys, users = bench_load.add_users(database_url)
    running = [BeaconServer(config, tmp_path, workers=workers) for _ in range(servers)]
    try:
        for server in running:
            server.start()
        assert len({s.port for s in running}) == servers
        report = loadtest.run_load(
            [s.url for s in running], keys, pool, duration=DURATION_S, max_requests=MAX_REQUESTS,
            concurrency=CONCURRENCY,
        )  # fmt: skip
    finally:
        for server in running:
            server.stop()
    return report, users, [s.log() for s in running]


def _report(tmp_path: Path, name: str, report: loadtest.LoadReport, accounts: dict, wall: float) -> None:
    """Print the report (visible with ``pytest -s``) and write it as JSON under the test's tmp dir."""
    lines = [f"--- load test {name}: {wall:.1f} s wall", *report.lines()]
    print("\n".join(lines))
    payload = {
        "test": name,
        "wall_seconds": round(wall, 1),
        "summary": report.summary,
        "ledger": {f"{h}|{d}": a for (h, d), a in sorted(accounts.items())},
    }
    (tmp_path / "load-report.json").write_text(json.dumps(payload, indent=2) + "\n")


@pytest.mark.slow
def test_a_one_server_four_workers_sqlite(tmp_path, scenario_store):
    started = time.monotonic()
    url = f"sqlite:///{tmp_path}/ledger.sqlite3"
    report, users, logs = _run(tmp_path, scenario_store, url, servers=1, workers=4)
    accounts = _checked(report, url, users, logs)
    _report(tmp_path, "one server, SQLite", report, accounts, time.monotonic() - started)
    for log in logs:
        assert "Traceback" not in log, log[-3000:]


def _checked(report: loadtest.LoadReport, database_url: str, users: dict, logs: list[str]) -> dict:
    """``check_load_against_ledger``; a failure quotes the servers' refusal lines, which say why."""
    try:
        return check_load_against_ledger(report.summary, database_url, users)
    except AssertionError as failure:
        refusals = [line for log in logs for line in log.splitlines() if "unavailable" in line]
        raise AssertionError(f"{failure}\nserver log: {refusals[:5]}") from None


@pytest.mark.slow
def test_b_two_servers_share_postgresql(tmp_path, scenario_store, pg_schema):
    started = time.monotonic()
    report, users, logs = _run(tmp_path, scenario_store, pg_schema, servers=2, workers=2)
    accounts = _checked(report, pg_schema, users, logs)
    _report(tmp_path, "two servers, PostgreSQL", report, accounts, time.monotonic() - started)
    for log in logs:
        assert "Traceback" not in log, log[-3000:]


def _body(*sets: tuple[str, str, bool, bool]) -> dict:
    """A methylation response with result sets (dataset, answeredFrom, exists, cached) for cg1 [0.1, 0.2]."""
    return {"response": {"resultSets": [
        {"id": d, "exists": e, "info": {"answeredFrom": f, "cached": c, "probeId": "cg1", "range": [0.1, 0.2],
                                        "positivesUsed": 1}}
        for d, f, e, c in sets
    ]}}  # fmt: skip


def test_the_checks_catch_a_lost_answer_a_double_spend_and_a_bad_repeat():
    """The driver's tallies and the ledger comparison fail when they should (fast, no server)."""
    caller = loadtest.Caller("k", "u00", "REGISTERED", {"ds": "group:lab0"}, {"ds": 3})
    rec = loadtest.Recorder([caller])
    rec.result_sets(caller, _body(("ds", "data", True, False)), None)
    query = ("cg1", 0.1, 0.2)
    assert rec.answered["u00"] == [("ds", query)]
    rec.result_sets(caller, _body(("ds", "data", True, True)), [("ds", query)])  # a good repeat
    summary = rec.summary(1.0)
    assert summary["holders"]["group:lab0|ds"]["distinct_data"] == 1
    assert summary["repeats"] == {"checked": 1, "failures": 0}
    ledger = {("group:lab0", "ds"): {"positives": 1, "c": 3, "cached_data": 1}}
    assert bench_load.compare(summary, ledger) == []
    assert bench_load.compare(
        summary, {("group:lab0", "ds"): {**ledger[("group:lab0", "ds")], "positives": 2}}
    )
    assert bench_load.compare(summary, {})  # a data answer the ledger does not have
    over = {("group:lab0", "ds"): {"positives": 4, "c": 3, "cached_data": 4}}
    assert any("> c" in p for p in bench_load.compare(summary, over))

    rec.result_sets(caller, _body(("ds", "data", True, False)), None)  # the same query spent again
    rec.result_sets(caller, _body(("ds", "prior", False, False)), [("ds", query)])  # changed, not cached
    summary = rec.summary(1.0)
    assert summary["holders"]["group:lab0|ds"]["fresh_data"] == 2
    assert bench_load.compare(summary, ledger), "a second fresh data answer to one query must be flagged"
    assert summary["inconsistent_answers"] == 1
    assert summary["repeats"]["failures"] == 1

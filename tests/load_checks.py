"""Shared checks for tests that load real servers: a private PostgreSQL schema, and the comparison of
what a load run's clients received with what the privacy ledger recorded.

``check_load_against_ledger`` asserts the guarantees of issue 6's load test: no 5xx, nothing lost,
every repeat answered from the cache with the identical answer, and for every (budget holder,
dataset) at most c answers from the data, which equals the account's positives and its cached
``data`` answers; and the run contested the budgets (some spent to c, some in mid-budget).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks import bench_load

PG_URL = os.environ.get("MBEACON_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


@contextlib.contextmanager
def private_pg_schema() -> Iterator[str]:
    """A database URL whose search path is a new schema in the machine's PostgreSQL database ``test``;
    the schema is dropped afterwards. Fails the test (does not skip it) if PostgreSQL is unreachable."""
    psycopg = pytest.importorskip("psycopg")
    name = f"mbeacon_test_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
    except psycopg.OperationalError as error:
        pytest.fail(f"PostgreSQL at {PG_URL} is required for this test: {error}")
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{name}"
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {name} CASCADE")


def check_load_against_ledger(
    summary: dict[str, Any], database_url: str, users: dict[str, dict[str, str | None]]
) -> dict[tuple[str, str], dict[str, Any]]:
    """Assert the load run's guarantees (module docstring); return the ledger's accounts."""
    statuses = summary["statuses"]
    assert summary["server_errors"] == 0, f"5xx responses: {statuses}; {summary['problems']}"
    assert set(statuses) <= {"200", "429"}, f"unexpected statuses {statuses}: {summary['problems']}"
    assert summary["transport_errors"] == 0, summary["problems"]
    assert summary["unfinished"] == 0, "requests still open at the end: their answers may be lost"
    assert summary["repeats"]["checked"] >= 50, "too few repeats to check the cache"
    assert summary["repeats"]["failures"] == 0, summary["problems"]
    assert summary["inconsistent_answers"] == 0, summary["problems"]

    accounts = bench_load.ledger_accounts(database_url)
    problems = bench_load.compare(summary, accounts)
    assert problems == [], "the clients and the ledger disagree:\n" + "\n".join(problems)
    for key, account in accounts.items():
        assert account["positives"] <= account["c"], f"{key} overspent: {account}"
        assert account["epsilon_spent"] <= account["epsilon"] + 1e-9, f"{key} overspent epsilon: {account}"

    policies = {spec.id: spec.policy for spec in bench_load.DATASETS}
    tallies = list(summary["holders"].values())
    for tally in tallies:
        policy = policies[tally["dataset"]]
        assert tally["distinct_data"] <= tally["c"]
        allowed = {policy["c"]} | (
            {bench_load.GENEROUS_C} if tally["dataset"] == bench_load.DATASETS[0].id else set()
        )
        assert tally["c"] in allowed, f"{tally['holder']} was told c = {tally['c']}"
        key = (tally["holder"], tally["dataset"])
        if key in accounts:
            assert accounts[key]["c"] == tally["c"], f"{key}: the ledger's c differs from the one announced"
        if policy["scope"] == "group":  # one account for the group's users: the budget is shared
            assert tally["holder"].startswith("group:")
            assert {users[u]["group"] for u in tally["users"]} == {tally["holder"].removeprefix("group:")}
        else:
            assert tally["users"] == [tally["holder"].removeprefix("user:")]
        if policy["tier"] == "CONTROLLED":
            assert all(users[u]["tier"] == "CONTROLLED" for u in tally["users"])
        if policy["on_exhausted"] == "prior":
            assert tally["refused"] == 0, f"{tally['holder']} was refused on a prior-on-exhaustion dataset"
        else:
            assert tally["budget_exhausted"] == 0, "a refusing dataset answered from the prior"
    assert sum(t["distinct_data"] for t in tallies) > 0, "no answer came from the data: nothing was tested"
    assert any(0 < t["distinct_data"] < t["c"] for t in tallies), "no account was checked in mid-budget"
    smallest = min(policies, key=lambda d: policies[d]["c"])
    assert any(t["dataset"] == smallest and t["distinct_data"] == t["c"] for t in tallies), (
        f"no holder spent the whole budget of {smallest}: the budget was never contested"
    )
    return accounts

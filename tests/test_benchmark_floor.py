"""The ledger floor's route (``benchmarks.floor_server``), which the service benchmark measures beside the
real endpoint. It must do a free answer's whole key check and ledger transaction: a floor that skipped
part of them would report more room for the SVT² work than there is."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from benchmarks import bench_service, floor_server
from mbeacon.store.demo import Demo, ensure_demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    return ensure_demo(tmp_path_factory.getbasetemp() / "demo-store")


def _ledger_rows(path: Path) -> tuple[list[tuple], list[tuple], list[tuple]]:
    """(answers, query audit rows, accounts) as the floor left them."""
    with closing(sqlite3.connect(path)) as conn:
        answers = conn.execute(
            "SELECT principal, query_key, answered_from FROM answers ORDER BY created"
        ).fetchall()
        audit = conn.execute(
            "SELECT actor, query, answered_from, cached FROM audit_log WHERE event = 'query' ORDER BY id"
        ).fetchall()
        accounts = conn.execute("SELECT principal, positives FROM accounts").fetchall()
    return answers, audit, accounts


def test_the_floor_checks_the_key_and_writes_what_a_free_answer_writes(demo: Demo, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    config = tmp_path / "mbeacon.toml"
    config.write_text(
        bench_service.CONFIG.format(
            store=json.dumps(str(demo.store)),
            ledger=json.dumps(f"sqlite:///{ledger}"),
            prior=json.dumps(demo.prior),
            batch=10,
        )
    )
    app = floor_server.create_app(str(config))
    try:
        key = app.config["MBEACON"].ledger.add_user("alice", actor="test")
        client = app.test_client()
        auth = {"Authorization": f"Bearer {key}"}
        first = "probeId=cg1&minValue=0.1&maxValue=0.3"
        second = "probeId=cg2&minValue=0.1&maxValue=0.3"

        assert client.get(f"{floor_server.FLOOR_PATH}?{first}", headers=auth).json == {
            "exists": False,
            "cached": False,
        }
        assert client.get(f"{floor_server.FLOOR_PATH}?{first}", headers=auth).json["cached"] is True
        assert client.get(f"{floor_server.FLOOR_PATH}?{second}", headers=auth).json["cached"] is False

        answers, audit, accounts = _ledger_rows(ledger)
        holder = "user:alice"  # the budget holder of a user-scoped policy
        assert answers == [(holder, first, "prior"), (holder, second, "prior")]  # a cache row per new query
        assert audit == [  # an audit row for every answer, a repeat included
            ("alice", first, "prior", 0),
            ("alice", first, "prior", 1),
            ("alice", second, "prior", 0),
        ]
        assert accounts == [
            ("user:alice", 0)
        ]  # the account is opened as a real query opens it; nothing spent

        wrong = "Bearer mbk_" + key.split("_")[1] + "_" + "A" * 43  # the right key id, a wrong secret
        assert (
            client.get(f"{floor_server.FLOOR_PATH}?{second}", headers={"Authorization": wrong}).status_code
            == 401
        )
        assert client.get(f"{floor_server.FLOOR_PATH}?{second}").status_code == 401
        assert _ledger_rows(ledger) == (answers, audit, accounts)  # a refused request writes nothing
    finally:
        app.config["MBEACON"].ledger.close()

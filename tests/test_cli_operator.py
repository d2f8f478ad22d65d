"""The operator's commands meet the beacon they mean, or say why not (issue 17, item 6).

* ``mbeacon demo`` on a busy port fails before it touches the ledger, so the demo already serving
  there keeps its key;
* ``users``, ``budget`` and ``db`` without ``--config``, ``$MBEACON_CONFIG`` or
  ``$MBEACON_DATABASE_URL`` refuse (they used to write ``./data/ledger.sqlite3``, which no running
  beacon reads), and a command that only reads never creates a ledger;
* ``budget show`` of a holder the ledger does not know says so, instead of printing an empty table;
* an ingest over an existing dataset id names ``--replace``.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from mbeacon.cli import main

DATA = Path(__file__).parent / "data" / "ingest"
#: The variables that name a ledger, unset so that only what a test passes counts.
UNSET = {"MBEACON_CONFIG": None, "MBEACON_DATABASE_URL": None}


def _cli(*args: str, **env: str | None) -> Result:
    return CliRunner().invoke(main, list(args), env={**UNSET, **env}, prog_name="mbeacon")


def _one_error_line(result: Result) -> str:
    """The single ``error:`` line of a refused command (exit 2, no traceback)."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# --- demo: the port first -----------------------------------------------------------------------


def test_demo_on_a_busy_port_fails_before_touching_the_running_demos_key(tmp_path: Path) -> None:
    from mbeacon.beacon.ledger import Ledger

    data_dir = tmp_path / "demo"
    ledger_url = f"sqlite:///{data_dir / 'ledger.sqlite3'}"
    ledger = Ledger.open(ledger_url)
    key = ledger.add_user("demo", actor="the running demo")
    ledger.close()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        refused = subprocess.run(
            [sys.executable, "-m", "mbeacon.cli", "demo", "--port", str(port), "--data-dir", str(data_dir)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines() == [refused.stderr.strip()]  # one line
    assert f"127.0.0.1:{port}" in refused.stderr and "--port" in refused.stderr
    assert "Traceback" not in refused.stderr and refused.stdout == ""  # no url, no key printed
    ledger = Ledger.open(ledger_url)
    try:
        assert ledger.authenticate(key) is not None, "the running demo's key was rotated"
    finally:
        ledger.close()
    assert not (data_dir / "mbeacon.toml").exists()  # nothing built or written either


# --- which beacon's ledger ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("users", "list"),
        ("users", "add", "alice"),
        ("users", "rotate", "alice"),
        ("users", "revoke", "alice"),
        ("budget", "show"),
        ("budget", "show", "alice"),
        ("budget", "set", "alice", "demo", "--c", "3"),
        ("budget", "reset", "alice", "demo", "--confirm"),
        ("db", "status"),
        ("db", "upgrade"),
    ],
    ids=" ".join,
)
def test_a_ledger_command_without_a_configuration_refuses_and_creates_nothing(
    args: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    line = _one_error_line(_cli(*args))
    assert "--config" in line and "MBEACON_CONFIG" in line and "MBEACON_DATABASE_URL" in line
    assert list(tmp_path.iterdir()) == []  # no ./data/ledger.sqlite3


def test_the_refusal_points_at_the_demos_configuration_when_there_is_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "demo").mkdir(parents=True)
    (tmp_path / "data" / "demo" / "mbeacon.toml").write_text("")
    line = _one_error_line(_cli("users", "list"))
    assert "--config data/demo/mbeacon.toml" in line
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["demo"]


@pytest.mark.parametrize(
    "args",
    [
        ("users", "list"),
        ("users", "rotate", "alice"),
        ("users", "revoke", "alice"),
        ("budget", "show"),
        ("budget", "reset", "alice", "demo", "--confirm"),
        ("db", "status"),
    ],
    ids=" ".join,
)
def test_a_command_that_only_reads_never_creates_the_ledger(args: tuple[str, ...], tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    line = _one_error_line(_cli(*args, MBEACON_DATABASE_URL=f"sqlite:///{ledger}"))
    assert f"no ledger at {ledger}" in line
    assert list(tmp_path.iterdir()) == []


def test_mbeacon_database_url_or_mbeacon_config_names_the_ledger(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    by_url = {"MBEACON_DATABASE_URL": f"sqlite:///{ledger}"}
    added = _cli("users", "add", "alice", **by_url)
    assert added.exit_code == 0, added.output
    assert ledger.exists()
    config = tmp_path / "beacon.toml"
    config.write_text(f'database_url = "sqlite:///{ledger}"\n')
    listed = _cli("users", "list", "--json", MBEACON_CONFIG=str(config))
    assert listed.exit_code == 0, listed.output
    assert '"name": "alice"' in listed.stdout
    status = _cli("db", "status", "--config", str(config))
    assert status.exit_code == 0 and "ledger schema version" in status.stdout


# --- budget show of a holder that does not exist ------------------------------------------------


@pytest.fixture
def ledger_env(tmp_path: Path) -> dict[str, str]:
    """A ledger with one user, ``alice`` of group ``lab``, who has asked nothing yet."""
    env = {"MBEACON_DATABASE_URL": f"sqlite:///{tmp_path / 'ledger.sqlite3'}"}
    assert _cli("users", "add", "alice", "--group", "lab", **env).exit_code == 0
    return env


@pytest.mark.parametrize(
    ("holder", "message"),
    [("nobody", "no user 'nobody'"), ("user:Nobody", "no user 'nobody'"), ("group:none", "no group 'none'")],
)
def test_budget_show_of_an_unknown_holder_says_it_does_not_exist(
    ledger_env: dict[str, str], holder: str, message: str
) -> None:
    for args in (("budget", "show", holder), ("budget", "show", holder, "--json")):
        result = _cli(*args, **ledger_env)
        assert message in _one_error_line(result)
        assert result.stdout == ""  # no empty table, no []


@pytest.mark.parametrize("holder", ["alice", "ALICE", "group:lab", "global", "anonymous"])
def test_budget_show_of_a_known_holder_without_accounts_says_none_opened_yet(
    ledger_env: dict[str, str], holder: str
) -> None:
    shown = _cli("budget", "show", holder, "--json", **ledger_env)
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.strip() == "[]"
    assert "no budget accounts yet" in _cli("budget", "show", holder, **ledger_env).stderr


# --- ingest over an existing dataset ------------------------------------------------------------


def test_an_ingest_over_an_existing_dataset_names_replace(tmp_path: Path) -> None:
    source = DATA / "matrix" / "betas_pval.csv"
    args = ("ingest", str(source), "--store", str(tmp_path / "store"), "--dataset", "d")
    assert _cli(*args).exit_code == 0
    line = _one_error_line(_cli(*args))
    assert "'d' already exists" in line and "--replace" in line
    assert _cli(*args, "--replace").exit_code == 0

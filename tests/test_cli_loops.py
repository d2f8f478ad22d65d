"""Operator commands that close their loops (issue 28, item 5), on a real SQLite ledger.

* a revoked user comes back with ``users rotate`` (``users add`` says so);
* every audited change names its operator: ``--actor``, else the configuration's ``operator``, else
  the OS user, never ``cli:unknown``;
* ``mbeacon log`` reads and exports the audit log with filters;
* destructive commands ask on a terminal and refuse off one without ``--yes`` (``--confirm``);
* tables are whole when piped; help opens with the operator's first steps and cuts no summary.
"""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import given
from hypothesis import strategies as st

from mbeacon.beacon.ledger import Ledger
from mbeacon.cli import main
from mbeacon.cli.log import parse_since

UNSET = {"MBEACON_CONFIG": None, "MBEACON_DATABASE_URL": None}


def _cli(*args: str, **env: str | None) -> Result:
    return CliRunner().invoke(main, list(args), env={**UNSET, **env}, prog_name="mbeacon")


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A configuration naming a fresh SQLite ledger (no store: the user commands need none)."""
    path = tmp_path / "mbeacon.toml"
    path.write_text(f'database_url = "sqlite:///{tmp_path / "ledger.sqlite3"}"\n')
    return path


def _log(config: Path) -> list[dict]:
    ledger = Ledger.open(f"sqlite:///{config.parent / 'ledger.sqlite3'}")
    try:
        return ledger.audit_log(limit=None)
    finally:
        ledger.close()


# --- a revoked name comes back with rotate ------------------------------------------------------


def test_a_revoked_user_is_reinstated_by_rotate_and_add_points_there(config: Path) -> None:
    first = _cli("users", "add", "bob", "--config", str(config))
    assert first.exit_code == 0
    assert _cli("users", "revoke", "bob", "--yes", "--config", str(config)).exit_code == 0
    again = _cli("users", "add", "bob", "--config", str(config))
    assert again.exit_code == 2 and "`mbeacon users rotate bob`" in again.stderr
    back = _cli("users", "rotate", "bob", "--config", str(config))
    assert back.exit_code == 0, back.output
    ledger = Ledger.open(f"sqlite:///{config.parent / 'ledger.sqlite3'}")
    try:
        assert ledger.authenticate(back.stdout.strip()).name == "bob"
        assert ledger.authenticate(first.stdout.strip()) is None
    finally:
        ledger.close()
    assert _log(config)[0]["event"] == "user_reinstate"


# --- the operator's name ------------------------------------------------------------------------


def test_every_change_names_its_operator(config: Path, tmp_path: Path) -> None:
    assert _cli("--actor", "Ann Smith", "users", "add", "a1", "--config", str(config)).exit_code == 0
    named = tmp_path / "named.toml"
    named.write_text(config.read_text() + 'operator = "ops-team"\n')
    assert _cli("users", "add", "a2", "--config", str(named)).exit_code == 0
    assert _cli("--actor", "carol", "users", "add", "a3", "--config", str(named)).exit_code == 0
    assert _cli("users", "add", "a4", "--config", str(config), LOGNAME="dave").exit_code == 0
    actors = {e["detail"].split()[0]: e["actor"] for e in _log(config)}
    assert actors == {"a1": "cli:Ann Smith", "a2": "cli:ops-team", "a3": "cli:carol", "a4": "cli:dave"}


def test_the_os_user_is_named_even_without_a_login_session(config: Path) -> None:
    """No controlling terminal (cron, a container): the OS user from its id, not ``cli:unknown``."""
    env = {k: v for k, v in os.environ.items() if k not in ("LOGNAME", "USER", "LNAME", "USERNAME")}
    done = subprocess.run(
        [sys.executable, "-m", "mbeacon.cli", "users", "add", "eve", "--config", str(config)],
        capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=60, start_new_session=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (entry,) = _log(config)
    assert entry["actor"].startswith("cli:") and entry["actor"] not in ("cli:unknown", "cli:")


# --- mbeacon log --------------------------------------------------------------------------------


@pytest.fixture
def busy_log(config: Path) -> Path:
    for actor, args in [
        ("ann", ("users", "add", "alice")),
        ("ann", ("users", "add", "bob")),
        ("ben", ("users", "rotate", "alice")),
        ("ben", ("users", "revoke", "bob", "--yes")),
    ]:
        assert _cli("--actor", actor, *args, "--config", str(config)).exit_code == 0
    return config


def test_log_filters_by_actor_action_and_holder(busy_log: Path) -> None:
    def ids(*args: str) -> list[str]:
        shown = _cli("log", "--json", "--config", str(busy_log), *args)
        assert shown.exit_code == 0, shown.output
        return [(e["event"], e["principal"]) for e in json.loads(shown.stdout)]

    assert ids() == [("user_revoke", "user:bob"), ("key_rotate", "user:alice"), ("user_add", "user:bob"),
                     ("user_add", "user:alice")]  # fmt: skip
    assert ids("--actor", "cli:ben") == [("user_revoke", "user:bob"), ("key_rotate", "user:alice")]
    assert ids("--action", "user_add") == [("user_add", "user:bob"), ("user_add", "user:alice")]
    assert ids("--action", "user_add", "--action", "user_revoke") == [
        ("user_revoke", "user:bob"), ("user_add", "user:bob"), ("user_add", "user:alice")
    ]  # fmt: skip
    for spelling in ("alice", "user:alice", "ALICE"):
        assert ids("--holder", spelling) == [("key_rotate", "user:alice"), ("user_add", "user:alice")]
    assert ids("--limit", "1") == [("user_revoke", "user:bob")]
    assert ids("--since", "1h") == ids()
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    assert ids("--since", tomorrow) == []


def test_log_exports_csv_every_entry_paged(busy_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mbeacon.cli.log as log_module

    monkeypatch.setattr(log_module, "PAGE", 3)  # four entries: two pages
    shown = _cli("log", "--csv", "--all", "--config", str(busy_log))
    assert shown.exit_code == 0, shown.output
    rows = list(csv.DictReader(io.StringIO(shown.stdout)))
    assert [r["id"] for r in rows] == ["4", "3", "2", "1"]
    assert rows[0]["actor"] == "cli:ben" and rows[0]["event"] == "user_revoke"


def test_log_refuses_bad_filters_in_one_line(busy_log: Path) -> None:
    for args, words in [
        (("--since", "yesterday"), "is not a date, a time or a span"),
        (("--holder", "user:"), "must be NAME, user:NAME"),
        (("--json", "--csv"), "not both"),
    ]:
        refused = _cli("log", *args, "--config", str(busy_log))
        assert refused.exit_code == 2 and words in refused.stderr, refused.output
        assert refused.stdout == ""


@given(amount=st.integers(1, 99_999), unit=st.sampled_from("mhdw"))
def test_a_span_is_back_from_now(amount: int, unit: str) -> None:
    now = datetime(2026, 6, 1, tzinfo=UTC)
    step = {
        "m": timedelta(minutes=1),
        "h": timedelta(hours=1),
        "d": timedelta(days=1),
        "w": timedelta(weeks=1),
    }
    assert parse_since(f"{amount}{unit}", now) == now - amount * step[unit]


@given(text=st.text(max_size=30))
def test_since_parses_or_says_what_it_takes(text: str) -> None:
    try:
        when = parse_since(text)
    except ValueError as error:
        assert "is not a date, a time or a span" in str(error)
    else:
        assert when.tzinfo is not None


# --- confirmation -------------------------------------------------------------------------------


def test_a_destructive_command_off_a_terminal_refuses_without_yes(config: Path, tmp_path: Path) -> None:
    assert _cli("users", "add", "alice", "--config", str(config)).exit_code == 0
    refused = _cli("users", "revoke", "alice", "--config", str(config))
    assert refused.exit_code == 2 and refused.stderr.strip().endswith("add --yes to do it")
    assert Ledger.open(f"sqlite:///{tmp_path / 'ledger.sqlite3'}").user("alice").revoked is None
    for flag in ("--confirm", "-y"):
        done = _cli("users", "revoke", "alice", flag, "--config", str(config))
        assert done.exit_code == 0, done.output


def _on_a_terminal(args: list[str], answer: bytes) -> tuple[int, str]:
    """Run ``mbeacon ARGS`` with a pseudo-terminal as stdin (as an operator at a shell), answer."""
    leader, follower = pty.openpty()
    try:
        run = subprocess.Popen([sys.executable, "-m", "mbeacon.cli", *args], stdin=follower,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
        os.write(leader, answer)
        out, _ = run.communicate(timeout=60)
    finally:
        os.close(leader)
        os.close(follower)
    return run.returncode, out.decode()


def test_a_destructive_command_on_a_terminal_asks(config: Path, tmp_path: Path) -> None:
    assert _cli("users", "add", "alice", "--config", str(config)).exit_code == 0
    code, out = _on_a_terminal(["users", "revoke", "alice", "--config", str(config)], b"n\n")
    assert code == 1 and "Revoke 'alice'" in out
    ledger_url = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    assert Ledger.open(ledger_url).user("alice").revoked is None
    code, out = _on_a_terminal(["users", "revoke", "alice", "--config", str(config)], b"y\n")
    assert code == 0, out
    assert Ledger.open(ledger_url).user("alice").revoked is not None


def test_datasets_remove_off_a_terminal_refuses_without_yes(tmp_path: Path) -> None:
    source = Path(__file__).parent / "data" / "ingest" / "matrix" / "betas_pval.csv"
    store = tmp_path / "store"
    assert _cli("ingest", str(source), "--store", str(store), "--dataset", "d").exit_code == 0
    refused = _cli("datasets", "--store", str(store), "remove", "d")
    assert refused.exit_code == 2 and "add --yes" in refused.stderr
    assert (store / "datasets").exists() and any((store / "datasets").iterdir())
    assert _cli("datasets", "--store", str(store), "remove", "d", "--yes").exit_code == 0


# --- whole tables, whole help -------------------------------------------------------------------


def test_tables_are_whole_when_piped(config: Path) -> None:
    name, group = "alice-" + "a" * 50, "lab-" + "b" * 56  # a row of some 170 columns
    assert _cli("users", "add", name, "--group", group, "--config", str(config)).exit_code == 0
    listed = _cli("users", "list", "--config", str(config))
    (row,) = [line for line in listed.stdout.splitlines() if "alice" in line]
    assert name in row and group in row and "…" not in listed.stdout


def test_the_top_help_opens_with_the_operators_first_steps() -> None:
    shown = _cli("--help")
    description = shown.stdout.split("Options:")[0]
    assert "mbeacon audit` to check" not in description
    steps = description.index("First steps")
    for command in ("mbeacon demo", "mbeacon ingest", "mbeacon users add", "mbeacon serve", "mbeacon log"):
        assert description.index(command) > steps


@pytest.mark.parametrize("group", ["users", "budget", "datasets", "prior", "db", "annotation", None])
def test_group_help_shows_whole_summaries(group: str | None) -> None:
    from mbeacon.cli.lazy_group import whole_summary

    args = (
        [group, "--store", "s", "--help"]
        if group == "datasets"
        else [group, "--help"]
        if group
        else ["--help"]
    )
    shown = _cli(*args)
    assert shown.exit_code == 0, shown.output
    listing = " ".join(shown.stdout.split("Commands:")[1].split()).replace("- ", "-")  # wrapped at a hyphen
    assert "..." not in listing
    command = main if group is None else main.load(group)
    for name in command.list_commands(None):  # type: ignore[arg-type]
        summary = (
            main.lazy_subcommands[name].summary
            if group is None
            else whole_summary(
                command.get_command(None, name)  # type: ignore[arg-type]
            )
        )
        assert f"{name} {summary}" in listing


# --- a busy port --------------------------------------------------------------------------------


def test_a_second_serve_on_a_busy_port_is_refused_in_one_line(config: Path, tmp_path: Path) -> None:
    import socket
    import time

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        started = time.monotonic()
        bind = f"--bind=127.0.0.1:{port}"
        refused = subprocess.run(
            [sys.executable, "-m", "mbeacon.cli", "serve", "--config", str(config), bind],
            capture_output=True, text=True, timeout=120, env={**os.environ, **{k: "" for k in UNSET}},
        )  # fmt: skip
        took = time.monotonic() - started
    assert refused.returncode == 2, refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert (
        line.startswith(f"error: cannot serve on 127.0.0.1:{port}: Address already in use")
        and "--bind" in line
    )
    assert took < 5  # gunicorn retries for some 8 s
    assert not (tmp_path / "ledger.sqlite3").exists()  # refused before anything was opened


# --- prior remove -------------------------------------------------------------------------------


def test_prior_remove_is_refused_while_a_dataset_is_served_with_it(tmp_path: Path) -> None:
    from mbeacon.store.priors import prior_names

    source = Path(__file__).parent / "data" / "ingest" / "matrix" / "betas_pval.csv"
    store = tmp_path / "store"
    assert _cli("ingest", str(source), "--store", str(store), "--dataset", "d").exit_code == 0
    for name in ("p1", "p2", "p1"):  # p1 gets versions 1 and 2
        built = _cli("prior", "build", "--store", str(store), "--name", name, "--from-dataset", "d")
        assert built.exit_code == 0, built.output
    config = tmp_path / "beacon.toml"
    config.write_text(f'store = "{store}"\ndatabase_url = "sqlite:///{tmp_path / "l.sqlite3"}"\n'
                      '[datasets.d]\nprior = "p1"\n')  # fmt: skip

    refused = _cli("prior", "remove", "p1", "--config", str(config), "--yes")
    assert refused.exit_code == 2 and "served with [datasets.d] prior" in refused.stderr, refused.output
    latest = _cli("prior", "remove", "p1", "--version", "2", "--config", str(config), "--yes")
    assert latest.exit_code == 2 and "its latest version" in latest.stderr
    unasked = _cli("prior", "remove", "p1", "--version", "1", "--config", str(config))
    assert unasked.exit_code == 2 and "add --yes" in unasked.stderr
    older = _cli("prior", "remove", "p1", "--version", "1", "--config", str(config), "--yes")
    assert older.exit_code == 0, older.output
    listed = json.loads(_cli("prior", "list", "--store", str(store), "--json").stdout)
    assert sorted((e["name"], e["version"]) for e in listed) == [("p1", 2), ("p2", 1)]

    assert _cli("prior", "remove", "p2", "--config", str(config), "--yes").exit_code == 0  # unused
    assert prior_names(store) == ["p1"]
    # p1 is the store's default (recorded when p2 joined it): without a configuration, d is served with it
    alone = _cli("prior", "remove", "p1", "--store", str(store), "--yes")
    assert alone.exit_code == 2 and "dataset d (the store's default prior" in alone.stderr
    assert prior_names(store) == ["p1"]
    unknown = _cli("prior", "remove", "p9", "--store", str(store), "--yes")
    assert unknown.exit_code == 2 and "no prior named 'p9'" in unknown.stderr

"""The operator use cases (mbeacon.beacon.operations) and the holder rule (mbeacon.beacon.holders) that
the CLI and the admin API share: names parsed one way, overrides validated as whole policies, failures
of a kind each interface can word."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mbeacon.beacon import operations
from mbeacon.beacon.config import ServiceConfig, dataset_policy
from mbeacon.beacon.errors import AlreadyExists, InvalidRequest, UnknownTarget
from mbeacon.beacon.holders import (
    HOLDER_PATTERN,
    NAME_PATTERN,
    Holder,
    budget_holder,
    canonical_name,
    is_name,
)
from mbeacon.beacon.ledger import Ledger
from mbeacon.beacon.sanitisers.policy import PolicyBase

names = st.from_regex(NAME_PATTERN, fullmatch=True)


@given(kind=st.sampled_from(["user", "group"]), name=names)
def test_named_holders_round_trip(kind: str, name: str) -> None:
    holder = Holder.parse(f"{kind}:{name}")
    assert (holder.kind, holder.name) == (kind, name)
    assert Holder.parse(str(holder)) == holder
    assert re.fullmatch(HOLDER_PATTERN, str(holder))


@given(name=names)
def test_a_bare_name_on_the_command_line_is_that_users(name: str) -> None:
    assert str(Holder.from_command_line(name)) == f"user:{name}"
    assert Holder.from_command_line(f"group:{name}") == Holder("group", name)


@pytest.mark.parametrize("text", ["global", "anonymous"])
def test_shared_holders_have_no_name(text: str) -> None:
    assert Holder.parse(text) == Holder(text)  # type: ignore[arg-type]
    assert Holder.from_command_line(text) == Holder(text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        "user:",
        "user:user:bob",
        "bob:",
        ":bob",
        "group:a b",
        "user:\x00",
        "user:bоb",
        "team:x",
        "user:" + "x" * 65,
    ],
)
def test_malformed_holders_are_refused_by_name(text: str) -> None:
    with pytest.raises(InvalidRequest, match="budget holder must be NAME, user:NAME"):
        Holder.parse(text)
    assert not re.fullmatch(HOLDER_PATTERN, text)


@given(text=st.text(max_size=80))
def test_the_name_rule_and_the_holder_rule_agree(text: str) -> None:
    assert is_name(text) == (re.fullmatch(HOLDER_PATTERN, f"user:{text}") is not None)


@pytest.mark.parametrize("spelling", ["Dup2", "dup2 ", " DUP2", "ｄｕｐ２", "Ｄｕｐ２\t"])
def test_every_spelling_of_a_name_is_the_name(spelling: str) -> None:
    assert canonical_name(spelling) == "dup2"
    assert Holder.parse(f" User:{spelling.strip()}") == Holder("user", "dup2")
    assert Holder.from_command_line(spelling) == Holder("user", "dup2")
    assert operations.validated_user(name=spelling, group=spelling.upper()).model_dump()["group"] == "dup2"


def test_a_revoked_name_cannot_be_taken_again_in_another_spelling(ledger: Ledger) -> None:
    operations.add_user(ledger, operations.validated_user(name="dup2"), actor="test")
    operations.revoke_user(ledger, "DUP2", actor="test")
    assert ledger.user("dup2").revoked is not None
    for spelling in ("Dup2", "dup2 ", "ｄｕｐ２"):
        with pytest.raises(AlreadyExists, match="'dup2' was revoked"):
            operations.add_user(ledger, operations.validated_user(name=spelling), actor="test")
    assert [user.name for user in ledger.users()] == ["dup2"]


@given(text=st.text(max_size=20))
def test_canonical_names_are_stable(text: str) -> None:
    once = canonical_name(text)
    assert canonical_name(once) == once


def test_budget_holder_follows_the_scope() -> None:
    assert budget_holder("user", "alice", "lab", False) == "user:alice"
    assert budget_holder("group", "alice", "lab", False) == "group:lab"
    assert budget_holder("group", "alice", None, False) == "group:alice"
    assert budget_holder("global", "alice", "lab", True) == "global"
    assert budget_holder("user", "anonymous", None, True) == "anonymous"


@pytest.mark.parametrize("name", operations.OVERRIDABLE)
def test_a_budget_change_has_the_policys_own_bounds(name: str) -> None:
    """An override field is its policy field made optional: the same type, bounds and enum values."""
    change = operations.BudgetChange.model_json_schema()["properties"][name]["anyOf"]
    policy = PolicyBase.model_json_schema()["properties"][name]
    assert {"type": "null"} in change
    (bounded,) = [schema for schema in change if schema != {"type": "null"}]
    assert bounded == {k: v for k, v in policy.items() if k not in ("default", "title", "description")}


@pytest.fixture
def ledger(tmp_path: Path):
    opened = Ledger.open(f"sqlite:///{tmp_path}/ledger.sqlite3")
    yield opened
    opened.close()


def test_users_added_rotated_and_revoked_through_the_use_cases(ledger: Ledger) -> None:
    key = operations.add_user(ledger, operations.validated_user(name="alice", group="lab"), actor="test")
    assert ledger.authenticate(key).group == "lab"
    with pytest.raises(AlreadyExists, match="exists"):
        operations.add_user(ledger, operations.validated_user(name="alice"), actor="test")
    new = operations.rotate_key(ledger, "alice", actor="test")
    assert ledger.authenticate(key) is None and ledger.authenticate(new).name == "alice"
    operations.revoke_user(ledger, "alice", actor="test")
    assert ledger.authenticate(new) is None
    with pytest.raises(AlreadyExists, match=r"was revoked: `mbeacon users rotate alice`"):
        operations.add_user(ledger, operations.validated_user(name="alice"), actor="test")
    back = operations.rotate_key(ledger, "alice", actor="test")  # the one way back: a new key
    assert ledger.authenticate(back).name == "alice" and ledger.authenticate(new) is None
    assert ledger.user("alice").revoked is None
    with pytest.raises(UnknownTarget, match=r"no user 'nobody' .create one with `mbeacon users add"):
        operations.rotate_key(ledger, "nobody", actor="test")
    with pytest.raises(UnknownTarget, match="no user"):
        operations.revoke_user(ledger, "nobody", actor="test")
    log = ledger.audit_log()
    assert [row["event"] for row in log] == ["user_reinstate", "user_revoke", "key_rotate", "user_add"]
    assert {(row["actor"], row["principal"]) for row in log} == {("test", "user:alice")}


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"name": "user:bob"}, "name"),
        ({"name": "bob", "group": "a b"}, "group"),
        ({"name": "b", "role": "x"}, "role"),
    ],
)
def test_a_new_user_is_checked_by_the_shared_rule(fields: dict, where: str) -> None:
    with pytest.raises(InvalidRequest, match=f"^{where}: "):
        operations.validated_user(**fields)


def test_an_override_is_validated_as_a_whole_policy(ledger: Ledger) -> None:
    config = ServiceConfig(datasets={"d": dataset_policy(epsilon=2.0, c=4)})
    bob = Holder("user", "bob")
    done = operations.override_budget(config, ledger, bob, "d", {"c": 3}, actor="test")
    assert (done.params.c, done.params.epsilon, done.account_open) == (3, 2.0, False)
    for change, message in [
        ({"epsilon": math.nan}, "epsilon: Input should be a finite number"),
        ({"c": "5"}, "c: Input should be a valid integer"),
        ({"count_epsilon": 2.5}, "budget: count_epsilon is carved out of epsilon"),
        ({"variant": "twice"}, "variant: Input should be 'single' or 'redraw'"),
        ({"scope": "global"}, "scope: Extra inputs are not permitted"),
    ]:
        with pytest.raises(InvalidRequest, match=re.escape(message)):
            operations.override_budget(config, ledger, bob, "d", change, actor="test")
    assert [row["event"] for row in ledger.audit_log()] == ["budget_set"]  # refusals write nothing


def test_a_reset_says_whether_there_was_an_account(ledger: Ledger) -> None:
    assert operations.reset_budget(ledger, Holder("group", "lab"), "d", actor="test") is False
    assert ledger.audit_log()[0]["principal"] == "group:lab"


def test_an_unknown_dataset_is_an_unknown_target() -> None:
    operations.check_dataset("d", ["d", "e"])
    with pytest.raises(UnknownTarget, match="no dataset 'x'"):
        operations.check_dataset("x", ["d", "e"])


# --- the same rules on the command line ---------------------------------------------------------------


@pytest.fixture
def cli_config(tmp_path: Path) -> Path:
    from mbeacon.store.demo import DEMO_DATASET, ensure_demo

    demo = ensure_demo(tmp_path.parent.parent / "operations-demo")
    config = tmp_path / "mbeacon.toml"
    config.write_text(
        f'store = "{demo.store}"\ndatabase_url = "sqlite:///{tmp_path}/ledger.sqlite3"\n'
        f"[datasets.{DEMO_DATASET}]\nepsilon = 1.0\nc = 5\n"
    )
    return config


def _cli(*args: str):
    from click.testing import CliRunner

    from mbeacon.cli import main

    return CliRunner().invoke(main, list(args), env={"MBEACON_CONFIG": ""})


def test_the_cli_refuses_what_the_admin_api_refuses(cli_config: Path) -> None:
    from mbeacon.store.demo import DEMO_DATASET

    config = ("--config", str(cli_config))
    assert _cli("users", "add", "dup2", *config).exit_code == 0
    assert _cli("users", "revoke", "DUP2", "--yes", *config).exit_code == 0
    for spelling in ("Dup2", "dup2 ", "ｄｕｐ２"):
        again = _cli("users", "add", spelling, *config)
        assert again.exit_code == 2
        assert again.output.startswith("error: user 'dup2' was revoked: `mbeacon users rotate dup2`")
    for args, message in [
        (("users", "add", "user:dup3"), "error: name: String should match pattern"),
        (
            ("budget", "set", "user:user:x", DEMO_DATASET, "--c", "3"),
            "error: budget holder must be NAME, user:NAME",
        ),
        (
            ("budget", "set", "alice", "no-such-cohort", "--c", "3"),
            "error: no dataset 'no-such-cohort' in the store",
        ),
        (
            ("budget", "set", "alice", DEMO_DATASET, "--count-epsilon", "2"),
            "error: budget: count_epsilon is carved",
        ),
        (("budget", "reset", "alice", "no-such-cohort", "--confirm"), "error: no dataset 'no-such-cohort'"),
        (("users", "rotate", "nobody"), "error: no user 'nobody'"),
    ]:
        refused = _cli(*args, *config)
        assert refused.exit_code == 2 and refused.output.startswith(message), (args, refused.output)
    done = _cli("budget", "set", "Alice", DEMO_DATASET, "--c", "3", *config)
    assert done.exit_code == 0 and '"c": 3' in done.output
    audit = Ledger.open(f"sqlite:///{cli_config.parent}/ledger.sqlite3").audit_log()
    assert (audit[0]["event"], audit[0]["principal"]) == ("budget_set", "user:alice")
    assert all(e["actor"].startswith("cli:") for e in audit)


def test_one_name_rule_over_http_and_on_the_command_line(tmp_path: Path, cli_config: Path) -> None:
    """Against a real gunicorn server: the admin API and the CLI, on one ledger, refuse the same
    respellings of a revoked name, and a holder in another spelling addresses the same budget."""
    import subprocess
    import sys

    import httpx
    from servers import BeaconServer

    from mbeacon.store.demo import DEMO_DATASET

    ledger_url = f"sqlite:///{cli_config.parent}/ledger.sqlite3"
    ledger = Ledger.open(ledger_url)
    admin = operations.add_user(ledger, operations.validated_user(name="ops", role="admin"), actor="test")
    ledger.close()
    cli = [sys.executable, "-m", "mbeacon.cli"]
    with BeaconServer(cli_config, tmp_path, workers=1, threads=2) as server:
        headers = {"Authorization": f"Bearer {admin}"}
        with httpx.Client(base_url=server.url + "/api/admin", headers=headers, timeout=30) as client:
            created = client.post("/users", json={"name": "Dup2"})
            assert created.status_code == 201 and created.json()["response"]["user"]["name"] == "dup2"
            assert client.post("/users/DUP2/revoke").status_code == 200
            for spelling in ("dup2", "dup2 ", "ｄｕｐ２"):
                again = client.post("/users", json={"name": spelling})
                assert again.status_code == 409, again.text
                done = subprocess.run([*cli, "users", "add", spelling, "--config", str(cli_config)],
                                      capture_output=True, text=True, timeout=60)  # fmt: skip
                assert done.returncode == 2 and "'dup2' was revoked" in done.stderr
            assert client.post("/users", json={"name": "user:dup3"}).status_code == 400
            changed = client.put(f"/budget/User:Alice/{DEMO_DATASET}", json={"c": 3})
            assert changed.status_code == 200 and changed.json()["response"]["budgetHolder"] == "user:alice"
            # one spelling of a holder: a bare name is the user's, in paths and filters as on the CLI
            bare = client.put(f"/budget/Alice/{DEMO_DATASET}", json={"c": 4})
            assert bare.status_code == 200 and bare.json()["response"]["budgetHolder"] == "user:alice"
            found = client.get("/audit", params={"holder": "alice"}).json()["response"]["entries"]
            assert [e["event"] for e in found] == ["budget_set", "budget_set"]
            assert {e["principal"] for e in found} == {"user:alice"}
            shown = subprocess.run([*cli, "budget", "show", "user:dup2", "--json", f"--config={cli_config}"],
                                   capture_output=True, text=True, timeout=60)  # fmt: skip
            assert shown.returncode == 0 and shown.stdout.strip() == "[]"
    events = [(e["event"], e["principal"]) for e in Ledger.open(ledger_url).audit_log()]
    assert ("budget_set", "user:alice") in events
    assert [e for e, _ in events].count("user_add") == 2  # ops and dup2: no respelling got through

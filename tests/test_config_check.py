"""``mbeacon config check``, and ``serve`` refusing what it refuses (issue 28, items 2 and 4).

* a ``[datasets.X]`` table that names no dataset of the store is an error naming the likely dataset,
  for ``config check`` and ``serve`` (a misspelt id would serve the real dataset at the defaults,
  perhaps twice the epsilon the operator wrote down), and a line in a running worker's log;
* the check prints what each dataset is served at and who may ask it, and creates nothing;
* a configuration that cannot serve leaves no ledger behind, not even its directory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import given
from hypothesis import strategies as st

from mbeacon.beacon.preflight import near_miss
from mbeacon.cli import main
from mbeacon.store.demo import DEMO_DATASET, ensure_demo

UNSET = {"MBEACON_CONFIG": None, "MBEACON_DATABASE_URL": None}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return ensure_demo(tmp_path_factory.mktemp("demo"))


def _config(tmp_path: Path, demo, table: str = DEMO_DATASET, store: Path | None = None) -> Path:
    path = tmp_path / "beacon.toml"
    path.write_text(
        f'store = "{store or demo.store}"\n'
        f'database_url = "sqlite:///{tmp_path}/var/lib/ledger.sqlite3"\n'
        '[defaults]\nmechanism = "svt2"\nepsilon = 1.0\nc = 5\n'
        f'[datasets.{table}]\nepsilon = 0.5\nc = 3\ntier = "CONTROLLED"\n'
    )
    return path


def _cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), env=UNSET, prog_name="mbeacon")


def test_a_misspelt_dataset_table_is_refused_naming_the_dataset(tmp_path: Path, demo) -> None:
    config = _config(tmp_path, demo, table="demo-cohrt")
    result = _cli("config", "check", "--config", str(config))
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: cannot serve: [datasets.demo-cohrt] names no dataset")
    assert "did you mean [datasets.demo-cohort]?" in line
    assert not (tmp_path / "var").exists(), "a refused configuration created its ledger's directory"


def test_serve_refuses_the_same_table_in_one_line_and_creates_no_ledger(tmp_path: Path, demo) -> None:
    config = _config(tmp_path, demo, table="Demo-Cohort")
    served = subprocess.run(
        [sys.executable, "-m", "mbeacon.cli", "serve", "--config", str(config), "--bind", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert served.returncode == 2, served.stderr
    (line,) = served.stderr.strip().splitlines()
    assert "[datasets.Demo-Cohort] names no dataset" in line and "[datasets.demo-cohort]?" in line
    assert not (tmp_path / "var").exists()


def test_a_worker_serves_past_a_table_that_names_nothing_and_logs_it(tmp_path: Path, demo) -> None:
    """A worker that refused to boot would take the running beacon down (a dataset removed while its
    table stays): the app serves and logs the problem; serve, config check and reload refuse it."""
    import logging

    from mbeacon.api import create_app

    class Lines(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.lines: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.lines.append(record.getMessage())

    lines = Lines()
    logger = logging.getLogger("mbeacon.api")  # the app's own logger (its handlers do not propagate)
    logger.addHandler(lines)
    try:
        app = create_app({"store": str(demo.store), "database_url": f"sqlite:///{tmp_path}/l/ledger.sqlite3",
                          "datasets": {"elsewhere": {"epsilon": 0.5}}})  # fmt: skip
    finally:
        logger.removeHandler(lines)
    assert app.config["MBEACON"].engine.dataset_ids() == [DEMO_DATASET]
    assert any("[datasets.elsewhere] names no dataset of the store" in line for line in lines.lines)
    app.config["MBEACON"].ledger.close()


def test_serve_on_a_missing_store_creates_no_ledger(tmp_path: Path, demo) -> None:
    config = _config(tmp_path, demo, store=tmp_path / "nowhere")
    result = _cli("config", "check", "--config", str(config))
    assert result.exit_code == 2 and "nowhere" in result.stderr, result.output
    from mbeacon.api import create_app

    with pytest.raises(Exception, match="nowhere"):
        create_app(config)
    assert not (tmp_path / "var").exists() and not (tmp_path / "nowhere").exists()


def test_the_check_prints_what_each_dataset_is_served_at_and_creates_nothing(tmp_path: Path, demo) -> None:
    config = _config(tmp_path, demo)
    result = _cli("config", "check", "--config", str(config), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    (plan,) = report["datasets"]
    assert plan == {
        "dataset": DEMO_DATASET, "mechanism": "svt2", "epsilon": 0.5, "c": 3, "threshold": 1, "quota": None,
        "scope": "user", "tier": "CONTROLLED", "prior": demo.prior, "configured": True,
        "who_may_ask": "users of tier CONTROLLED or above",
    }  # fmt: skip
    assert report["ledger"]["exists"] is False
    assert any("does not exist yet" in note for note in report["notes"])
    assert not (tmp_path / "var").exists()
    table = _cli("config", "check", "--config", str(config))
    assert table.exit_code == 0
    assert "[datasets.demo-cohort]" in table.stdout and "0.5" in table.stdout
    assert "ok: 1 dataset can be served" in table.stderr


def test_the_check_counts_who_may_ask_from_the_ledger(tmp_path: Path, demo) -> None:
    from mbeacon.beacon.ledger import Ledger

    config = _config(tmp_path, demo)
    ledger = Ledger.open(f"sqlite:///{tmp_path}/var/lib/ledger.sqlite3")
    ledger.add_user("alice", tier="REGISTERED")
    result = _cli("config", "check", "--config", str(config), "--json")
    report = json.loads(result.stdout)
    assert report["datasets"][0]["who_may_ask"].endswith(": 0 active users")
    assert any("no active user may ask it yet" in note for note in report["notes"])
    ledger.add_user("bob", tier="CONTROLLED")
    ledger.close()
    report = json.loads(_cli("config", "check", "--config", str(config), "--json").stdout)
    assert report["datasets"][0]["who_may_ask"].endswith(": 1 active user")
    assert not any("no active user" in note for note in report["notes"])


def test_a_dataset_without_a_chosen_prior_is_refused(tmp_path: Path, demo) -> None:
    store = tmp_path / "store"
    shutil.copytree(demo.store, store)
    (store / "priors" / "DEFAULT").unlink(missing_ok=True)
    shutil.copytree(store / "priors" / demo.prior, store / "priors" / "another")
    result = _cli("config", "check", "--config", str(_config(tmp_path, demo, store=store)))
    assert result.exit_code == 2
    assert "has no prior: set prior = NAME" in result.stderr


@given(st.text(alphabet="abcdefghij-_.0123456789", min_size=1, max_size=12), st.lists(st.text(min_size=1)))
def test_a_known_name_is_its_own_near_miss(name: str, others: list[str]) -> None:
    assert near_miss(name, [*others, name]) in {name, *[o for o in others if o.casefold() == name.casefold()]}
    assert near_miss(name.upper(), [name]) == name


def test_the_check_reads_each_trusted_issuers_discovery_document(tmp_path: Path, demo) -> None:
    from idp import IdentityProvider

    config = _config(tmp_path, demo)
    with IdentityProvider() as idp:
        issuers = f'issuers = ["{idp.url}", "http://127.0.0.1:9/nothing"]'
        config.write_text(config.read_text() + f'[oidc]\n{issuers}\naudience = "b"\n')
        report = json.loads(_cli("config", "check", "--config", str(config), "--json").stdout)
    unreachable = [n for n in report["notes"] if n.startswith("OIDC issuer")]
    assert len(unreachable) == 1 and "127.0.0.1:9/nothing" in unreachable[0]

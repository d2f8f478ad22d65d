"""Start-up and install (issue 17, item 7): the command starts without the heavy stack, the core
install serves the beacon, and every command that needs an extra says which one when it is missing.

A missing extra is simulated in a subprocess by ``sys.modules[name] = None``, which makes Python (and
``importlib.util.find_spec``) treat the module as not installed, exactly as in a core-only venv.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from mbeacon.cli._extras import EXTRAS

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("numpy", "scipy", "pandas", "h5py", "numba", "pyarrow", "flask", "pydantic", "matplotlib", "httpx")
EVERY_EXTRA_MODULE = sorted({module for modules in EXTRAS.values() for module in modules})


def _run(
    script: str, *, blocked: tuple[str, ...] = (), cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """Run ``script`` in a fresh interpreter where the ``blocked`` modules are not installed."""
    shim = "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in blocked)
    return subprocess.run(
        [sys.executable, "-c", shim + script], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def _mbeacon(
    args: list[str], *, blocked: tuple[str, ...], cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """``mbeacon ARGS`` (the real command, in a subprocess) with the ``blocked`` modules missing."""
    script = f"from mbeacon.cli import main\nmain({args!r}, prog_name='mbeacon')\n"
    return _run(script, blocked=blocked, cwd=cwd)


def _loaded_after(code: str) -> list[str]:
    shown = _run(f"{code}\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout.strip().splitlines()[-1].replace("'", '"'))


def test_importing_the_command_loads_no_heavy_library() -> None:
    assert _loaded_after("import mbeacon.cli") == []


def test_version_loads_no_heavy_library() -> None:
    code = "from mbeacon.cli import main\ntry:\n    main(['--version'])\nexcept SystemExit:\n    pass"
    assert _loaded_after(code) == []


# --- a command without its extra: one line naming the extra -------------------------------------


def _assert_needs(result: subprocess.CompletedProcess, what: str, extra: str) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == f"error: {what} needs the {extra!r} extra: pip install 'mbeacon[{extra}]'"
    assert result.stdout == ""


ATTACK_COMMANDS = [
    (["attack", "evaluate", "--quick"], "mbeacon attack evaluate"),
    (["experiment", "lyu-su-li"], "mbeacon experiment lyu-su-li"),
    (["budget", "advise", "--dataset", "demo"], "mbeacon budget advise"),
    (["simulate", "--out", "sim", "--report"], "mbeacon simulate --report"),
]


@pytest.mark.parametrize(("args", "what"), ATTACK_COMMANDS, ids=[w for _, w in ATTACK_COMMANDS])
def test_an_attack_command_without_the_attack_extra_names_it(
    args: list[str], what: str, tmp_path: Path
) -> None:
    _assert_needs(_mbeacon(args, blocked=("matplotlib",), cwd=tmp_path), what, "attack")
    assert list(tmp_path.iterdir()) == []  # refused before any work: no report, no cohort


@pytest.mark.parametrize("module", EXTRAS["attack"])
def test_each_module_of_the_attack_extra_is_checked(module: str, tmp_path: Path) -> None:
    _assert_needs(
        _mbeacon(ATTACK_COMMANDS[0][0], blocked=(module,), cwd=tmp_path), ATTACK_COMMANDS[0][1], "attack"
    )


def test_the_live_attack_without_the_attack_extra_names_it(tmp_path: Path) -> None:
    victims = tmp_path / "victims.csv"
    victims.write_text("probe,s1\ncg00000029,0.5\n")
    args = ["attack", "live", "--url", "http://127.0.0.1:9", "--key", "k", "--victims", str(victims)]
    _assert_needs(_mbeacon(args, blocked=("httpx",)), "mbeacon attack live", "attack")


@pytest.fixture
def backends_config(tmp_path: Path) -> Path:
    """A configuration with a PostgreSQL ledger and a Redis rate limit, each URL with a password."""
    config = tmp_path / "beacon.toml"
    config.write_text(
        'database_url = "postgresql://beacon:pg-secret@127.0.0.1:1/ledger"\n'
        'redis_url = "redis://:redis-secret@127.0.0.1:1/0"\n'
        f'store = "{tmp_path / "store"}"\n'
    )
    return config


@pytest.mark.parametrize(
    ("args", "module"),
    [
        (["users", "list"], "psycopg"),
        (["users", "add", "alice"], "psycopg_pool"),
        (["budget", "show"], "psycopg"),
        (["db", "status"], "psycopg_pool"),
        (["serve"], "psycopg"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else value,
)
def test_a_postgresql_ledger_without_the_postgres_extra_names_it(
    args: list[str], module: str, backends_config: Path
) -> None:
    result = _mbeacon([*args, "--config", str(backends_config)], blocked=(module,))
    _assert_needs(result, "a postgresql:// ledger (database_url)", "postgres")
    assert "secret" not in result.stderr


def test_a_redis_rate_limit_without_the_redis_extra_names_it(backends_config: Path) -> None:
    result = _mbeacon(["serve", "--config", str(backends_config)], blocked=("redis",))
    _assert_needs(result, "a Redis rate limit (redis_url)", "redis")
    assert "secret" not in result.stderr


# --- the core install does everything else -------------------------------------------------------


def test_the_core_answers_a_query_with_every_extra_missing(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """What ``pip install -e .`` then ``mbeacon demo`` runs: the demo's store (built here, where the
    other tests share it, and rebuilt by nothing but the core), the app, the ledger, a user and an answer
    through SVT², none of it importing an extra."""
    from mbeacon.store.demo import ensure_demo

    demo_dir = tmp_path_factory.getbasetemp() / "demo-store"
    ensure_demo(demo_dir)
    script = f"""
from pathlib import Path
from mbeacon.api import create_app
from mbeacon.beacon.ledger import Ledger
from mbeacon.store.demo import ensure_demo
import mbeacon.cli.serve, mbeacon.cli.users, mbeacon.cli.budget, mbeacon.cli.db, mbeacon.cli.data
import mbeacon.cli.prior, mbeacon.cli.audit, mbeacon.server

root = Path({str(tmp_path)!r})
demo = ensure_demo(Path({str(demo_dir)!r}))
ledger_url = f"sqlite:///{{root}}/ledger.sqlite3"
app = create_app({{"store": str(demo.store), "database_url": ledger_url, "default_prior": demo.prior}})
ledger = Ledger.open(ledger_url)
key = ledger.add_user("demo")
ledger.close()
answer = app.test_client().get(
    "/api/methylation?probeId=cg00231192&minValue=0.6", headers={{"Authorization": f"Bearer {{key}}"}}
)
assert answer.status_code == 200, answer.get_data(as_text=True)
print("exists:", answer.get_json()["responseSummary"]["exists"])
print("extras loaded:", sorted(m for m in {EVERY_EXTRA_MODULE!r} if sys.modules.get(m) is not None))
"""
    ran = _run(script, blocked=tuple(EVERY_EXTRA_MODULE))
    assert ran.returncode == 0, ran.stderr
    assert re.search(r"^exists: (True|False)$", ran.stdout, re.MULTILINE), ran.stdout
    assert ran.stdout.rstrip().endswith("extras loaded: []")


# --- pyproject.toml and the table of extras agree ------------------------------------------------


def _name(requirement: str) -> str:
    """The distribution a requirement names, normalised (``psycopg[binary]>=3.1`` is ``psycopg``)."""
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_pyproject_extras_hold_what_the_commands_check_and_test_installs_them_all() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    core = {_name(r) for r in project["dependencies"]}
    providers = packages_distributions()
    for extra, modules in EXTRAS.items():
        listed = {_name(r) for r in extras[extra]}
        for module in modules:
            distributions = {_name(d) for d in providers.get(module, [])}
            assert distributions & listed, f"{module} is not provided by the {extra!r} extra"
            assert not distributions & core, f"{module} is in the core dependencies and the {extra!r} extra"
    assert f"mbeacon[{','.join(sorted(EXTRAS))}]" in extras["test"]

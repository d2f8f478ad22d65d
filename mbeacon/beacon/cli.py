"""Operator commands for the service: ``serve``, ``demo``, ``users``, ``budget`` and ``db``.

Every command finds the ledger and store through the same configuration as the server
(``--config FILE``, else ``$MBEACON_CONFIG``, then ``MBEACON_*``), so ``mbeacon users add`` on the
host writes where the running beacon reads. Keys are printed once and never stored in clear.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from mbeacon.beacon.config import TIERS, ConfigError, ServiceConfig, load_config
from mbeacon.lazy_group import LazyGroup

config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="TOML configuration file. [default: $MBEACON_CONFIG, then MBEACON_* variables]",
)


def _config(config_path: Path | None) -> ServiceConfig:
    try:
        return load_config(config_path)
    except ConfigError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(2)


def _ledger(config: ServiceConfig):
    from mbeacon.beacon.ledger import Ledger, LedgerUnavailable

    try:
        return Ledger.open(config.database_url)
    except (LedgerUnavailable, ValueError) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(2)


class LedgerGroup(LazyGroup):
    """Commands that use the ledger: one it cannot reach or write (down, disk full, read-only file
    system) is a one-line error and exit status 2, not a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        from mbeacon.beacon.ledger import LedgerUnavailable

        try:
            return super().invoke(ctx)
        except LedgerUnavailable as error:
            click.echo(f"error: {error}", err=True)
            sys.exit(2)


def holder_name(name: str) -> str:
    """A budget holder from the command line: a user name, ``group:NAME``, ``global`` or ``anonymous``."""
    return name if ":" in name or name in ("global", "anonymous") else f"user:{name}"


def _validate_for_serving(config_path: Path | None) -> None:
    """Build the app once in the master: a bad config, store or ledger is one clear error."""
    from mbeacon.beacon.ledger import LedgerUnavailable

    try:
        from mbeacon.api import create_app

        app = create_app(config_path) if config_path else create_app(None)
        ledger = app.config["MBEACON"].ledger
        try:
            ledger.db.ping()  # and writable: a read-only or full ledger could answer nothing
        finally:
            ledger.close()
    except (ConfigError, LedgerUnavailable, RuntimeError, ValueError, OSError) as error:
        click.echo(f"error: cannot serve: {error}", err=True)
        sys.exit(2)


# --- serve and demo ------------------------------------------------------------------------------


@click.command()
@config_option
@click.option(
    "--bind", default=None, help="HOST:PORT to listen on. [default: $MBEACON_BIND or 127.0.0.1:8000]"
)
@click.option("--workers", type=click.IntRange(min=1), default=None, help="gunicorn worker processes.")
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Threads per worker (2 measured best on 2 cores; 1 lets a silent client stall a worker).",
)
def serve(config_path: Path | None, bind: str | None, workers: int | None, threads: int) -> None:
    """Serve the beacon under gunicorn (the master runs in this process; stop with Ctrl-C/SIGTERM)."""
    from mbeacon import server

    server.prepare_metrics_dir()
    if config_path:
        os.environ["MBEACON_CONFIG"] = str(config_path.resolve())
    _validate_for_serving(config_path)
    bind = bind or os.environ.get("MBEACON_BIND", "127.0.0.1:8000")
    workers = workers or (int(os.environ["MBEACON_WORKERS"]) if os.environ.get("MBEACON_WORKERS") else None)
    server.run(str(config_path.resolve()) if config_path else None, server.settings(bind, workers, threads))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


DEMO_CONFIG = """\
# Written by `mbeacon demo`: the demo beacon's configuration (edit freely; it is kept).
beacon_id = "org.mbeacon.demo"
beacon_name = "MBeacon demo"
environment = "dev"
store = "{store}"
database_url = "sqlite:///{ledger}"
default_prior = "{prior}"
anonymous = "refuse"
rate_limit_per_minute = 6000

[defaults]
mechanism = "svt2"
epsilon = 1.0
c = 5
threshold = 1
variant = "single"
scope = "user"
on_exhausted = "refuse"
tier = "REGISTERED"
"""


@click.command()
@click.option("--port", type=click.IntRange(min=0, max=65535), default=5050, show_default=True,
              help="Port on 127.0.0.1 (0: any free port).")  # fmt: skip
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("data/demo"),
    show_default=True,
    help="Where the demo store, prior, config and ledger live (built on first use).",
)
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True)
def demo(port: int, data_dir: Path, workers: int) -> None:
    """Serve a demo beacon on a simulated cohort, with a demo user; prints its url and key.

    Builds the demo store and prior if absent (a few seconds), writes DATA_DIR/mbeacon.toml if
    absent, gives the user `demo` a fresh key, and serves on 127.0.0.1 with the SQLite ledger.
    """
    from mbeacon import server
    from mbeacon.beacon.ledger import UserError
    from mbeacon.store.demo import ensure_demo

    server.prepare_metrics_dir()
    data_dir = data_dir.resolve()
    click.echo(f"preparing the demo data in {data_dir} ...", err=True)
    built = ensure_demo(data_dir)
    config_path = data_dir / "mbeacon.toml"
    if not config_path.exists():
        config_path.write_text(
            DEMO_CONFIG.format(store=built.store, ledger=data_dir / "ledger.sqlite3", prior=built.prior)
        )
    os.environ["MBEACON_CONFIG"] = str(config_path)
    config = _config(config_path)
    ledger = _ledger(config)
    try:
        key = ledger.add_user("demo", tier="REGISTERED", actor="mbeacon demo")
    except UserError:
        key = ledger.rotate_key("demo", actor="mbeacon demo")
    ledger.close()
    _validate_for_serving(config_path)
    port = port or _free_port()
    base = f"http://127.0.0.1:{port}/api"
    probe = "cg00231192"  # a probe of the demo cohort, methylated around 0.6
    click.echo(f"url: {base}")
    click.echo(f"key: {key}")
    query = f"{base}/methylation?probeId={probe}&minValue=0.6&includeResultsetResponses=ALL"
    click.echo(f"try:  curl -H 'Authorization: Bearer {key}' '{query}'", err=True)
    click.echo(f"docs: {base}/docs   (config: {config_path}; stop with Ctrl-C)", err=True)
    sys.stdout.flush()
    server.run(str(config_path), server.settings(f"127.0.0.1:{port}", workers))


# --- users ---------------------------------------------------------------------------------------


@click.group(cls=LedgerGroup)
def users() -> None:
    """Create, list, rotate and revoke API keys (researchers) and admin keys (operators)."""


@users.command("add")
@click.argument("name")
@config_option
@click.option("--tier", type=click.Choice(TIERS), default="REGISTERED", show_default=True)
@click.option("--group", default=None, help="Budget group (datasets with scope = 'group' share its budget).")
@click.option("--admin", is_flag=True, help="An admin key: admin API and metrics only, no data queries.")
def users_add(name: str, config_path: Path | None, tier: str, group: str | None, admin: bool) -> None:
    """Create user NAME and print their key (shown once; only a salted hash is stored)."""
    from mbeacon.beacon.ledger import UserError

    ledger = _ledger(_config(config_path))
    try:
        key = ledger.add_user(name, tier=tier, group=group, role="admin" if admin else "researcher")
    except UserError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(2)
    click.echo(key)
    click.echo(
        f"user {name!r} created ({'admin' if admin else tier}); the key above is shown only once", err=True
    )


@users.command("rotate")
@click.argument("name")
@config_option
def users_rotate(name: str, config_path: Path | None) -> None:
    """Give NAME a new key (the old one stops working at once); budgets are kept."""
    from mbeacon.beacon.ledger import UserError

    ledger = _ledger(_config(config_path))
    try:
        click.echo(ledger.rotate_key(name))
    except UserError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(2)


@users.command("revoke")
@click.argument("name")
@config_option
def users_revoke(name: str, config_path: Path | None) -> None:
    """Revoke NAME's key (their budget record stays in the ledger)."""
    from mbeacon.beacon.ledger import UserError

    ledger = _ledger(_config(config_path))
    try:
        ledger.revoke_user(name)
    except UserError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(2)
    click.echo(f"user {name!r} revoked", err=True)


@users.command("list")
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def users_list(config_path: Path | None, as_json: bool) -> None:
    """List users (never keys)."""
    found = _ledger(_config(config_path)).users()
    if as_json:
        click.echo(json.dumps([u.public() for u in found], indent=2))
        return
    table = Table("name", "role", "tier", "group", "created", "revoked")
    for u in found:
        table.add_row(u.name, u.role, u.tier, u.group or "", u.created[:19], (u.revoked or "")[:19])
    Console().print(table)


# --- budget --------------------------------------------------------------------------------------


@click.group(cls=LedgerGroup, lazy_subcommands={"advise": "mbeacon.attack.advisor_cli:advise"})
def budget() -> None:
    """Show, set and reset privacy budgets (every change is written to the audit log)."""


@budget.command("show")
@click.argument("holder", required=False)
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def budget_show(holder: str | None, config_path: Path | None, as_json: bool) -> None:
    """Budgets of HOLDER (a user name, group:NAME, global or anonymous), or of everyone."""
    ledger = _ledger(_config(config_path))
    accounts = ledger.accounts_and_answers(holder_name(holder) if holder else None)
    rows = [
        {"holder": a.principal, "dataset": a.dataset, "queries": queries, **a.budget(),
         "parameters": a.params.public(), "opened": a.created}
        for a, queries in accounts
    ]  # fmt: skip
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table("holder", "dataset", "queries", "positives", "epsilon spent / total", "variant", "opened")
    for r in rows:
        spent = "-" if r["epsilonSpent"] is None else f"{r['epsilonSpent']:.4g} / {r['epsilonTotal']:.4g}"
        positives = "-" if r["positivesTotal"] is None else f"{r['positivesUsed']} / {r['positivesTotal']}"
        table.add_row(r["holder"], r["dataset"], str(r["queries"]), positives, spent,
                      r["parameters"]["variant"], r["opened"][:19])  # fmt: skip
    Console().print(table)
    if not rows:
        click.echo("no budget accounts yet (an account opens with its holder's first query)", err=True)


@budget.command("set")
@click.argument("holder")
@click.argument("dataset")
@config_option
@click.option("--epsilon", type=click.FloatRange(min=0, min_open=True), default=None)
@click.option("--c", "positives", type=click.IntRange(min=1), default=None, help="Positives per budget.")
@click.option("--threshold", type=click.IntRange(min=1), default=None, help="T, the minimum count for yes.")
@click.option("--variant", type=click.Choice(["single", "redraw"]), default=None)
@click.option("--count-epsilon", type=click.FloatRange(min=0), default=None)
def budget_set(
    holder: str, dataset: str, config_path: Path | None, epsilon: float | None, positives: int | None,
    threshold: int | None, variant: str | None, count_epsilon: float | None,
) -> None:  # fmt: skip
    """Parameters for HOLDER's next account on DATASET (the dataset's policy fills the rest).

    An account already open keeps the parameters it was promised until `budget reset`.
    """
    from pydantic import ValidationError

    from mbeacon.beacon.budget import AccountParams
    from mbeacon.beacon.config import DatasetPolicy

    config = _config(config_path)
    changes = {"epsilon": epsilon, "c": positives, "threshold": threshold, "variant": variant,
               "count_epsilon": count_epsilon}  # fmt: skip
    try:
        policy = DatasetPolicy.model_validate(
            {**config.policy(dataset).model_dump(), **{k: v for k, v in changes.items() if v is not None}}
        )
    except ValidationError as error:
        click.echo(f"error: {error.errors()[0]['msg']}", err=True)
        sys.exit(2)
    params = AccountParams.from_policy(policy)
    ledger = _ledger(config)
    open_now = ledger.set_override(holder_name(holder), dataset, params, actor=f"cli:{_operator()}")
    click.echo(json.dumps(params.public(), indent=2))
    if open_now:
        click.echo(
            f"{holder_name(holder)} has an open account on {dataset}: it keeps its promised parameters; "
            f"the new ones apply after `mbeacon budget reset {holder} {dataset} --confirm`",
            err=True,
        )


@budget.command("reset")
@click.argument("holder")
@click.argument("dataset")
@config_option
@click.option("--confirm", is_flag=True, help="Required: a reset grants a fresh privacy budget.")
def budget_reset(holder: str, dataset: str, config_path: Path | None, confirm: bool) -> None:
    """Close HOLDER's account on DATASET: the next query opens a fresh budget (audited)."""
    if not confirm:
        click.echo(
            "error: a reset gives a fresh privacy budget (the holder can learn up to twice as much); "
            "add --confirm to do it",
            err=True,
        )
        sys.exit(2)
    ledger = _ledger(_config(config_path))
    existed = ledger.reset_account(holder_name(holder), dataset, actor=f"cli:{_operator()}")
    click.echo(
        f"{'reset' if existed else 'no account to reset for'} {holder_name(holder)} on {dataset}", err=True
    )


def _operator() -> str:
    try:
        return os.getlogin()
    except OSError:
        return os.environ.get("USER", "unknown")


# --- db ------------------------------------------------------------------------------------------


@click.group(cls=LedgerGroup)
def db() -> None:
    """The ledger database's schema."""


@db.command("upgrade")
@config_option
def db_upgrade(config_path: Path | None) -> None:
    """Apply pending schema migrations (the server also does this at start-up)."""
    from mbeacon.beacon.ledger import connect, schema

    database = connect(_config(config_path).database_url)
    applied = schema.upgrade(database)
    click.echo(f"applied migrations {applied}" if applied else f"schema is current (version {schema.LATEST})")


@db.command("status")
@config_option
def db_status(config_path: Path | None) -> None:
    """Print the schema version of the ledger and of this MBeacon."""
    from mbeacon.beacon.ledger import connect, schema

    database = connect(_config(config_path).database_url)
    click.echo(f"ledger schema version {schema.current_version(database)}; this MBeacon: {schema.LATEST}")


COMMANDS = (serve, demo, users, budget, db)

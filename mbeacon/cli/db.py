"""``mbeacon db``: the ledger database's schema version and its migrations."""

from __future__ import annotations

from pathlib import Path

import click

from mbeacon.cli._service import LedgerGroup, config_option, load_service_config


@click.group(cls=LedgerGroup)
def db() -> None:
    """The ledger database's schema."""


@db.command("upgrade")
@config_option
def db_upgrade(config_path: Path | None) -> None:
    """Apply pending schema migrations (the server also does this at start-up)."""
    from mbeacon.beacon.ledger import connect, schema

    database = connect(load_service_config(config_path).database_url)
    applied = schema.upgrade(database)
    click.echo(f"applied migrations {applied}" if applied else f"schema is current (version {schema.LATEST})")


@db.command("status")
@config_option
def db_status(config_path: Path | None) -> None:
    """Print the schema version of the ledger and of this MBeacon."""
    from mbeacon.beacon.ledger import connect, schema

    database = connect(load_service_config(config_path).database_url)
    click.echo(f"ledger schema version {schema.current_version(database)}; this MBeacon: {schema.LATEST}")

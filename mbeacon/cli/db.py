"""``mbeacon db``: the ledger database's schema version and its migrations."""

from __future__ import annotations

from pathlib import Path

import click

from mbeacon.cli._service import (
    LedgerGroup,
    check_backends,
    check_ledger_exists,
    config_option,
    load_ledger_config,
)
from mbeacon.cli.lazy_group import HELP_OPTIONS


@click.group(cls=LedgerGroup, context_settings=HELP_OPTIONS)
def db() -> None:
    """The ledger database's schema."""


@db.command("upgrade")
@config_option
def db_upgrade(config_path: Path | None) -> None:
    """Apply pending schema migrations (the server also does this at start-up)."""
    from mbeacon.beacon.ledger import connect, schema

    config = load_ledger_config(config_path)
    check_backends(config)
    applied = schema.upgrade(connect(config.database_url))
    click.echo(f"applied migrations {applied}" if applied else f"schema is current (version {schema.LATEST})")


@db.command("status")
@config_option
def db_status(config_path: Path | None) -> None:
    """Print the schema version of the ledger and of this MBeacon."""
    from mbeacon.beacon.ledger import connect, schema

    config = load_ledger_config(config_path)
    check_backends(config)
    check_ledger_exists(config)  # reading a schema version must not create a ledger
    version = schema.current_version(connect(config.database_url))
    click.echo(f"ledger schema version {version}; this MBeacon: {schema.LATEST}")

"""How the operator commands reach the service: its configuration and its ledger.

Every command finds the ledger and store through the same configuration as the server
(``--config FILE``, else ``$MBEACON_CONFIG``, then ``MBEACON_*``), so ``mbeacon users add`` on the
host writes where the running beacon reads.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mbeacon.cli._ui import fail

if TYPE_CHECKING:
    from mbeacon.beacon.config import ServiceConfig
    from mbeacon.beacon.ledger import Ledger

config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="TOML configuration file. [default: $MBEACON_CONFIG, then MBEACON_* variables]",
)


def load_service_config(config_path: Path | None) -> ServiceConfig:
    """The service configuration, or a one-line error when it is missing or invalid."""
    from mbeacon.beacon.config import ConfigError, load_config

    try:
        return load_config(config_path)
    except ConfigError as error:
        fail(str(error))


def open_ledger(config: ServiceConfig) -> Ledger:
    """The configured ledger, or a one-line error when it cannot be opened."""
    from mbeacon.beacon.ledger import Ledger, LedgerUnavailable

    try:
        return Ledger.open(config.database_url)
    except (LedgerUnavailable, ValueError) as error:
        fail(str(error))


def cli_actor() -> str:
    """Who the audit log names for a change made on the command line: ``cli:<login name>``."""
    try:
        return f"cli:{os.getlogin()}"
    except OSError:
        return f"cli:{os.environ.get('USER', 'unknown')}"


class LedgerGroup(click.Group):
    """Commands that use the ledger: one it cannot reach or write (down, disk full, read-only file
    system), or an operator request it refuses (an unknown user, a name taken, a bad parameter), is a
    one-line error and exit status 2, not a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        from mbeacon.beacon.errors import OperationError
        from mbeacon.beacon.ledger import LedgerUnavailable

        try:
            return super().invoke(ctx)
        except (LedgerUnavailable, OperationError) as error:
            fail(str(error))

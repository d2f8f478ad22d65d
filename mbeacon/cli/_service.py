"""How the operator commands reach the service: its configuration and its ledger.

Every command finds the ledger and store through the same configuration as the server
(``--config FILE``, else ``$MBEACON_CONFIG``, then ``MBEACON_*``), so ``mbeacon users add`` on the
host writes where the running beacon reads. The commands that use the ledger insist on being told
which beacon: without ``--config``, ``$MBEACON_CONFIG`` or ``$MBEACON_DATABASE_URL`` they refuse, because
the built-in default (``data/ledger.sqlite3`` under the working directory) is rarely the ledger the
running beacon uses, and a key or budget written there would silently do nothing. A command that only
reads never creates a ledger either.
"""

from __future__ import annotations

import getpass
import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mbeacon.cli._extras import require_extra
from mbeacon.cli._ui import fail
from mbeacon.cli.lazy_group import Group

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


#: The environment variables that name a beacon's ledger for a command run without ``--config``.
LEDGER_VARIABLES = ("MBEACON_CONFIG", "MBEACON_DATABASE_URL")
#: The demo's configuration, relative to the working directory `mbeacon demo` ran in (its default).
DEMO_CONFIG_FILE = Path("data/demo/mbeacon.toml")


def load_ledger_config(config_path: Path | None) -> ServiceConfig:
    """The configuration of the beacon whose ledger a command uses: ``--config``, else
    ``$MBEACON_CONFIG``, else the ``MBEACON_*`` variables when they name a ledger
    (``$MBEACON_DATABASE_URL``); a one-line error saying how to name it otherwise."""
    if config_path is None and not any(os.environ.get(name) for name in LEDGER_VARIABLES):
        hint = f" (the demo's: --config {DEMO_CONFIG_FILE})" if DEMO_CONFIG_FILE.is_file() else ""
        fail(
            "which beacon's ledger? pass --config FILE, the configuration the beacon runs with"
            f"{hint}, or set MBEACON_CONFIG=FILE or MBEACON_DATABASE_URL=URL"
        )
    return load_service_config(config_path)


def sqlite_path(database_url: str) -> Path | None:
    """The file of a ``sqlite:///PATH`` ledger (relative to the working directory, as the server reads
    it); None for any other database or an in-memory one."""
    prefix = "sqlite:///"
    if not database_url.startswith(prefix) or database_url[len(prefix) :] in ("", ":memory:"):
        return None
    return Path(database_url[len(prefix) :])


def check_backends(config: ServiceConfig) -> None:
    """A one-line error when the configuration names a backend whose extra is not installed: a
    PostgreSQL ledger needs ``postgres``, a Redis rate limit ``redis``. The URLs are not printed: they
    may hold a password."""
    if config.database_url.partition(":")[0] in ("postgresql", "postgres"):
        require_extra("a postgresql:// ledger (database_url)", "postgres")
    if config.redis_url:
        require_extra("a Redis rate limit (redis_url)", "redis")


def check_ledger_exists(config: ServiceConfig) -> None:
    """A one-line error when the configuration's SQLite ledger does not exist (yet)."""
    path = sqlite_path(config.database_url)
    if path is not None and not path.exists():
        fail(
            f"no ledger at {path}: the beacon creates it when it first starts "
            "(is this the configuration the beacon runs with?)"
        )


def open_ledger(config: ServiceConfig, *, create: bool = True) -> Ledger:
    """The configured ledger, or a one-line error when it cannot be opened. With ``create=False`` (a
    command that only reads) a SQLite ledger that does not exist yet is an error, not a new file."""
    from mbeacon.beacon.ledger import Ledger, LedgerUnavailable

    check_backends(config)
    if not create:
        check_ledger_exists(config)
    try:
        return Ledger.open(config.database_url)
    except (LedgerUnavailable, ValueError) as error:
        fail(str(error))


def cli_actor(config: ServiceConfig | None = None) -> str:
    """Who the audit log names for a change made on the command line: ``cli:<operator>``, the operator
    being ``mbeacon --actor NAME``, else the configuration's ``operator``, else the OS user running the
    command (:func:`getpass.getuser`, which reads ``$LOGNAME``/``$USER`` and then the password database),
    else the numeric user id: a name that says who, never "unknown"."""
    from mbeacon.cli import ACTOR_KEY

    ctx = click.get_current_context(silent=True)
    chosen = ctx.find_root().meta.get(ACTOR_KEY) if ctx is not None else None
    if not chosen and config is not None:
        chosen = config.operator
    if not chosen:
        try:
            chosen = getpass.getuser()
        except (OSError, KeyError):  # no login variable and no password entry (a bare container uid)
            chosen = f"uid {os.getuid()}"
    return f"cli:{chosen}"


class LedgerGroup(Group):
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


class LedgerCommand(click.Command):
    """A single command that uses the ledger, with :class:`LedgerGroup`'s one-line errors."""

    def invoke(self, ctx: click.Context) -> object:
        from mbeacon.beacon.errors import OperationError
        from mbeacon.beacon.ledger import LedgerUnavailable

        try:
            return super().invoke(ctx)
        except (LedgerUnavailable, OperationError) as error:
            fail(str(error))

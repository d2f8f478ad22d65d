"""``mbeacon users``: create, list, rotate and revoke the keys of researchers and operators.

Keys are printed once and never stored in clear.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import click
from rich.table import Table

from mbeacon.beacon.config import TIERS
from mbeacon.cli._service import LedgerGroup, cli_actor, config_option, load_ledger_config, open_ledger
from mbeacon.cli._ui import confirmed, table_console, yes_option
from mbeacon.cli.lazy_group import HELP_OPTIONS


def _expiry(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    """``--expires`` or ``--expires-in`` as the time the key stops working (one of them at most)."""
    from mbeacon.beacon.keys import expiry_after, expiry_at

    if value is None:
        return ctx.params.get("expires")
    if ctx.params.get("expires") is not None:
        raise click.UsageError("give --expires or --expires-in, not both")
    try:
        when = expiry_at(value) if param.name == "expires" else expiry_after(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    ctx.params["expires"] = when  # --expires-in's value is not passed on: it lands here
    return when


def expiry_options(command: Callable) -> Callable:
    """``--expires DATE`` and ``--expires-in SPAN``, both given to the command as ``expires``."""
    command = click.option("--expires", callback=_expiry, default=None, metavar="DATE",
                           help="The key stops working at DATE (e.g. 2027-01-01, UTC).")(command)  # fmt: skip
    return click.option(
        "--expires-in", "expires_in", callback=_expiry, default=None, metavar="SPAN", expose_value=False,
        help="The key stops working after SPAN: 12h, 90d, 2w.",
    )(command)  # fmt: skip


@click.group(cls=LedgerGroup, context_settings=HELP_OPTIONS)
def users() -> None:
    """Create, list, rotate and revoke API keys (researchers) and admin keys (operators)."""


@users.command("add")
@click.argument("name")
@config_option
@click.option("--tier", type=click.Choice(TIERS), default="REGISTERED", show_default=True)
@click.option("--group", default=None, help="Budget group (datasets with scope = 'group' share its budget).")
@click.option("--admin", is_flag=True, help="An admin key: admin API and metrics only, no data queries.")
@expiry_options
def users_add(
    name: str, config_path: Path | None, tier: str, group: str | None, admin: bool, expires: datetime | None
) -> None:
    """Create user NAME and print their key (shown once; only a salted hash is stored)."""
    from mbeacon.beacon import operations

    new = operations.validated_user(
        name=name, tier=tier, group=group, role="admin" if admin else "researcher",
        expires=None if expires is None else expires.isoformat(),
    )  # fmt: skip
    config = load_ledger_config(config_path)
    key = operations.add_user(open_ledger(config), new, actor=cli_actor(config))
    click.echo(key)
    click.echo(
        f"user {new.name!r} created ({'admin' if admin else tier}); the key above is shown only once",
        err=True,
    )


@users.command("rotate")
@click.argument("name")
@config_option
@expiry_options
@click.option("--no-expiry", is_flag=True, help="The new key never expires. [default: the user's expiry]")
def users_rotate(name: str, config_path: Path | None, expires: datetime | None, no_expiry: bool) -> None:
    """Give NAME a new key (the old one stops working at once); budgets are kept.

    A revoked user is reinstated this way, with the budget they had: the one way back for a name.
    """
    from mbeacon.beacon import operations

    config = load_ledger_config(config_path)
    if no_expiry and expires is not None:
        raise click.UsageError("--no-expiry and an expiry: give one")
    when = None if no_expiry else expires or operations.KEEP
    ledger = open_ledger(config, create=False)
    click.echo(operations.rotate_key(ledger, name, actor=cli_actor(config), expires=when))


@users.command("revoke")
@click.argument("name")
@config_option
@yes_option
def users_revoke(name: str, config_path: Path | None, yes: bool) -> None:
    """Revoke NAME's key (their budget record stays in the ledger; `users rotate NAME` reinstates them)."""
    from mbeacon.beacon import operations
    from mbeacon.beacon.errors import UnknownTarget
    from mbeacon.beacon.holders import canonical_name

    config = load_ledger_config(config_path)
    ledger = open_ledger(config, create=False)
    name = canonical_name(name)
    if ledger.user(name) is None:  # refuse an unknown name before asking
        raise UnknownTarget(f"no user {name!r}")
    question = f"Revoke {name!r}'s key (they lose access at once)?"
    confirmed(question, f"revoking {name!r} cuts off their access", yes=yes)
    operations.revoke_user(ledger, name, actor=cli_actor(config))
    click.echo(f"user {name!r} revoked", err=True)


@users.command("list")
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def users_list(config_path: Path | None, as_json: bool) -> None:
    """List users (never keys)."""
    found = open_ledger(load_ledger_config(config_path), create=False).users()
    if as_json:
        click.echo(json.dumps([u.to_json() for u in found], indent=2))
        return
    table = Table("name", "role", "tier", "group", "created", "revoked", "expires")
    for u in found:
        table.add_row(u.name, u.role, u.tier, u.group or "", u.created[:19], (u.revoked or "")[:19],
                      (u.expires or "")[:19])  # fmt: skip
    table_console().print(table)

"""``mbeacon log``: read and export the ledger's audit log, with filters.

Named apart from ``mbeacon audit`` (the statistical test of the privacy mechanisms). The audit log is
append-only; this command only reads it and never creates a ledger. Entries come newest first, read
from the ledger in pages (a log of every query can be long), as a table, ``--json`` (one array) or
``--csv`` (a header, then one row per entry).
"""

from __future__ import annotations

import csv
import json
import re
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click
from rich.table import Table

from mbeacon.cli._service import LedgerCommand, config_option, load_ledger_config, open_ledger
from mbeacon.cli._ui import table_console
from mbeacon.cli.lazy_group import HELP_OPTIONS

#: Entries read from the ledger per statement.
PAGE = 1000
COLUMNS = ("id", "time", "event", "actor", "principal", "dataset", "query", "answeredFrom", "cached",
           "detail")  # fmt: skip
_AGO = re.compile(r"^([1-9][0-9]{0,4})([mhdw])$")
_UNIT = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``--since``: an ISO date or time (UTC unless it says otherwise), or a span back from now
    (``30m``, ``12h``, ``7d``, ``2w``); ValueError with what is accepted otherwise."""
    raw = text.strip()
    ago = _AGO.match(raw)
    if ago:
        return (now or datetime.now(UTC)) - timedelta(**{_UNIT[ago.group(2)]: int(ago.group(1))})
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise ValueError(
            f"{text[:40]!r} is not a date, a time or a span: "
            "write 2026-01-31, 2026-01-31T08:00, 12h, 7d or 2w"
        ) from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _since(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_since(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


def _holder(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A holder as the operator types it everywhere (``alice`` is ``user:alice``)."""
    from mbeacon.beacon.errors import InvalidRequest
    from mbeacon.beacon.holders import Holder

    if value is None:
        return None
    try:
        return str(Holder.from_command_line(value))
    except InvalidRequest as error:
        raise click.BadParameter(str(error)) from None


def _entries(ledger, limit: int | None, **filters) -> Iterator[dict]:
    """The matching entries, newest first, at most ``limit`` (None: all), read a page at a time."""
    before = None
    left = limit
    while left is None or left > 0:
        page = ledger.audit_log(limit=PAGE if left is None else min(PAGE, left), before_id=before, **filters)
        yield from page
        if len(page) < PAGE:
            return
        before = page[-1]["id"]
        left = None if left is None else left - len(page)


@click.command("log", cls=LedgerCommand, context_settings=HELP_OPTIONS)
@config_option
@click.option(
    "--since",
    callback=_since,
    default=None,
    metavar="WHEN",
    help="Entries at or after WHEN: a date or time (UTC), or a span back from now (12h, 7d, 2w).",
)
@click.option(
    "--actor",
    "by",
    default=None,
    metavar="ACTOR",
    help="Entries of one actor, as the log writes it (cli:NAME, admin:NAME).",
)
@click.option(
    "--action",
    "actions",
    multiple=True,
    metavar="EVENT",
    help="Entries of one event (user_add, key_rotate, user_revoke, budget_set, budget_reset, "
    "query, refused, ...); repeatable.",
)
@click.option(
    "--holder",
    callback=_holder,
    default=None,
    help="Entries about one budget holder: NAME (or user:NAME), group:NAME, global, anonymous.",
)
@click.option("--dataset", default=None, help="Entries about one dataset.")
@click.option(
    "--limit", type=click.IntRange(min=1), default=100, show_default=True, help="The newest entries to show."
)
@click.option("--all", "everything", is_flag=True, help="Every matching entry (for an export).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV with a header row.")
def log(
    config_path: Path | None, since: datetime | None, by: str | None, actions: tuple[str, ...],
    holder: str | None, dataset: str | None, limit: int, everything: bool, as_json: bool, as_csv: bool,
) -> None:  # fmt: skip
    """Read and export the ledger's audit log: who changed what, and which queries were answered.

    Newest first. The log never holds keys, noisy thresholds or raw counts.
    """
    if as_json and as_csv:
        raise click.UsageError("give --json or --csv, not both")
    ledger = open_ledger(load_ledger_config(config_path), create=False)
    filters = {
        "principal": holder,
        "actor": by,
        "dataset": dataset,
        "events": actions,
        "since": None if since is None else since.isoformat(timespec="microseconds"),
    }
    entries = _entries(ledger, None if everything else limit, **filters)
    if as_json:
        click.echo(json.dumps(list(entries), indent=2))
    elif as_csv:
        writer = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(entries)
    else:
        _print_table(list(entries))


def _print_table(entries: list[dict]) -> None:
    table = Table("id", "time", "event", "actor", "holder", "dataset", "answered", "detail")
    for e in entries:
        detail = e["detail"] or e["query"] or ""
        table.add_row(str(e["id"]), e["time"][:19], e["event"], e["actor"] or "", e["principal"] or "",
                      e["dataset"] or "", e["answeredFrom"] or "", detail)  # fmt: skip
    table_console().print(table)
    if not entries:
        click.echo("no audit entries match", err=True)

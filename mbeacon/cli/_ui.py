"""What every command shows the same way: progress bars, one-line errors, numbers in JSON.

A progress bar goes to stderr and is drawn only on a terminal, so that ``--json`` output on stdout
stays machine-readable and a redirected run writes nothing but its result. An error in the input or
the environment is one line, ``error: ...``, and exit status 2, never a traceback.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from typing import NoReturn

import click
from rich.console import Console
from rich.progress import Progress, ProgressColumn

from mbeacon.store.errors import DataError


class FiniteFloatRange(click.FloatRange):
    """A float option in a range that is also finite: click's range lets ``nan`` through (every
    comparison with it is false) and ``inf`` past an open-ended bound, and no parameter of ours means
    either."""

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``error: MESSAGE`` on stderr and exit with ``code``."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def table_console() -> Console:
    """A console for tables on stdout: the terminal's width, or, when stdout is a pipe or a file,
    wide enough for any row (rich would otherwise cut every table to 80 columns)."""
    console = Console()
    return console if console.is_terminal else Console(width=100_000)


def confirmed(question: str, refusal: str, *, yes: bool) -> None:
    """Go on when ``yes`` (``--yes``/``--confirm``) was given; ask ``question`` when stdin is a terminal
    (no: abort, status 1); otherwise refuse with ``error: REFUSAL; add --yes to do it`` (status 2),
    so that a script never destroys anything it did not say it meant to."""
    if yes:
        return
    if sys.stdin.isatty():
        click.confirm(question, abort=True)
        return
    fail(f"{refusal}; add --yes to do it")


#: The option of every destructive command: ``--yes`` (``-y``; ``--confirm`` is the same).
yes_option = click.option(
    "--yes", "-y", "--confirm", "yes", is_flag=True, help="Do it without asking (required off a terminal)."
)


def progress(*columns: str | ProgressColumn) -> Progress:
    """A transient progress bar of these columns on stderr, drawn only when stderr is a terminal."""
    console = Console(stderr=True)
    return Progress(*columns, console=console, transient=True, disable=not console.is_terminal)


def reports_data_errors(command: Callable) -> Callable:
    """Turn a DataError into a one-line message on stderr and exit status 2 (no traceback)."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except DataError as error:
            fail(str(error))

    return wrapper


def finite(x: float) -> float | None:
    """``x`` for JSON: a non-finite number is ``null`` (JSON has no nan or infinity)."""
    return x if math.isfinite(x) else None

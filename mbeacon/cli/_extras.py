"""The optional parts of MBeacon (pip extras) and the one-line error when a command needs a missing one.

The core install serves the beacon, runs the demo and manages the ledger and the store. The heavier
libraries only some commands use are extras, so that a plain ``pip install`` stays small:

* ``attack``: the membership-inference evaluation, the live attack, the experiments and every figure
  (Dask's ``distributed``, ``matplotlib``, ``httpx``, and ``scikit-learn`` for the DSSGD experiment's
  bundled data set);
* ``postgres``: a PostgreSQL ledger (``psycopg``, ``psycopg_pool``);
* ``redis``: a rate limit shared through Redis (``redis``).

Whether a module is installed is asked with :func:`importlib.util.find_spec`, which reads the import
path without importing the module, so the check costs nothing before a command starts its work (a
missing figure library must not fail an evaluation after it ran for an hour).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import NoReturn

import click

from mbeacon.cli._ui import fail

#: The importable modules each extra provides (pyproject.toml's [project.optional-dependencies]).
EXTRAS: dict[str, tuple[str, ...]] = {
    "attack": ("distributed", "matplotlib", "httpx", "sklearn"),
    "postgres": ("psycopg", "psycopg_pool"),
    "redis": ("redis",),
}


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here (empty when the extra is installed)."""
    return [module for module in EXTRAS[extra] if _find(module) is None]


def _find(module: str) -> object | None:
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        return None


def fail_missing(what: str, extra: str) -> NoReturn:
    """The one-line error for ``what`` (a command or a configured backend) without ``extra``."""
    fail(f"{what} needs the {extra!r} extra: pip install 'mbeacon[{extra}]'")


def require_extra(what: str, extra: str) -> None:
    """Fail with the one-line error unless every module of ``extra`` is installed."""
    if missing_modules(extra):
        fail_missing(what, extra)


def needs_extra(extra: str) -> Callable[[Callable], Callable]:
    """Decorate a click command (or group) that cannot run without ``extra``: it is checked before the
    command's own code, and a module of the extra that still fails to import (a broken install) gives
    the same line instead of a traceback."""

    def decorate(command: Callable) -> Callable:
        @functools.wraps(command)
        def wrapper(*args, **kwargs):
            what = f"{click.get_current_context().command_path}"
            require_extra(what, extra)
            try:
                return command(*args, **kwargs)
            except ModuleNotFoundError as error:
                if error.name is not None and error.name.partition(".")[0] in EXTRAS[extra]:
                    fail_missing(what, extra)
                raise

        return wrapper

    return decorate

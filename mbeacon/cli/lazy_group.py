"""A click group whose subcommands are imported only when they run (or their own help is shown).

The pattern of click's documentation ("Lazily loading subcommands"), extended to the group's help:
click lists the subcommands with the first sentence of each one's help, which would import every
module (numpy and scipy among them) just to print ``mbeacon --help``. So each lazy subcommand is
registered with that sentence, its summary, and the listing is written from the summaries;
``tests/test_cli.py`` checks that every summary is the first sentence of its command's help.

Every group of the command (:class:`Group`) lists its subcommands with whole summaries, wrapped onto
further lines, instead of click's cut to one line ending in "...".
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

import click

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}
"""Every command's context settings: ``-h`` as well as ``--help``. Each command states them itself,
because click fixes a command's help option the first time it is used, and a command invoked on its own
(as tests and ``python -m`` users do) would otherwise keep ``--help`` alone even under ``mbeacon``."""


class LazyCommand(NamedTuple):
    """Where a subcommand lives (``"module.path:attribute"``) and the first sentence of its help."""

    target: str
    summary: str


def whole_summary(command: click.Command) -> str:
    """The first sentence of a command's help, never shortened."""
    return command.get_short_help_str(limit=10_000)


class Group(click.Group):
    """A click group whose listing of subcommands shows each summary whole (wrapped, not cut)."""

    def listed(self, ctx: click.Context) -> list[tuple[str, click.Command]]:
        """The visible subcommands, by name."""
        found = [(name, self.get_command(ctx, name)) for name in self.list_commands(ctx)]
        return [(name, command) for name, command in found if command is not None and not command.hidden]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        commands = self.listed(ctx)
        if commands:
            with formatter.section("Commands"):
                formatter.write_dl([(name, whole_summary(command)) for name, command in commands])


class LazyGroup(Group):
    """``lazy_subcommands`` maps a command name to its :class:`LazyCommand`."""

    def __init__(self, *args, lazy_subcommands: dict[str, LazyCommand] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_subcommands = dict(lazy_subcommands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_subcommands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_subcommands:
            return self.load(cmd_name)
        return super().get_command(ctx, cmd_name)

    def load(self, cmd_name: str) -> click.Command:
        """Import the lazy subcommand ``cmd_name``."""
        target = self.lazy_subcommands[cmd_name].target
        module, _, attribute = target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        return command

    def listed(self, ctx: click.Context) -> list[tuple[str, click.Command]]:
        """The visible subcommands, the lazy ones from their summaries (nothing is imported)."""
        commands = []
        for name in self.list_commands(ctx):
            lazy = self.lazy_subcommands.get(name)
            command = click.Command(name, help=lazy.summary) if lazy else super().get_command(ctx, name)
            if command is not None and not command.hidden:
                commands.append((name, command))
        return commands

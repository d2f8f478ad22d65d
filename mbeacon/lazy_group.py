"""A click group whose heavy subcommands are imported only when they run (or their help is shown).

The pattern of click's documentation ("Lazily loading subcommands"): ``mbeacon --help`` and the
service commands should not pay for scipy, matplotlib and httpx that the attack commands need.
"""

from __future__ import annotations

import importlib

import click


class LazyGroup(click.Group):
    """``lazy_subcommands`` maps a command name to ``"module.path:attribute"``."""

    def __init__(self, *args, lazy_subcommands: dict[str, str] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_subcommands = dict(lazy_subcommands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_subcommands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_subcommands:
            module, _, attribute = self.lazy_subcommands[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{self.lazy_subcommands[cmd_name]} is not a click command")
            return command
        return super().get_command(ctx, cmd_name)

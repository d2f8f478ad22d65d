"""Every float option of the ``mbeacon`` command refuses nan and infinity, the way the library and the
service configuration do (click's own FloatRange lets nan through: every comparison with it is false)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from mbeacon.cli import main
from mbeacon.cli._ui import FiniteFloatRange


def _commands(group: click.Group, ctx: click.Context, path: tuple[str, ...] = ()):
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from _commands(command, click.Context(command, parent=ctx), (*path, name))
        elif command is not None:
            yield (*path, name), command


COMMANDS = list(_commands(main, click.Context(main)))
FLOAT_OPTIONS = [
    (" ".join(path), option)
    for path, command in COMMANDS
    for option in command.params
    if isinstance(option.type, click.FloatRange)
]


def test_every_float_option_is_finite() -> None:
    assert len(FLOAT_OPTIONS) >= 15
    assert all(isinstance(option.type, FiniteFloatRange) for _, option in FLOAT_OPTIONS)


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999"])
@pytest.mark.parametrize(("command", "option"), FLOAT_OPTIONS, ids=lambda x: getattr(x, "name", x))
def test_non_finite_values_are_refused(command: str, option: click.Option, value: str) -> None:
    with pytest.raises(click.BadParameter, match=r"is not a finite number|not in the range"):
        option.type.convert(value, option, None)


def test_a_command_refuses_nan_before_it_runs() -> None:
    result = CliRunner().invoke(main, ["audit", "--epsilon", "nan"])
    assert result.exit_code == 2
    assert "Invalid value for '--epsilon': 'nan' is not a finite number." in result.output

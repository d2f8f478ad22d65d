"""The ``mbeacon`` command as a whole: every group is listed, loads and answers ``--help``, the top-level
help imports none of the heavy libraries, and the shared error and progress conventions hold."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from mbeacon.cli import COMMANDS, main
from mbeacon.cli._ui import progress

HEAVY = ("numpy", "scipy", "pandas", "h5py", "flask", "matplotlib", "httpx", "pydantic", "rich")


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_listed_summary_is_the_first_sentence_of_its_commands_help(name: str) -> None:
    command = main.load(name)
    assert command.get_short_help_str(limit=10_000) == COMMANDS[name].summary


def test_the_top_level_help_lists_every_group_and_imports_no_heavy_library() -> None:
    script = (
        "import sys\n"
        "from mbeacon.cli import main\n"
        "try:\n"
        "    main(['--help'], prog_name='mbeacon')\n"
        "except SystemExit as stop:\n"
        "    assert stop.code == 0, stop.code\n"
        f"print('loaded:', sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert shown.stdout.rstrip().endswith("loaded: []")
    listing = shown.stdout.split("Commands:")[1]
    names = [line.split()[0] for line in listing.splitlines() if line.startswith("  ") and line[2] != " "]
    assert names == sorted(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_group_answers_help(name: str) -> None:
    # Used on its own first (as a test or a script might), which is when click fixes its help option.
    alone = CliRunner().invoke(main.load(name), ["-h"], prog_name=name)
    assert alone.exit_code == 0, alone.output
    shown = CliRunner().invoke(main, [name, "-h"], prog_name="mbeacon")
    assert shown.exit_code == 0, shown.output
    assert f"Usage: mbeacon {name}" in shown.output


def test_the_module_runs_as_the_command() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "mbeacon.cli", "--version"], capture_output=True, text=True, check=True
    )
    assert shown.stdout.startswith("mbeacon, version ")


def test_an_error_is_one_line_on_stderr_and_status_2() -> None:
    refused = CliRunner().invoke(
        main,
        ["budget", "reset", "alice", "cohort"],
        env={"MBEACON_CONFIG": None, "MBEACON_DATABASE_URL": None},
    )
    assert refused.exit_code == 2
    assert refused.stderr.startswith("error: which beacon's ledger?")
    assert refused.stderr.count("\n") == 1 and refused.stdout == ""


def test_the_progress_bar_draws_nothing_off_a_terminal(capfd: pytest.CaptureFixture[str]) -> None:
    with progress() as bar:
        bar.advance(bar.add_task("work", total=2))
    assert bar.disable
    assert capfd.readouterr() == ("", "")

"""Start-up of the command: ``mbeacon --help`` against ``python -c "import click"``, target <= 2x.

Both are run as subprocesses, interleaved round by round, with the interpreter of this run and the
``mbeacon`` script next to it (else the one on ``PATH``). ``import click`` is the floor of any click
command: an interpreter start plus the CLI library. ``mbeacon --version`` is recorded beside it. The
command imports each group only when it runs (``mbeacon/cli/lazy_group.py``), so the listing should
cost little more than click itself; ``tests/test_startup.py`` checks that it loads no heavy library.
"""

from __future__ import annotations

import subprocess
import sys

from benchmarks.common import Result, mbeacon_command, skipped, speed_ratio, time_interleaved

GROUP = "startup"
NAME = "startup: mbeacon --help vs python -c 'import click'"
VERSION_NAME = "startup: mbeacon --version vs python -c 'import click'"
TARGET_RATIO = 0.5  # ratio = baseline / ours for times: at most 2x the time of importing click
TARGET_TEXT = "<= 2x import click"


def _runner(argv: list[str]):
    return lambda: subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)


def run(quick: bool) -> list[Result]:
    command = mbeacon_command()
    if command is None:
        return [skipped(NAME, "command not available (no mbeacon script)", target=TARGET_TEXT, unit="s")]
    repeats = 5 if quick else 40
    timings = time_interleaved(
        {
            "click": _runner([sys.executable, "-c", "import click"]),
            "help": _runner([*command, "--help"]),
            "version": _runner([*command, "--version"]),
        },
        repeats=repeats,
        warmup=2,
    )
    baseline = timings["click"].median
    rows = []
    for name, key, target, met_target in (
        (NAME, "help", TARGET_TEXT, TARGET_RATIO),
        (VERSION_NAME, "version", "", None),
    ):
        ours = timings[key].median
        ratio = speed_ratio(ours, baseline, "s")
        rows.append(
            Result(
                name,
                ours,
                baseline,
                "s",
                ratio,
                target,
                None if met_target is None or ratio is None else ratio >= met_target,
                baseline_name="python -c 'import click' (same interpreter), interleaved",
                note=f"median of {repeats} interleaved rounds, each a fresh process",
                detail={"timings": {k: t.to_dict() for k, t in timings.items()}},
            )
        )
    return rows

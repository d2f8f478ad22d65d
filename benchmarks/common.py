"""Shared pieces of the benchmark suite: the result record, side-by-side timing and the summary table.

A benchmark group is a module ``benchmarks/bench_<name>.py`` with ``run(quick: bool) -> list[Result]``,
listed in ``benchmarks.__main__.GROUPS``.

Conventions:

* ``ours`` and ``baseline`` are in the same ``unit`` (base units: ``samples/s``, ``steps/s``, ``us/call``,
  ``s``); throughputs are printed with k/M prefixes.
* ``ratio`` is always "how many times faster ours is than the baseline": ``ours / baseline`` for a
  throughput (``.../s``), ``baseline / ours`` for a time. Above 1 means ours is faster.
* ``met`` is ``True``/``False`` against ``target``; ``None`` for rows recorded for information only.
* Ours and its baseline are timed in the same process, interleaved round by round (see
  :func:`time_interleaved`), and the figure is the median of the rounds: on a shared, noisy machine
  only the ratio is stable, not the absolute numbers.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import platform
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any


@dataclass
class Result:
    """One row of the summary table."""

    name: str
    ours: float | None
    baseline: float | None
    unit: str
    ratio: float | None
    target: str
    met: bool | None
    baseline_name: str = ""
    note: str = ""
    skipped: bool = False
    group: str = ""
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        if self.detail.get("error"):
            return "error"
        if self.skipped:
            return "skipped"
        if self.met is None:
            return "info"
        return "met" if self.met else "missed"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["verdict"] = self.verdict
        return data


def skipped(name: str, reason: str, *, target: str = "", unit: str = "") -> Result:
    """A row for a benchmark that could not run (missing optional package, missing command...)."""
    return Result(name, None, None, unit, None, target, None, note=f"skipped: {reason}", skipped=True)


def speed_ratio(ours: float | None, baseline: float | None, unit: str) -> float | None:
    """``ours / baseline`` for throughputs, ``baseline / ours`` for times (> 1: ours faster)."""
    if ours is None or baseline is None or ours <= 0 or baseline <= 0:
        return None
    return ours / baseline if unit.endswith("/s") else baseline / ours


# --- timing ----------------------------------------------------------------------------------------


@dataclass
class Timing:
    """Wall-clock seconds of each repeat (``time.perf_counter``)."""

    seconds: list[float]
    values: list[Any] = field(default_factory=list, repr=False)

    @property
    def best(self) -> float:
        return min(self.seconds)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def to_dict(self) -> dict[str, Any]:
        return {"best_s": self.best, "median_s": self.median, "repeats_s": self.seconds}


def time_once(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds taken by one call of ``fn`` and its return value."""
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def time_it(fn: Callable[[], Any], *, repeats: int = 5, warmup: int = 1) -> Timing:
    """Time ``fn`` ``repeats`` times after ``warmup`` untimed calls."""
    return time_interleaved({"fn": fn}, repeats=repeats, warmup=warmup)["fn"]


def time_interleaved(
    fns: dict[str, Callable[[], Any]], *, repeats: int = 5, warmup: int = 1, keep_values: bool = False,
    after: dict[str, Callable[[Any], Any]] | None = None,
) -> dict[str, Timing]:  # fmt: skip
    """Time several functions side by side: every round runs each once, in rotating order.

    Interleaving makes the functions share the same machine conditions (frequency, neighbours' load),
    so their ratio stays meaningful on a noisy host even when the absolute figures drift.

    With ``keep_values`` each :class:`Timing` keeps the return value of every timed call in ``values``
    (in round order), for benchmarks whose amount of work is only known afterwards; otherwise results
    are dropped at once (large arrays would pile up). ``after[name]``, if given, turns a value into
    what is kept, outside the timed call (counting a large result is not the function's work).
    """
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    timings = {name: Timing([]) for name in names}
    for r in range(repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            dt, value = time_once(fns[name])
            timings[name].seconds.append(dt)
            if keep_values:
                timings[name].values.append(after[name](value) if after and name in after else value)
            del value
    return timings


# --- machine description ---------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_info() -> dict[str, Any]:
    return {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "numpy": _version("numpy"),
        "randomgen": _version("randomgen"),
        "opendp": _version("opendp"),
    }


# --- formatting ------------------------------------------------------------------------------------


def _sig(x: float, digits: int = 3) -> str:
    if x == 0 or not math.isfinite(x):
        return str(x)
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:.{decimals}f}"


def format_value(value: float | None, unit: str) -> str:
    """``12_300_000, "samples/s"`` -> ``12.3 M samples/s``; ``1.31, "us/call"`` -> ``1.31 us/call``."""
    if value is None:
        return "-"
    if unit.endswith("/s"):
        for factor, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
            if abs(value) >= factor:
                return f"{_sig(value / factor)} {prefix} {unit}"
    return f"{_sig(value)} {unit}".strip()


def format_ratio(ratio: float | None) -> str:
    return "-" if ratio is None else f"{_sig(ratio)}x"


def print_table(results: list[Result], info: dict[str, Any], *, title: str = "mbeacon benchmarks") -> None:
    """Print the one summary table (rich) with numbered notes under it."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:  # piped or redirected: do not squeeze the table into 80 columns
        console = Console(width=150)
    caption = f"{info['date']} | {info['cpu']} | {info['cores']} cores | Python {info['python']}"
    caption += f" | numpy {info['numpy']}"
    table = Table(title=title, caption=caption, box=box.SIMPLE_HEAVY, show_lines=False)
    table.add_column("benchmark", overflow="fold")
    table.add_column("our figure", justify="right")
    table.add_column("baseline figure", justify="right")
    table.add_column("ratio", justify="right")
    table.add_column("target")
    table.add_column("verdict")
    styles = {"met": "green", "missed": "bold red", "info": "cyan", "skipped": "yellow", "error": "bold red"}
    notes: list[str] = []
    for res in results:
        name = res.name
        if res.note or res.baseline_name:
            notes.append(_note_text(res))
            name = f"{name} [{len(notes)}]"
        verdict = res.verdict
        table.add_row(
            name,
            format_value(res.ours, res.unit),
            format_value(res.baseline, res.unit),
            format_ratio(res.ratio),
            res.target,
            f"[{styles[verdict]}]{verdict}[/]",
        )
    console.print(table)
    console.print("ratio = speed of ours / speed of the baseline (> 1: ours faster).", highlight=False)
    for i, text in enumerate(notes, 1):
        console.print(f"[{i}] {text}", highlight=False, markup=False)


def _note_text(res: Result) -> str:
    parts = []
    if res.baseline_name:
        parts.append(f"baseline: {res.baseline_name}.")
    if res.note:
        parts.append(res.note)
    return " ".join(parts)


RESULTS_INTRO = """\
# Benchmark results

The latest full run of `python -m benchmarks --markdown`, which writes this file; what each row
measures is in [README.md](README.md). A ratio is always the speed of ours over the baseline's, both
measured side by side in the same run (above 1: ours faster). Absolute figures depend on the machine
and its load; compare ratios.
"""


def results_markdown(results: list[Result], info: dict[str, Any]) -> str:
    """``benchmarks/RESULTS.md``: a title and how to read it, then :func:`markdown_table`."""
    return RESULTS_INTRO + "\n" + markdown_table(results, info)


def markdown_table(results: list[Result], info: dict[str, Any]) -> str:
    """The summary table as Markdown, headed by the date and the machine, with each row's notes."""
    lines = [
        f"Run of {info['date']} on {info['cpu']} ({info['cores']} cores), Python {info['python']}, "
        f"numpy {info['numpy']}{' (--quick: figures not representative)' if info.get('quick') else ''}.",
        "",
        "| benchmark | ours | baseline (side by side) | ratio | target | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for res in results:
        cells = [res.name, format_value(res.ours, res.unit), format_value(res.baseline, res.unit),
                 format_ratio(res.ratio), res.target, res.verdict]  # fmt: skip
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    notes = [(res.name, _note_text(res)) for res in results if res.note or res.baseline_name]
    if notes:
        lines += ["", "## What each baseline is", ""]
        lines += [f"- {name}: {text}" for name, text in notes]
    return "\n".join(lines) + "\n"


def mbeacon_command() -> list[str] | None:
    """The ``mbeacon`` executable beside this interpreter (the venv's), else on PATH; None if absent."""
    local = Path(sys.executable).with_name("mbeacon")
    if local.exists():
        return [str(local)]
    found = shutil.which("mbeacon")
    return [found] if found else None

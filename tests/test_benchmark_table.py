"""The benchmark suite's Markdown table: ``python -m benchmarks --markdown [PATH]``, benchmarks/RESULTS.md."""

from __future__ import annotations

from pathlib import Path

from benchmarks.__main__ import RESULTS_MD, build_parser
from benchmarks.common import Result, markdown_table, results_markdown


def test_markdown_table_names_the_run_and_keeps_every_row() -> None:
    info = {"date": "2026-11-21T19:00:00+00:00", "cpu": "Test CPU", "cores": 2, "python": "3.11.7",
            "numpy": "2.4.6", "quick": False}  # fmt: skip
    rows = [
        Result(
            "fast | thing", 2_000_000.0, 1_000_000.0, "samples/s", 2.0, ">= 1.5x", True, baseline_name="loop"
        ),
        Result("slow thing", 3.0, None, "s", None, "<= 2 s", False),
        Result("recorded", 1.0, 1.0, "s", 1.0, "", None, note="for the record"),
    ]
    text = markdown_table(rows, info)
    lines = text.splitlines()
    assert lines[0].startswith("Run of 2026-11-21T19:00:00+00:00 on Test CPU (2 cores)")
    table = [line for line in lines if line.startswith("| ") and "---" not in line][1:]
    assert len(table) == 3
    assert all(line.count(" | ") == 5 for line in table), "a pipe in a name must not add a column"
    assert table[0].endswith("| 2.00x | >= 1.5x | met |") and "2.00 M samples/s" in table[0]
    assert table[1].endswith("| missed |") and table[2].endswith("| info |")
    assert "- fast | thing: baseline: loop." in text and "- recorded: for the record" in text


def test_markdown_without_a_path_writes_benchmarks_results_md() -> None:
    root = Path(__file__).resolve().parents[1]
    assert root / "benchmarks" / "RESULTS.md" == RESULTS_MD
    parse = build_parser().parse_args
    assert parse(["--markdown"]).markdown == RESULTS_MD
    assert parse(["--markdown", "--quick"]).markdown == RESULTS_MD
    assert parse(["--markdown", "table.md"]).markdown == Path("table.md")
    assert parse([]).markdown is None


def test_results_md_is_titled_then_the_table() -> None:
    info = {"date": "2026-11-21T19:00:00+00:00", "cpu": "Test CPU", "cores": 2, "python": "3.11.7",
            "numpy": "2.4.6", "quick": False}  # fmt: skip
    rows = [Result("thing", 2.0, 1.0, "s", 0.5, "", None, baseline_name="loop")]
    text = results_markdown(rows, info)
    assert text.startswith("# Benchmark results\n")
    assert text.endswith(markdown_table(rows, info))
    assert "\n## What each baseline is\n\n- thing: baseline: loop.\n" in text

"""Run the benchmark suite and print one summary table: ``python -m benchmarks [--quick] [--only G]``.

``--markdown`` also writes the table to ``benchmarks/RESULTS.md`` (or to the path given), the record of
the latest full run that the top-level README points to.

Each group is a module ``benchmarks/bench_<group>.py`` exposing ``run(quick: bool) -> list[Result]``;
add a group by writing the module and appending its name to ``GROUPS``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from pathlib import Path

from benchmarks.common import Result, machine_info, print_table, results_markdown

GROUPS: list[str] = [
    "noise",
    "svt2",
    "sanitisers",
    "audit",
    "store",
    "truncation",
    "priors",
    "annotation",
    "service",
    "attack",
    "load",
    "scale",
    "startup",
]
#: Where ``--markdown`` without a path writes: benchmarks/RESULTS.md of this repository.
RESULTS_MD = Path(__file__).resolve().parent / "RESULTS.md"


def run_group(group: str, quick: bool) -> list[Result]:
    """Run one group; an exception becomes an ``error`` row instead of stopping the suite."""
    try:
        module = importlib.import_module(f"benchmarks.bench_{group}")
        results = module.run(quick)
    except Exception as exc:
        traceback.print_exc()
        results = [
            Result(
                f"{group}: error",
                None,
                None,
                "",
                None,
                "",
                False,
                note=f"{type(exc).__name__}: {exc}",
                detail={"error": True},
            )
        ]
    for res in results:
        res.group = group
    return results


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="mbeacon benchmarks: each figure side by side with its baseline, in one table.",
    )
    parser.add_argument(
        "--only",
        choices=GROUPS,
        action="append",
        metavar="NAME",
        help=f"run only this group (repeatable); one of: {', '.join(GROUPS)}",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON here")
    parser.add_argument(
        "--markdown",
        type=Path,
        nargs="?",
        const=RESULTS_MD,
        metavar="PATH",
        help="also write the table as Markdown, to PATH or by default to benchmarks/RESULTS.md",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run of a few seconds")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    groups = args.only or GROUPS
    info = machine_info()
    results: list[Result] = []
    started = time.perf_counter()
    for group in groups:
        group_start = time.perf_counter()
        print(f"running {group} ...", file=sys.stderr, flush=True)
        results.extend(run_group(group, args.quick))
        print(f"  {group}: {time.perf_counter() - group_start:.1f} s", file=sys.stderr, flush=True)
    info["total_seconds"] = round(time.perf_counter() - started, 2)
    info["quick"] = args.quick
    info["groups"] = groups

    title = "mbeacon benchmarks"
    if args.quick:
        title += " (--quick: smoke sizes, figures not representative)"
    print_table(results, info, title=title)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {"machine": info, "results": [r.to_dict() for r in results]}
        args.json.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
        print(f"results written to {args.json}", file=sys.stderr)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(results_markdown(results, info), encoding="utf-8")
        print(f"table written to {args.markdown}", file=sys.stderr)
    return 1 if any(r.detail.get("error") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())

"""``mbeacon experiment``: reproduce published comparisons of the privacy mechanisms.

Each subcommand writes ``results.json`` and a PNG figure into ``--out`` and prints a summary table;
``--json`` prints the results to stdout instead (the table and file locations then go to stderr, where
the progress bar always is).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from mbeacon.cli._extras import needs_extra
from mbeacon.cli._ui import progress
from mbeacon.experiments import lyu_su_li

DEFAULT_SEED = 2017


@click.group(
    help="Reproduce published experiments on the privacy mechanisms (seeded, so results are repeatable)."
)
def experiment() -> None:
    """The ``experiment`` command group."""


def _summary_tables(results: dict[str, Any]) -> list[Table]:
    """One table per (setting, metric): a row per method, a column per c, mean over the runs."""
    tables = []
    cs = results["c"]
    for setting, block in results["settings"].items():
        for key, label in (("f_measure", "F-measure"), ("ncs", "NCS")):
            title = f"{lyu_su_li.SETTING_TITLES[setting]} (ε = {block['epsilon']:g}): {label}"
            table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
            table.add_column("method \\ c", style="bold", no_wrap=True)
            for c in cs:
                table.add_column(str(c), justify="right", no_wrap=True)
            for method, values in block["methods"].items():
                best = [max(v[key][i] for v in block["methods"].values()) for i in range(len(cs))]
                cells = [
                    f"[green]{x:.3f}[/green]" if x >= best[i] - 1e-12 else f"{x:.3f}"
                    for i, x in enumerate(values[key])
                ]
                table.add_row(method, *cells)
            tables.append(table)
    return tables


def _run_with_progress(config: lyu_su_li.ExperimentConfig) -> dict[str, Any]:
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with progress(*columns) as bar:
        task = bar.add_task("starting", total=lyu_su_li.count_steps(config))

        def step(description: str) -> None:
            bar.update(task, advance=1, description=description)

        return lyu_su_li.run_experiment(config, on_step=step)


@experiment.command(
    "lyu-su-li",
    help=(
        "Lyu, Su and Li (PVLDB 2017): SVT variants vs the exponential mechanism for finding the top-c "
        "items of a Zipf data set (1,000,000 records, 10,000 items). Interactive setting (eps = 0.25): "
        "SVT-DPBook and the standard SVT with eps1:eps2 = 1:1, 1:3, 1:c, 1:c^(2/3). Non-interactive "
        "setting (eps = 0.1): SVT with retraversal (threshold + 1, 3, 5 noise standard deviations) and EM. "
        "Metrics: F-measure and NCS for c = 25..300. See docs/experiments.md."
    ),
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results/lyu-su-li"),
    show_default=True,
    help="Directory for results.json and lyu-su-li.png.",
)
@click.option(
    "--runs",
    type=click.IntRange(min=1),
    default=None,
    help=f"Repetitions per (method, c) point [default: {lyu_su_li.ExperimentConfig.runs}; 5 with --quick].",
)
@click.option(
    "--records",
    type=click.IntRange(min=1),
    default=None,
    help="Number of Zipf records [default: 1,000,000; 100,000 with --quick]. More records, larger counts.",
)
@click.option("--seed", type=int, default=DEFAULT_SEED, show_default=True, help="Seed for data and noise.")
@click.option(
    "--quick", is_flag=True, help="Tiny setting (100,000 records, 1,000 items, c = 10, 25, 50): seconds."
)
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON on stdout.")
@needs_extra("attack")
def lyu_su_li_command(
    out_dir: Path, runs: int | None, records: int | None, seed: int, quick: bool, as_json: bool
) -> None:
    """Run the experiment, write its files and print the summary."""
    console = Console(stderr=as_json)
    config = lyu_su_li.quick_config(seed=seed) if quick else lyu_su_li.ExperimentConfig(seed=seed)
    overrides = {key: value for key, value in (("runs", runs), ("n_records", records)) if value is not None}
    config = replace(config, **overrides)
    results = _run_with_progress(config)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "results.json"
    json_path.write_text(json.dumps(results, indent=2) + "\n")
    png_path = lyu_su_li.plot_results(results, out_dir / "lyu-su-li.png")
    for table in _summary_tables(results):
        console.print(table)
    console.print(
        f"{config.runs} runs per point, seed {config.seed}, {results['elapsed_seconds']:.1f} s. "
        f"Wrote [bold]{json_path}[/bold] and [bold]{png_path}[/bold]."
    )
    if as_json:
        click.echo(json.dumps(results, indent=2))

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
from mbeacon.cli.lazy_group import HELP_OPTIONS, Group
from mbeacon.experiments import lyu_su_li

DEFAULT_SEED = 2017


@click.group(
    cls=Group,
    context_settings=HELP_OPTIONS,
    help="Reproduce published experiments on the privacy mechanisms (seeded, so results are repeatable).",
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


def _run_steps(module: Any, config: Any) -> dict[str, Any]:
    """Run ``module.run_experiment(config)`` under a progress bar of ``module.count_steps(config)``."""
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with progress(*columns) as bar:
        task = bar.add_task("starting", total=module.count_steps(config))
        return module.run_experiment(
            config, on_step=lambda text: bar.update(task, advance=1, description=text)
        )


def _write(results: dict[str, Any], module: Any, out_dir: Path, name: str) -> tuple[Path, Path]:
    """``results.json`` and the experiment's figure ``NAME.png`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "results.json"
    json_path.write_text(json.dumps(results, indent=2) + "\n")
    return json_path, module.plot_results(results, out_dir / f"{name}.png")


def _finish(
    results: dict[str, Any], tables: list[Table], what: str, paths: tuple[Path, Path], as_json: bool
) -> None:
    """The summary tables and one closing line (on stderr with ``--json``), then the JSON on stdout."""
    console = Console(stderr=as_json)
    for table in tables:
        console.print(table)
    json_path, png_path = paths
    console.print(
        f"{what}, {results['elapsed_seconds']:.1f} s. "
        f"Wrote [bold]{json_path}[/bold] and [bold]{png_path}[/bold]."
    )
    if as_json:
        click.echo(json.dumps(results, indent=2))


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
    config = lyu_su_li.quick_config(seed=seed) if quick else lyu_su_li.ExperimentConfig(seed=seed)
    overrides = {key: value for key, value in (("runs", runs), ("n_records", records)) if value is not None}
    config = replace(config, **overrides)
    results = _run_steps(lyu_su_li, config)
    paths = _write(results, lyu_su_li, out_dir, "lyu-su-li")
    _finish(
        results, _summary_tables(results), f"{config.runs} runs per point, seed {config.seed}", paths, as_json
    )


def _dssgd_table(results: dict[str, Any]) -> Table:
    """One row per DSSGD cell: mean and sd of test accuracy next to the baselines at its N."""
    table = Table(
        title="DSSGD test accuracy (mean ± sd over runs)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for name in ("varies", "ε/epoch", "θu", "N", "DSSGD", "central", "alone", "uploads"):
        table.add_column(name, justify="left" if name == "varies" else "right", no_wrap=True)

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    def cell(values: list[float]) -> str:
        sd = (sum((v - mean(values)) ** 2 for v in values) / len(values)) ** 0.5
        return f"{mean(values):.3f}±{sd:.3f}"

    varies = {"epsilon": "ε", "upload_fraction": "θu", "participants": "N"}
    for sweep, rows in results["sweeps"].items():
        for row in rows:
            base = results["baselines"][str(row["participants"])]
            table.add_row(
                varies.get(sweep, sweep),
                row["epsilon"].replace("inf", "∞"),
                f"{row['upload_fraction']:g}",
                str(row["participants"]),
                cell(row["accuracy"]),
                f"{mean(base['centralised']):.3f}",
                f"{mean(base['standalone']):.3f}",
                f"{row['upload_rate']:.3f}",
            )
    return table


@experiment.command(
    "dssgd",
    help=(
        "Shokri and Shmatikov (CCS 2015): distributed selective SGD, participants uploading only "
        "gradients chosen and perturbed by the sparse vector technique, on scikit-learn's bundled "
        "digits (logistic regression). Test accuracy against epsilon per epoch, the upload fraction "
        "and the number of participants, next to centralised and standalone training. "
        "See docs/experiments.md."
    ),
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results/dssgd"),
    show_default=True,
    help="Directory for results.json and dssgd.png.",
)
@click.option(
    "--runs", type=click.IntRange(min=1), default=None, help="Repetitions, one split each [default: 5]."
)
@click.option(
    "--epochs",
    type=click.IntRange(min=1),
    default=None,
    help="Training epochs [default: 100; 40 with --quick].",
)
@click.option("--seed", type=int, default=2015, show_default=True, help="Seed for the splits and the noise.")
@click.option("--quick", is_flag=True, help="The epsilon sweep only (1, 100, 1000, inf), 40 epochs: seconds.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON on stdout.")
@needs_extra("attack")
def dssgd_command(
    out_dir: Path, runs: int | None, epochs: int | None, seed: int, quick: bool, as_json: bool
) -> None:
    """Run the experiment, write its files and print the summary."""
    from mbeacon.experiments import dssgd

    config = dssgd.quick_config(seed=seed) if quick else dssgd.ExperimentConfig(seed=seed)
    overrides = {key: value for key, value in (("runs", runs), ("epochs", epochs)) if value is not None}
    config = replace(config, **overrides)
    results = _run_steps(dssgd, config)
    paths = _write(results, dssgd, out_dir, "dssgd")
    what = f"{config.runs} runs per point, {config.epochs} epochs, seed {config.seed}"
    _finish(results, [_dssgd_table(results)], what, paths, as_json)


# --- the SVT applications of the textbook: automatic clipping bound, range queries ------------------


def _auto_clip_tables(results: dict[str, Any]) -> list[Table]:
    """Two tables, a row per (column, threshold rule), a column per grid length: the median chosen
    bound over the column's 99th percentile, and the median relative error of the DP mean."""
    sizes = results["grid"]["sizes"]
    eps = results["config"]["epsilon"]
    tables = []
    for key, title, fmt in (
        ("bound_over_p99_median", f"Chosen bound / p99, median (ε = {eps:g})", "{:.3g}"),
        ("mean_rel_error_median", f"|DP mean / mean - 1|, median (ε = {eps:g})", "{:.1e}"),
    ):
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("column, threshold \\ grid", style="bold", no_wrap=True)
        for m in sizes:
            table.add_column(f"{m:,}", justify="right", no_wrap=True)
        for name, block in results["columns"].items():
            for rule, cells in block["rules"].items():
                table.add_row(f"{name}, {rule}", *(fmt.format(c[key]) for c in cells))
        tables.append(table)
    return tables


@experiment.command(
    "auto-clip",
    help=(
        "The textbook's auto_avg: AboveThreshold picks a clipping bound from a geometric grid (1e-3 to 1e7, "
        "10 to 10,000 candidates), then a noisy sum and count give a DP mean (eps = 1 in thirds). Three "
        "columns on very different scales (real GSE41169 betas, a lognormal read-depth-like column, a "
        "Pareto column); our default threshold against the textbook's 0. See docs/experiments.md."
    ),
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results/auto-clip"),
    show_default=True,
    help="Directory for results.json and auto-clip.png.",
)
@click.option(
    "--runs", type=click.IntRange(min=1), default=None, help="Runs per point [default: 500; 40 with --quick]."
)
@click.option("--seed", type=int, default=2019, show_default=True, help="Seed for data and noise.")
@click.option("--quick", is_flag=True, help="20,000 rows per column and 40 runs per point: seconds.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON on stdout.")
@needs_extra("attack")
def auto_clip_command(out_dir: Path, runs: int | None, seed: int, quick: bool, as_json: bool) -> None:
    """Run the experiment, write its files and print the summary."""
    from mbeacon.experiments import auto_clip

    config = auto_clip.quick_config(seed=seed) if quick else auto_clip.ExperimentConfig(seed=seed)
    if runs is not None:
        config = replace(config, runs=runs)
    results = _run_steps(auto_clip, config)
    paths = _write(results, auto_clip, out_dir, "auto-clip")
    _finish(
        results,
        _auto_clip_tables(results),
        f"{config.runs} runs per point, seed {config.seed}",
        paths,
        as_json,
    )


def _range_queries_table(results: dict[str, Any]) -> Table:
    table = Table(
        title=f"range_query_svt, c = {results['config']['c']}, T = {results['config']['threshold']:g}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for label in ("ε", "k", "ε spent", "MAE", "broad found", "MAE, Laplace on all k"):
        table.add_column(label, justify="right", no_wrap=True)
    for setting in results["settings"]:
        for c in setting["cells"]:
            table.add_row(
                f"{setting['epsilon']:g}",
                f"{c['k']:,}",
                f"{c['epsilon_spent']:g}",
                f"{c['mae']:.1f}",
                f"{c['recall']:.3f}",
                f"{c['laplace_all_mae']:,.0f}",
            )
    return table


@experiment.command(
    "range-queries",
    help=(
        "The textbook's range_query_svt: Sparse picks the range queries whose count is above T, Laplace "
        "answers only those, for a cost that depends on c and not on the number of queries. Streams of 10 "
        "to 10,000 range queries over the real GSE41169 betas, c = 5 broad ones among narrow ones, at "
        "eps = 0.1 and 1, against the Laplace mechanism on every query. See docs/experiments.md."
    ),
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results/range-queries"),
    show_default=True,
    help="Directory for results.json and range-queries.png.",
)
@click.option(
    "--runs",
    type=click.IntRange(min=1),
    default=None,
    help="Streams per point [default: 200; 30 with --quick].",
)
@click.option("--seed", type=int, default=2019, show_default=True, help="Seed for the streams and noise.")
@click.option("--quick", is_flag=True, help="Up to 1,000 queries and 30 streams per point: seconds.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON on stdout.")
@needs_extra("attack")
def range_queries_command(out_dir: Path, runs: int | None, seed: int, quick: bool, as_json: bool) -> None:
    """Run the experiment, write its files and print the summary."""
    from mbeacon.experiments import range_queries

    config = range_queries.quick_config(seed=seed) if quick else range_queries.ExperimentConfig(seed=seed)
    if runs is not None:
        config = replace(config, runs=runs)
    results = _run_steps(range_queries, config)
    paths = _write(results, range_queries, out_dir, "range-queries")
    what = f"{config.runs} streams per point, seed {config.seed}"
    _finish(results, [_range_queries_table(results)], what, paths, as_json)


# --- PrivateSQL's truncation threshold ---------------------------------------------------------------


def _truncation_table(results: dict[str, Any]) -> Table:
    """A row per (cohort, epsilon): the learned bound against the true maximum, and the count's mean
    absolute error truncated at it, untruncated at the public cap, and untruncated at the true max."""
    low, high = results["range"]
    table = Table(
        title=f"Count of betas in [{low:g}, {high:g}]: mean absolute error (true max: not private)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for label in ("cohort", "max", "ε", "bound p10-p90", "truncated", f"cap {results['cap']}", "true max"):
        table.add_column(label, justify="left" if label == "cohort" else "right", no_wrap=True)
    for name, block in results["cohorts"].items():
        for c in block["cells"]:
            table.add_row(
                name,
                str(block["true_max"]),
                f"{c['epsilon']:g}",
                f"{c['bound_median']:g} ({c['bound_p10']:g}-{c['bound_p90']:g})",
                f"{c['truncated_error_mean']:.1f}",
                f"{c['capped_error_mean']:.1f}",
                f"{c['oracle_error_mean']:.1f}",
            )
    return table


@experiment.command(
    "truncation",
    help=(
        "PrivateSQL (PVLDB 2019): learn with AboveThreshold how many samples one patient may contribute, "
        "truncate to it and count at that sensitivity. Three made-up cohort structures (a few deeply "
        "sampled patients, longitudinal visits, one sample each) with real GSE41169 beta levels; the "
        "learned bound against the true maximum, and the count's error against untruncated counts, "
        "eps = 0.05 to 5. See docs/experiments.md."
    ),
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results/truncation"),
    show_default=True,
    help="Directory for results.json and truncation.png.",
)
@click.option(
    "--runs",
    type=click.IntRange(min=1),
    default=None,
    help="Runs per point [default: 1000; 100 with --quick].",
)
@click.option("--seed", type=int, default=2019, show_default=True, help="Seed for the cohorts and the noise.")
@click.option("--quick", is_flag=True, help="Three epsilons (0.1, 1, 5) and 100 runs per point.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON on stdout.")
@needs_extra("attack")
def truncation_command(out_dir: Path, runs: int | None, seed: int, quick: bool, as_json: bool) -> None:
    """Run the experiment, write its files and print the summary."""
    from mbeacon.experiments import truncation

    config = truncation.quick_config(seed=seed) if quick else truncation.ExperimentConfig(seed=seed)
    if runs is not None:
        config = replace(config, runs=runs)
    results = _run_steps(truncation, config)
    paths = _write(results, truncation, out_dir, "truncation")
    what = f"{config.runs} runs per point, seed {config.seed}"
    _finish(results, [_truncation_table(results)], what, paths, as_json)

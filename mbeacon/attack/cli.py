"""``mbeacon attack``: the membership-inference evaluation and the live attack on a running beacon."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mbeacon.lazy_group import LazyGroup


@click.group(cls=LazyGroup, lazy_subcommands={"live": "mbeacon.attack.live_cli:live"})
def attack() -> None:
    """Measure how well a defence resists membership inference, and what it costs in utility."""


@attack.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="TOML file: seed, repetitions, queries, strategy, [simulation], [grid] (docs/attack.md).",
)
@click.option("--quick", is_flag=True, help="A smaller cohort and grid (about a minute on two cores).")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("attack-report"),
    show_default=True,
    help="Directory for report.md, the figures and the result files.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result rows as JSON on stdout.")
@click.option(
    "--scheduler",
    default=None,
    metavar="ADDRESS",
    help="Run the settings on this Dask distributed scheduler (tcp://host:8786) instead of locally.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Local worker processes. [default: the usable CPUs]",
)
@click.option("--seed", type=int, default=None, help="Override the config's seed (results are reproducible).")
def evaluate(
    config_path: Path | None,
    quick: bool,
    out_dir: Path,
    as_json: bool,
    scheduler: str | None,
    workers: int | None,
    seed: int | None,
) -> None:
    """Evaluate every defence of the grid against the likelihood-ratio attack, on a simulated cohort.

    Members versus non-members of the same population; attack AUC and TPR at 1% FPR by queries per
    victim, utility on random and discovery queries, budget burn. Writes a report with figures to
    --out and prints the headline table.
    """
    from mbeacon.attack.evaluate import ConfigError, build, load_config, public_row, run_grid
    from mbeacon.attack.report import headline, write_report

    try:
        config = load_config(config_path, quick=quick)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    if seed is not None:
        config = config.model_copy(update={"seed": seed})
    started = time.perf_counter()
    err = Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as progress:
        task = progress.add_task("simulating the cohort and planning the attack", total=None)
        scenario = build(config)
        settings = len(config.grid.settings())
        progress.update(task, description="evaluating defence settings", total=settings, completed=0)
        try:
            rows = run_grid(
                config,
                scenario,
                scheduler=scheduler,
                workers=workers,
                on_progress=lambda done, _total: progress.update(task, completed=done),
            )
        except OSError as exc:  # an unreachable scheduler
            raise click.ClickException(f"cannot run on the Dask scheduler {scheduler}: {exc}") from exc
    report = write_report(rows, out_dir, description=scenario.description, config=config.model_dump())
    elapsed = time.perf_counter() - started
    if as_json:
        click.echo(json.dumps({"results": [public_row(r) for r in rows]}, allow_nan=False))
    else:
        import pandas as pd

        table = Table(title=f"Headline at {max(config.queries)} queries per victim ({scenario.description})")
        for column in ("setting", "AUC", "TPR@1%FPR", "utility random", "utility discovery", "burn/1000"):
            table.add_column(column, justify="left" if column == "setting" else "right")
        for _, r in headline(pd.DataFrame(rows)).iterrows():
            burn = r["burn_per_1000"]
            table.add_row(
                r["label"],
                f"{r['auc']:.3f}",
                f"{r['tpr_at_1pct_fpr']:.2f}",
                f"{r['utility_random']:.3f}",
                f"{r['utility_discovery']:.3f}",
                "-" if burn is None or burn != burn else f"{burn:.0f}",
            )
        Console(width=max(Console().width, 120)).print(table)
    err.print(f"{settings} settings in {elapsed:.0f} s; report: {report}")

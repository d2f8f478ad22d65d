"""``mbeacon attack``: the membership-inference evaluation and the live attack on a running beacon.

``evaluate`` runs the defence grid on a simulated cohort (:mod:`mbeacon.attack.evaluate`) and writes
a report. ``live`` is the attack as a real HTTP client of a running beacon (:mod:`mbeacon.attack.live`):
here the files are read, the progress bar drawn (on stderr) and the summary printed: a table on
stdout, or with ``--json`` the metrics as JSON on stdout (the table then goes to stderr). See
docs/attack.md and docs/attack-live.md.
"""

from __future__ import annotations

import json
import time
from concurrent.futures.process import BrokenProcessPool
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from mbeacon.attack.planning import LIVE_ATTACKERS, STRATEGIES
from mbeacon.cli._extras import needs_extra
from mbeacon.cli._ui import FiniteFloatRange, progress
from mbeacon.cli.lazy_group import HELP_OPTIONS, Group

if TYPE_CHECKING:
    import numpy as np

    from mbeacon.attack.live import LiveResult
    from mbeacon.store.priors import Prior


@click.group(cls=Group, context_settings=HELP_OPTIONS)
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
@needs_extra("attack")
def evaluate(
    config_path: Path | None,
    quick: bool,
    out_dir: Path,
    as_json: bool,
    scheduler: str | None,
    workers: int | None,
    seed: int | None,
) -> None:
    """Evaluate every defence of the grid against every attacker (rarest ranges, tracker), on a cohort.

    Members versus non-members of the same population; attack AUC and TPR at 1% FPR by queries per
    victim, utility on random and discovery queries, budget burn. Writes a report with figures to
    --out and prints the headline table.
    """
    from mbeacon.attack.evaluate import (
        EvaluationConfigError,
        build,
        load_evaluation_config,
        public_row,
        run_grid,
    )
    from mbeacon.attack.report import write_report
    from mbeacon.attack.report_selection import headline

    try:
        config = load_evaluation_config(config_path, quick=quick)
    except EvaluationConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    if seed is not None:
        config = config.model_copy(update={"seed": seed})
    started = time.perf_counter()
    err = Console(stderr=True)
    with progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
    ) as bar:
        task = bar.add_task("simulating the cohort and planning the attack", total=None)
        scenario = build(config)
        settings = len(config.grid.settings())
        bar.update(task, description="evaluating defence settings", total=settings, completed=0)
        try:
            rows = run_grid(
                config,
                scenario,
                scheduler=scheduler,
                workers=workers,
                on_progress=lambda done, _total: bar.update(task, completed=done),
            )
        except BrokenProcessPool as exc:  # a worker killed, most often by the kernel for memory
            raise click.ClickException(
                f"a worker process died while evaluating ({exc.__class__.__name__}); the usual cause is "
                "memory: run with fewer --workers, fewer queries or victims, or on a Dask cluster "
                "(--scheduler)"
            ) from None
        except OSError as exc:  # an unreachable scheduler
            raise click.ClickException(f"cannot run on the Dask scheduler {scheduler}: {exc}") from exc
    report = write_report(rows, out_dir, description=scenario.description, config=config.model_dump())
    elapsed = time.perf_counter() - started
    if as_json:
        click.echo(json.dumps({"results": [public_row(r) for r in rows]}, allow_nan=False))
    else:
        import pandas as pd

        table = Table(title=f"Headline at {max(config.queries)} queries per victim ({scenario.description})")
        columns = ("setting", "AUC", "attacker", "TPR@1%FPR", "utility random", "utility discovery")
        for column in (*columns, "burn/1000"):
            table.add_column(column, justify="left" if column == "setting" else "right")
        for _, r in headline(pd.DataFrame(rows)).iterrows():
            burn = r["burn_per_1000"]
            table.add_row(
                r["label"],
                f"{r['auc']:.3f}",
                str(r.get("attacker", "rarest")),
                f"{r['tpr_at_1pct_fpr']:.2f}",
                f"{r['utility_random']:.3f}",
                f"{r['utility_discovery']:.3f}",
                "-" if burn is None or burn != burn else f"{burn:.0f}",
            )
        Console(width=max(Console().width, 120)).print(table)
    err.print(f"{settings} settings in {elapsed:.0f} s; report: {report}")


_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


def _load_prior(prior: tuple[Path, str] | None, table: Path | None) -> Prior | None:
    """The public prior from a store (``--prior STORE NAME``) or a reference table (``--prior-table``)."""
    from mbeacon.store.errors import DataError
    from mbeacon.store.priors import load_prior, prior_from_table_file

    if prior is not None and table is not None:
        raise click.UsageError("give --prior or --prior-table, not both")
    try:
        if prior is not None:
            return load_prior(prior[0], prior[1])
        if table is not None:
            return prior_from_table_file(table, name="reference")
    except (DataError, OSError, KeyError, ValueError) as error:
        raise click.BadParameter(str(error), param_hint="--prior/--prior-table") from None
    return None


def _pool(path: Path | None, probe_ids: np.ndarray) -> np.ndarray | None:
    """``--pool``: people x the victims' probes."""
    import numpy as np

    from mbeacon.attack.live import read_profiles

    if path is None:
        return None
    return read_profiles(path).reindex(probe_ids).T.to_numpy(dtype=np.float64)


def _table(result: LiveResult) -> Table:
    """The short summary: one row per query count (with non-members), else the top-scoring victims."""
    rows = result.by_queries()
    if rows:
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("queries", justify="right")
        table.add_column("AUC", justify="right")
        table.add_column("TPR at 1% FPR", justify="right")
        for row in rows:
            table.add_row(str(row["queries"]), f"{row['auc']:.3f}", f"{row['tpr_at_1pct_fpr']:.3f}")
        return table
    scores = result.score_table().sort_values("score", ascending=False)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="highest scores (no non-members given)")
    for name in ("sample", "score", "answered", "positive"):
        table.add_column(name, justify="left" if name == "sample" else "right")
    for _, row in scores.head(10).iterrows():
        table.add_row(str(row["sample"]), f"{row['score']:.2f}", str(row["answered"]), str(row["positive"]))
    return table


def _answers_line(result: LiveResult) -> str:
    counts = result.answers.counts()
    refused = counts["refused"] + counts["exhausted"]
    unasked = int(((result.answers.sources == "unasked") & result.askable).sum())
    return (
        f"answers: {counts['data']} from the data, {counts['prior']} from the prior, {refused} refused, "
        f"{unasked} not asked; {result.requests} requests in {result.seconds:.1f} s"
    )


def _coalition_line(coalition: dict) -> str:
    bound = coalition["bound"]
    limit = (
        "no provable bound (no DP guarantee)"
        if bound is None
        else f"provable bound at eps = {bound['epsilon']:g}: AUC {bound['maxAuc']:.3f}, "
        f"TPR at 1% FPR {bound['maxTprAt1PctFpr']:.3f}"
    )
    return (
        f"coalition of {coalition['keys']} key{'s' if coalition['keys'] != 1 else ''} "
        f"(pooled reconstruction, {coalition['rows']} answers): AUC {coalition['auc']:.3f}, "
        f"TPR at 0.1% FPR {coalition['tpr_at_0_1pct_fpr']:.3f}, "
        f"at 1% FPR {coalition['tpr_at_1pct_fpr']:.3f}; {limit}"
    )


def _keys(given: tuple[str, ...], path: Path | None) -> list[str]:
    """The keys of ``--key`` (repeated, or ``MBEACON_KEY``) and ``--keys FILE``, each once, in order.
    Never echoed: a bad file is named by its line number only."""
    keys = [k.strip() for k in given if k.strip()]
    if path is not None:
        try:
            lines = path.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as error:
            raise click.BadParameter(
                f"cannot read {path}: {type(error).__name__}", param_hint="--keys"
            ) from None
        for number, line in enumerate(lines, start=1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            if len(text.split()) != 1:
                raise click.BadParameter(f"{path}, line {number}: one key a line", param_hint="--keys")
            keys.append(text)
    if not keys:
        raise click.UsageError("give a researcher's key: --key KEY (or MBEACON_KEY) or --keys FILE")
    return list(dict.fromkeys(keys))


@attack.command()
@click.option(
    "--url",
    required=True,
    envvar="MBEACON_URL",
    show_envvar=True,
    help="The beacon: http://HOST:PORT or its /api root (as `mbeacon demo` prints it).",
)
@click.option(
    "--key",
    "key",
    multiple=True,
    envvar="MBEACON_KEY",
    show_envvar=True,
    help="A researcher's API key (the variable keeps it out of shell history); repeat it for a coalition "
    "of keys: profiles round-robin over the keys.",
)
@click.option(
    "--keys",
    "keys_path",
    type=_FILE,
    default=None,
    help="A file of API keys, one a line (blank lines and # comments skipped), added to --key.",
)
@click.option(
    "--victims",
    "victims_path",
    required=True,
    type=_FILE,
    help="Probes x samples CSV of the victims' profiles (probe ids in the first column).",
)
@click.option(
    "--nonmembers",
    "nonmembers_path",
    type=_FILE,
    help="Same format: people known not to be in the cohort; gives AUC, TPR and the ROC.",
)
@click.option("--dataset", default=None, help="Dataset id [default: the one dataset the key sees].")
@click.option(
    "--queries", type=click.IntRange(min=1), default=100, show_default=True, help="Queries per profile."
)
@click.option(
    "--noise-sd",
    type=FiniteFloatRange(min=0.0, max=1.0),
    default=0.02,
    show_default=True,
    help="sd of the attacker's measurement noise (sets the width of each range).",
)
@click.option(
    "--z",
    type=FiniteFloatRange(min=0.0, min_open=True),
    default=2.0,
    show_default=True,
    help="Half-width of each range in noise sds.",
)
@click.option(
    "--missing",
    type=FiniteFloatRange(min=0.0, max=1.0),
    default=0.005,
    show_default=True,
    help="The attacker's guess of the share of missing values in the cohort.",
)
@click.option(
    "--prior",
    "prior_ref",
    type=(click.Path(exists=True, file_okay=False, path_type=Path), str),
    default=None,
    metavar="STORE NAME",
    help="The public prior, from a store [default: a stand-in from the profiles].",
)
@click.option(
    "--prior-table",
    type=_FILE,
    default=None,
    help="The public prior from a probes x samples reference table instead.",
)
@click.option(
    "--pool",
    "pool_path",
    type=_FILE,
    default=None,
    help="Profiles of other people of the cohort's population, only to judge how rare a range is "
    "[default: the victims and non-members, each left out of its own estimate].",
)
@click.option(
    "--strategy",
    type=click.Choice(STRATEGIES),
    default="pooled",
    show_default=True,
    help="How the rarest ranges are found (see mbeacon/attack/planning.py).",
)
@click.option(
    "--attacker",
    type=click.Choice(("auto", *LIVE_ATTACKERS)),
    default="auto",
    show_default=True,
    help="rarest: the rarest ranges around each value; tracker: ranges holding T - 1 patients plus the "
    "value's (docs/attack.md); auto: tracker against a threshold answered exactly (T > 1), else rarest.",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the order profiles are asked in."
)
@click.option(
    "--timeout",
    type=FiniteFloatRange(min=0.1),
    default=60.0,
    show_default=True,
    help="Seconds per HTTP request.",
)
@click.option(
    "--retries",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="Retries of a request after a 5xx or a connection error.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results/attack-live"),
    show_default=True,
    help="Directory for scores.csv, metrics.json and roc.png.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON on stdout.")
@needs_extra("attack")
def live(
    url: str,
    key: tuple[str, ...],
    keys_path: Path | None,
    victims_path: Path,
    nonmembers_path: Path | None,
    dataset: str | None,
    queries: int,
    noise_sd: float,
    z: float,
    missing: float,
    prior_ref: tuple[Path, str] | None,
    prior_table: Path | None,
    pool_path: Path | None,
    strategy: str,
    attacker: str,
    seed: int,
    timeout: float,
    retries: int,
    out_dir: Path,
    as_json: bool,
) -> None:
    """Run the likelihood-ratio membership attack against a running beacon, over HTTP.

    Reads the dataset's public parameters, asks each profile's most telling range queries in batch
    POSTs, scores every profile and, with --nonmembers, reports AUC and TPR at 1% FPR by number of
    queries. Against an SVT² dataset one key has one budget: once it is spent the remaining queries
    go unanswered (counted as refused or not asked). With --attacker tracker the queries are
    adaptive: each profile's next range depends on its answers so far.

    Several keys (--key repeated, --keys FILE) form a coalition: profiles are asked round-robin over
    the keys, and where the answers carry counts (none; svt2-noisy, online-pmw, cohort-pmw with a
    CONTROLLED key) every key's answers are pooled into one reconstruction of the cohort.
    """
    from mbeacon.attack.live import (
        BeaconClient,
        DatasetParams,
        LiveAttackError,
        LiveSettings,
        read_profiles,
        run_live_attack,
        stack_profiles,
        write_outputs,
    )

    console = Console(stderr=as_json)
    errors = Console(stderr=True)
    keys = _keys(key, keys_path)
    prior = _load_prior(prior_ref, prior_table)
    if strategy == "prior" and prior is None:
        raise click.UsageError("--strategy prior needs the public prior (--prior or --prior-table)")
    try:
        victims = read_profiles(victims_path)
        nonmembers = read_profiles(nonmembers_path) if nonmembers_path is not None else None
        profiles = stack_profiles(victims, nonmembers)
        pool = _pool(pool_path, profiles.probe_ids)
    except LiveAttackError as error:
        raise click.BadParameter(str(error)) from None
    settings = LiveSettings(queries, noise_sd, z, missing, strategy, seed, dataset, attacker)
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("queries"),
        TimeElapsedColumn(),
    )
    with progress(*columns) as bar:
        task = bar.add_task("reading the dataset's parameters", total=None)
        asking = ["asking"]

        def start(params: DatasetParams, total: int) -> None:
            asking[0] = f"asking {params.id} ({params.mechanism})"
            bar.update(task, total=total, description=asking[0])

        def advance(done: int) -> None:
            bar.update(task, advance=done, description=asking[0])

        def wait(seconds: float, reason: str) -> None:
            bar.update(task, description=f"{reason}: waiting {seconds:.0f} s")

        try:
            with ExitStack() as stack:
                clients = [
                    stack.enter_context(BeaconClient(url, k, timeout=timeout, retries=retries, on_wait=wait))
                    for k in keys
                ]
                result = run_live_attack(
                    clients, profiles, settings, prior=prior, pool=pool, on_start=start, on_progress=advance
                )
        except LiveAttackError as error:
            message = str(error)
            for k in keys:  # belt and braces: no message shows a key
                message = message.replace(k, "<key>")
            raise click.ClickException(message) from None
    paths = write_outputs(result, out_dir)
    params = result.params
    console.print(
        f"[bold]{params.id}[/bold] at {result.url}: {result.defence.label}, N = {params.patients}; "
        f"{int(result.profiles.labels.sum())} victims, {int((~result.profiles.labels).sum())} non-members, "
        f"{result.queries} queries each ({result.attacker} attacker"
        + ("" if result.keys == 1 else f", {result.keys} keys")
        + ")",
        soft_wrap=True,
    )
    console.print(_table(result))
    console.print(_answers_line(result), soft_wrap=True)
    if result.coalition is not None:
        console.print(_coalition_line(result.coalition), soft_wrap=True)
    for warning in result.warnings:
        errors.print(f"[yellow]warning:[/yellow] {warning}", soft_wrap=True)
    console.print("wrote " + ", ".join(f"[bold]{p}[/bold]" for p in paths.values()), soft_wrap=True)
    if as_json:
        click.echo(json.dumps(result.summary(), indent=2))

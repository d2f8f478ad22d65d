"""``mbeacon budget``: show, set and reset privacy budgets, and advise a dataset's mechanism and parameters.

``show``, ``set`` and ``reset`` read and change the ledger (every change is written to its audit log).
``advise`` recommends a dataset's mechanism and parameters from its public size and prior, across
every mechanism the service serves: the work is in :mod:`mbeacon.attack.advisor`; here the options
are parsed, progress is shown on stderr, and the ranked table and the dataset policy's TOML, to paste
verbatim, are printed, with ``frontier.png`` and ``advice.json`` written. Its exit status: 0 with a
recommendation, 1 when no setting of the grid meets the target, 2 on bad input.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from mbeacon.cli._extras import needs_extra
from mbeacon.cli._service import LedgerGroup, cli_actor, config_option, load_ledger_config, open_ledger
from mbeacon.cli._ui import FiniteFloatRange, confirmed, fail, progress, table_console, yes_option
from mbeacon.cli.lazy_group import HELP_OPTIONS


@click.group(cls=LedgerGroup, context_settings=HELP_OPTIONS)
def budget() -> None:
    """Show, set and reset privacy budgets (every change is written to the audit log)."""


@budget.command("show")
@click.argument("holder", required=False)
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def budget_show(holder: str | None, config_path: Path | None, as_json: bool) -> None:
    """Budgets of HOLDER (a user name, group:NAME, global or anonymous), or of everyone."""
    from mbeacon.beacon import operations
    from mbeacon.beacon.holders import Holder

    wanted = Holder.from_command_line(holder) if holder else None
    ledger = open_ledger(load_ledger_config(config_path), create=False)
    accounts = operations.budget_accounts(ledger, wanted)
    rows = [
        {"holder": a.principal, "dataset": a.dataset, "queries": queries, **a.budget(),
         "parameters": a.params.to_json(), "opened": a.created}
        for a, queries in accounts
    ]  # fmt: skip
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table("holder", "dataset", "queries", "positives", "epsilon spent / total", "variant", "opened")
    for r in rows:
        spent = "-" if r["epsilonSpent"] is None else f"{r['epsilonSpent']:.4g} / {r['epsilonTotal']:.4g}"
        positives = "-" if r["positivesTotal"] is None else f"{r['positivesUsed']} / {r['positivesTotal']}"
        table.add_row(r["holder"], r["dataset"], str(r["queries"]), positives, spent,
                      r["parameters"]["variant"], r["opened"][:19])  # fmt: skip
    table_console().print(table)
    if not rows:
        whose = f"{wanted} has" if wanted else "the ledger has"
        click.echo(f"{whose} no budget accounts yet (one opens with its holder's first query)", err=True)


@budget.command("set")
@click.argument("holder")
@click.argument("dataset")
@config_option
@click.option("--epsilon", type=FiniteFloatRange(min=0, min_open=True), default=None)
@click.option("--c", "positives", type=click.IntRange(min=1), default=None, help="Positives per budget.")
@click.option("--threshold", type=click.IntRange(min=1), default=None, help="T, the minimum count for yes.")
@click.option("--variant", type=click.Choice(["single", "redraw"]), default=None)
@click.option("--count-epsilon", type=FiniteFloatRange(min=0), default=None)
def budget_set(
    holder: str, dataset: str, config_path: Path | None, epsilon: float | None, positives: int | None,
    threshold: int | None, variant: str | None, count_epsilon: float | None,
) -> None:  # fmt: skip
    """Parameters for HOLDER's next account on DATASET (the dataset's policy fills the rest).

    An account already open keeps the parameters it was promised until `budget reset`.
    """
    from mbeacon.beacon import operations
    from mbeacon.beacon.holders import Holder

    target = Holder.from_command_line(holder)
    config = load_ledger_config(config_path)
    operations.check_dataset(dataset, _store_datasets(config))
    change = {"epsilon": epsilon, "c": positives, "threshold": threshold, "variant": variant,
              "count_epsilon": count_epsilon}  # fmt: skip
    change = {key: value for key, value in change.items() if value is not None}
    actor = cli_actor(config)
    done = operations.override_budget(config, open_ledger(config), target, dataset, change, actor=actor)
    click.echo(json.dumps(done.params.to_json(), indent=2))
    if done.account_open:
        click.echo(
            f"{target} has an open account on {dataset}: it keeps its promised parameters; "
            f"the new ones apply after `mbeacon budget reset {holder} {dataset} --yes`",
            err=True,
        )


@budget.command("reset")
@click.argument("holder")
@click.argument("dataset")
@config_option
@yes_option
def budget_reset(holder: str, dataset: str, config_path: Path | None, yes: bool) -> None:
    """Close HOLDER's account on DATASET: the next query opens a fresh budget (audited)."""
    from mbeacon.beacon import operations
    from mbeacon.beacon.holders import Holder

    target = Holder.from_command_line(holder)
    config = load_ledger_config(config_path)
    ledger = open_ledger(config, create=False)
    operations.check_dataset(dataset, _store_datasets(config))
    confirmed(
        f"Give {target} a fresh privacy budget on {dataset} (they can learn up to twice as much)?",
        "a reset gives a fresh privacy budget (the holder can learn up to twice as much)",
        yes=yes,
    )
    existed = operations.reset_budget(ledger, target, dataset, actor=cli_actor(config))
    click.echo(f"{'reset' if existed else 'no account to reset for'} {target} on {dataset}", err=True)


def _store_datasets(config) -> list[str]:
    """The datasets of the configured store (an override or reset names one of them, as in the API)."""
    from mbeacon.store.cohorts import CohortStore
    from mbeacon.store.errors import DataError

    try:
        return CohortStore(config.store).ids()
    except DataError as error:  # a store that is not there: the configuration's mistake, one line
        fail(str(error))


# --- advise ---------------------------------------------------------------------------------------

#: Rows of the settings table printed (every setting is in advice.json).
TABLE_ROWS = 15


def _service_config(config_path: Path | None) -> Any:
    """The service configuration (``--config``, else ``$MBEACON_CONFIG``), or None when there is none."""
    from mbeacon.beacon.config import ConfigError, load_config

    path = config_path or os.environ.get("MBEACON_CONFIG")
    if not path:
        return None
    try:
        return load_config(path)
    except ConfigError as error:
        fail(str(error))


def _number(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _setting(c) -> str:
    """The mechanism as the policy names it, with the variant where there is one."""
    if c.mechanism is None:
        return c.defence
    return f"{c.mechanism} {c.variant}" if c.is_svt2 else c.mechanism


def _table(title: str, rows: list, min_random: float, min_discovery: float) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("#", "mechanism", "eps", "c", "T", "margin", "r", "worst AUC ± sd", "at", "by", "risk",
                 "discovery", "random", "explore", "burn/1k"):  # fmt: skip
        table.add_column(name, justify="left" if name in ("mechanism", "by") else "right", no_wrap=True)
    for i, c in enumerate(rows, 1):
        risk = "green" if c.meets_target else "red"
        random = "green" if (c.utility_random or 0) >= min_random else "red"
        discovery = "green" if (c.utility_discovery or 0) >= min_discovery else "red"
        table.add_row(
            str(i),
            _setting(c),
            "-" if c.epsilon is None else f"{c.epsilon:g}",
            "-" if c.c is None else str(c.c),
            str(c.threshold),
            "-" if c.margin is None else f"{c.margin:g}",
            "-" if c.release_share is None else f"{c.release_share:.3g}",
            f"{c.worst_auc:.3f} ± {c.worst_auc_sd:.3f}",
            str(c.worst_queries),
            c.attacker or "-",
            f"[{risk}]{c.risk:.3f}[/]",
            f"[{discovery}]{_number(c.utility_discovery)}[/]",
            f"[{random}]{_number(c.utility_random)}[/]",
            _number(c.utility_exploration),
            _number(c.burn_per_1000, 0),
        )
    return table


def _mechanisms(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...] | None:
    """``--mechanisms svt2,online-pmw``: a comma-separated subset of the served mechanisms."""
    from mbeacon.attack.advisor import MECHANISMS

    if value is None:
        return None
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    unknown = [n for n in names if n not in MECHANISMS]
    if unknown or not names:
        raise click.BadParameter(
            f"{', '.join(unknown) or 'none given'}: choose among {', '.join(MECHANISMS)} (comma-separated)"
        )
    return names


def _run(store: Path, dataset: str, prior: str | None, service_config: Any, config, workers: int | None):
    from mbeacon.attack.advisor import advise

    columns = (
        TextColumn("[bold]advise[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with progress(*columns) as bar:
        task = bar.add_task("reading the public inputs", total=None)

        def on_progress(stage: str, done: int, total: int) -> None:
            bar.update(task, description=stage, completed=done, total=total)

        return advise(
            store,
            dataset,
            prior=prior,
            service_config=service_config,
            config=config,
            workers=workers,
            on_progress=on_progress,
        )


@budget.command("advise")
@click.option(
    "--store",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Store directory. [default: the store of --config]",
)
@click.option("--dataset", "dataset", required=True, help="The dataset to advise on (its id in the store).")
@click.option(
    "--prior",
    default=None,
    help="Prior the beacon uses for this dataset. [default: the dataset's configured prior "
    "(--config: its prior, else default_prior), else the only prior in the store]",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Service configuration, for the store and the dataset's prior. [default: $MBEACON_CONFIG]",
)
@click.option(
    "--target-auc",
    type=FiniteFloatRange(0.5, 1.0, min_open=True),
    default=0.6,
    show_default=True,
    help="The attack AUC (plus its sd) the setting must stay under.",
)
@click.option(
    "--queries",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Queries an attacker asks per victim (the attack is scored at every count up to this).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for frontier.png and advice.json. [default: results/advice/DATASET]",
)
@click.option(
    "--probes",
    type=click.IntRange(min=1),
    default=None,
    help="Probes of the synthetic cohort (more: a stronger attacker, slower). "
    "[default: 20,000; 5,000 with --quick; at most those the prior and dataset share]",
)
@click.option(
    "--dmp-fraction",
    type=FiniteFloatRange(0.0, 1.0),
    default=None,
    help="Share of probes where the synthetic disease differs from the prior (a sensitivity check: "
    "the real cohort's DMPs are unknown). [default: 0.02, as the simulation]",
)
@click.option(
    "--mechanisms",
    callback=_mechanisms,
    default=None,
    metavar="LIST",
    help="Comma-separated mechanisms to compare, among svt2, svt2-margin, svt2-noisy, online-pmw. "
    "[default: all]",
)
@click.option(
    "--max-epsilon",
    type=FiniteFloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Leave out settings whose per-account epsilon is larger: 10 is about the largest bound a "
    "privacy officer can still state for one account.",
)
@click.option(
    "--min-random",
    type=FiniteFloatRange(0.0, 1.0),
    default=0.97,
    show_default=True,
    help="Random-query utility a setting must reach to rank first (among those meeting the AUC target).",
)
@click.option(
    "--min-discovery",
    type=FiniteFloatRange(0.0, 1.0),
    default=0.75,
    show_default=True,
    help="Discovery utility a setting must reach to rank first (among those meeting the AUC target).",
)
@click.option(
    "--seed", type=int, default=1, show_default=True, help="Seed of the synthetic cohort and noise."
)
@click.option(
    "--quick", is_flag=True, help="Fewer probes, victims, repetitions and settings (about a minute)."
)
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Processes. [default: the CPUs]")
@click.option("--json", "as_json", is_flag=True, help="Print the advice as JSON on stdout.")
@needs_extra("attack")
def advise(
    store: Path | None,
    dataset: str,
    prior: str | None,
    config_path: Path | None,
    target_auc: float,
    queries: int,
    out_dir: Path | None,
    probes: int | None,
    dmp_fraction: float | None,
    mechanisms: tuple[str, ...] | None,
    max_epsilon: float | None,
    min_random: float,
    min_discovery: float,
    seed: int,
    quick: bool,
    workers: int | None,
    as_json: bool,
) -> None:
    """Recommend a dataset's mechanism and parameters, from public inputs only.

    Simulates the membership-inference attacks (rarest ranges and the tracker) on a synthetic cohort
    of the dataset's size N drawn from its prior (both public; the cohort's beta values are never
    opened), over a grid of settings of every served mechanism (SVT², SVT² with margins, SVT² with a
    noisy release, Online PMW). Among the settings whose strongest attack AUC plus its sd stays under
    --target-auc at up to --queries queries per victim, those reaching --min-random and
    --min-discovery rank first; then by discovery, random-query and exploration utility and the
    smaller epsilon. Prints the ranked settings and the [datasets.ID] table of the dataset policy;
    writes frontier.png and advice.json. See docs/advisor.md.
    """
    from mbeacon.attack.advisor import AdvisorConfig, plot_frontier
    from mbeacon.store.errors import DataError

    service_config = _service_config(config_path)
    if store is None:
        if service_config is None:
            raise click.UsageError("give --store STORE (or --config FILE, whose store is used)")
        store = Path(service_config.store)
    base = AdvisorConfig.quick if quick else AdvisorConfig
    chosen = {"probes": probes, "dmp_fraction": dmp_fraction, "mechanisms": mechanisms}
    try:
        config = base(
            target_auc=target_auc,
            queries=queries,
            seed=seed,
            min_random=min_random,
            min_discovery=min_discovery,
            max_epsilon=max_epsilon,
            **{k: v for k, v in chosen.items() if v is not None},
        )
    except ValueError as error:  # e.g. --max-epsilon below every epsilon of the grid
        raise click.UsageError(str(error)) from None
    try:
        advice = _run(store, dataset, prior, service_config, config, workers)
    except DataError as error:
        fail(str(error))
    out_dir = out_dir or Path("results") / "advice" / dataset
    out_dir.mkdir(parents=True, exist_ok=True)
    png = plot_frontier(advice, out_dir / "frontier.png")
    payload = advice.to_json()
    payload["frontier"] = str(png)
    (out_dir / "advice.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")

    console = Console(stderr=as_json)
    if not console.is_terminal:
        console = Console(stderr=as_json, width=max(console.width, 160))
    good = [c for c in advice.settings if c.meets_target]
    corner = [c for c in good if c.meets_utility]
    shown = advice.settings[:TABLE_ROWS]
    reference = f"prior re-estimated from {advice.reference} reference people, " if advice.reference else ""
    console.print(
        f"[bold]{dataset}[/]: N = {advice.patients}, prior {advice.prior} v{advice.prior_version} "
        f"({advice.prior_origin}); synthetic cohort of {advice.probes:,} probes, {reference}"
        f"{advice.victims} + {advice.victims} victims, {config.repetitions} repetitions, "
        f"{advice.discovery_queries} discovery + {advice.random_queries} random queries; "
        f"{advice.seconds:.0f} s"
    )
    title = (
        f"Settings of {', '.join(config.mechanisms)}, best first: {len(good)} of {len(advice.settings)} "
        f"meet risk = worst AUC + {config.margin_sd:g} sd <= {target_auc:g} at up to {queries} queries, "
        f"{len(corner)} of them also discovery >= {min_discovery:g} and random >= {min_random:g}"
    )
    console.print(_table(title, shown, min_random, min_discovery))
    if len(advice.settings) > len(shown):
        console.print(f"  ... {len(advice.settings) - len(shown)} more in {out_dir / 'advice.json'}")
    console.print(_table("For comparison (not served)", advice.comparisons, min_random, min_discovery))
    for warning in advice.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    rec = advice.recommendation
    if rec is not None:
        console.print(
            f"[bold green]Recommendation:[/] {rec.label}: attack AUC {rec.worst_auc:.3f} ± "
            f"{rec.worst_auc_sd:.3f} ({rec.attacker} attacker; target {target_auc:g}), discovery utility "
            f"{_number(rec.utility_discovery)}, random-query utility {_number(rec.utility_random)}, "
            f"exploration utility {_number(rec.utility_exploration)}. "
            "The dataset policy, to paste into the service configuration:"
        )
        console.print(advice.toml(), markup=False, highlight=False, soft_wrap=True)
    else:
        closest = advice.closest
        console.print(
            f"[bold red]No setting of the grid keeps the attack under AUC {target_auc:g}[/] at "
            f"{queries} queries per victim"
            + (f"; the closest is {closest.label} (risk {closest.risk:.3f})" if closest else "")
            + ". Lower --queries (cap the queries per user), raise the target, or try a smaller epsilon."
        )
    console.print(f"Wrote {png} and {out_dir / 'advice.json'}.")
    if as_json:
        click.echo(json.dumps(payload, indent=2))
    if rec is None:
        sys.exit(1)


@budget.command("advise-cohort")
@click.option("--patients", type=click.IntRange(min=1), required=True, help="Patients in the cohort.")
@click.option("--researchers", type=click.IntRange(min=1), required=True,
              help="Budget holders (users, or groups under scope = \"group\") expected to ask.")  # fmt: skip
@click.option("--max-auc", type=FiniteFloatRange(0.5, 1.0, min_open=True, max_open=True), default=0.6,
              show_default=True, help="The largest attack AUC any coalition may reach.")  # fmt: skip
@click.option("--count-error", type=FiniteFloatRange(0.0, 1.0, min_open=True), default=0.1, show_default=True,
              help="The noise scale of a released count, as a share of the cohort.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def advise_cohort_command(
    patients: int, researchers: int, max_auc: float, count_error: float, as_json: bool
) -> None:
    """The cohort's epsilon, positives and quota for cohort-pmw, from the promise and who will ask.

    The epsilon is the largest whose best possible attack, by any coalition of askers, stays within
    --max-auc; c keeps every released count's noise within --count-error of the cohort; the quota
    shares c among the researchers. Prints the dataset policy's TOML to paste.
    """
    from mbeacon.attack.advisor.cohort import advise_cohort

    advice = advise_cohort(patients, researchers, max_auc=max_auc, count_error=count_error)
    if as_json:
        click.echo(json.dumps(advice.to_json(), indent=2))
        return
    bound = advice.bound
    click.echo(
        f"{patients} patients, {researchers} researchers: epsilon {advice.epsilon:g} for the cohort, "
        f"c {advice.c} positives in all, quota {advice.quota} per budget holder; a released count's noise "
        f"scale is {advice.count_noise_scale:.1f} patients.\n"
        f"No coalition of askers can reach an attack AUC above {bound.auc:.4f}, a true-positive rate above "
        f"{bound.tpr_at_fpr_0_1pct:.4f} at 0.1% false positives or {bound.tpr_at_fpr_1pct:.4f} at 1%.\n"
    )
    click.echo("[datasets.NAME]")
    for key, value in advice.policy().items():
        click.echo(f"{key} = {json.dumps(value)}")

"""``mbeacon audit``: statistical tests that each privacy mechanism keeps its promised epsilon."""

from __future__ import annotations

import json
import sys

import click
from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from mbeacon.cli._ui import FiniteFloatRange, finite, progress, table_console
from mbeacon.cli.lazy_group import HELP_OPTIONS


@click.command(context_settings=HELP_OPTIONS)
@click.option(
    "--mechanism",
    "-m",
    "mechanisms",
    multiple=True,
    metavar="NAME",
    help="Audit only this mechanism (repeatable). Default: all. See --list.",
)
@click.option(
    "--runs",
    type=click.IntRange(min=1000),
    default=None,
    help="Runs per input in the hypothesis test (the event search uses a quarter). [default: 100000]",
)
@click.option(
    "--epsilon",
    type=FiniteFloatRange(min=0.0, min_open=True),
    default=0.5,
    show_default=True,
    help="The claimed epsilon every mechanism is configured for.",
)
@click.option(
    "--seed",
    type=int,
    default=None,
    help="Seed of the audit's randomness (reproducible verdicts). [default: fixed]",
)
@click.option(
    "--confidence",
    type=FiniteFloatRange(0.5, 0.9999),
    default=0.95,
    show_default=True,
    help="Confidence level of the empirical epsilon lower bound.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON on stdout.")
@click.option("--verbose", "-v", is_flag=True, help="Also show the inputs and event each test used.")
@click.option("--list", "list_only", is_flag=True, help="List the auditable mechanisms and exit.")
def audit(
    mechanisms: tuple[str, ...],
    runs: int | None,
    epsilon: float,
    seed: int | None,
    confidence: float,
    as_json: bool,
    verbose: bool,
    list_only: bool,
) -> None:
    """Statistically test that each mechanism is epsilon-DP (StatDP's method).

    For every mechanism: search neighbouring inputs and output events for the largest probability
    ratio, then run a fresh sample and test H0 "the mechanism is epsilon-DP" with an exact test. A
    small p-value is evidence of a violation; the epsilon lower bound says how large the true cost
    must at least be. The incorrect SVT variants of Lyu, Su and Li are included as controls: they
    must be caught.
    """
    from mbeacon.privacy.audit import DEFAULT_RUNS, DEFAULT_SEED, all_targets, run_audit

    catalogue = all_targets(epsilon)
    if list_only:
        for name, target in catalogue.items():
            click.echo(f"{name:30s} expect {target.expect:9s} {target.description}")
        return
    unknown = [m for m in mechanisms if m not in catalogue]
    if unknown:
        raise click.BadParameter(
            f"unknown mechanism {', '.join(unknown)}; choose from: {', '.join(catalogue)}",
            param_hint="--mechanism",
        )
    chosen = [catalogue[m] for m in mechanisms] if mechanisms else list(catalogue.values())
    with progress(
        TextColumn("[bold]audit[/] {task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    ) as bar:
        task = bar.add_task(chosen[0].name, total=len(chosen))

        def advance(result) -> None:
            bar.advance(task)
            done = int(bar.tasks[0].completed)
            if done < len(chosen):
                bar.update(task, description=chosen[done].name)

        results = run_audit(
            chosen,
            runs=runs or DEFAULT_RUNS,
            seed=DEFAULT_SEED if seed is None else seed,
            confidence=confidence,
            on_result=advance,
        )
    if as_json:
        payload = [
            {
                "mechanism": r.mechanism,
                "claimed_epsilon": r.claimed_epsilon,
                "verdict": r.verdict,
                "p_value": r.p_value,
                "epsilon_lower_bound": finite(r.epsilon_lower_bound),
                "confidence": r.confidence,
                "expected": r.expect,
                "inputs": r.inputs,
                "event": r.event,
                "counts": list(r.counts),
                "runs": r.runs,
                "seconds": round(r.seconds, 2),
            }
            for r in results
        ]
        click.echo(json.dumps(payload, indent=2))
        return
    table = Table(title=f"DP audit at claimed epsilon {epsilon:g} ({results[0].runs:,} runs per input)")
    columns = ["mechanism", "expected", "verdict", "p-value", f"eps >= ({confidence:.0%})"]
    for col in columns + (["inputs and event"] if verbose else []):
        table.add_column(col, overflow="fold")
    for r in results:
        ok = r.verdict == r.expect or r.expect == "probe"
        row = [
            r.mechanism,
            r.expect,
            f"[{'green' if ok else 'red'}]{r.verdict}[/]",
            f"{r.p_value:.3g}",
            f"{r.epsilon_lower_bound:.3f}",
        ]
        table.add_row(*row, *([f"{r.inputs}: {r.event}"] if verbose else []))
    table_console().print(table)
    shipped = [r.mechanism for r in results if r.expect == "pass" and r.verdict != "pass"]
    missed = [r.mechanism for r in results if r.expect == "violation" and r.verdict != "violation"]
    if missed:
        click.echo(f"note: the audit did not catch the faulty control(s) {', '.join(missed)}", err=True)
    if shipped:
        click.echo(f"VIOLATION in a mechanism we ship: {', '.join(shipped)}", err=True)
        sys.exit(1)

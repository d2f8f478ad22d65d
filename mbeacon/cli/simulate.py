"""``mbeacon simulate``: realistic simulated methylation cohorts in real file formats, with ground truth.

The model and its calibration against real data are in ``docs/simulation.md``; the work is done by
:func:`mbeacon.store.simulate.simulate`.
"""

from __future__ import annotations

from pathlib import Path

import click
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from mbeacon.cli._extras import require_extra
from mbeacon.cli._ui import FiniteFloatRange, progress, reports_data_errors
from mbeacon.cli.lazy_group import HELP_OPTIONS
from mbeacon.store import simulate as sim

_DEFAULTS = sim.SimulationConfig()
#: Probes on the 450K array (the shipped population means).
ARRAY_PROBES = 485_577


def _size(n_bytes: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n_bytes < 1000 or unit == "GB":
            return f"{n_bytes:.0f} {unit}" if unit == "B" else f"{n_bytes:.1f} {unit}"
        n_bytes /= 1000
    return ""  # unreachable


@click.command("simulate", context_settings=HELP_OPTIONS)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory to write the files into (created if needed; files of an earlier run are replaced).",
)
@click.option(
    "--probes",
    type=click.IntRange(2, ARRAY_PROBES),
    default=_DEFAULTS.probes,
    show_default=True,
    help="CpG probes: a random subset of the 450K array's probes, real ids (485577: all).",
)
@click.option(
    "--patients",
    type=click.IntRange(min=1),
    default=_DEFAULTS.patients,
    show_default=True,
    help="Members: the beacon's cohort (disease population), written as a GEO series matrix.",
)
@click.option(
    "--nonmembers",
    type=click.IntRange(min=0),
    default=_DEFAULTS.nonmembers,
    show_default=True,
    help="Non-members of the same disease population (0: no file).",
)
@click.option(
    "--reference",
    type=click.IntRange(min=0),
    default=_DEFAULTS.reference,
    show_default=True,
    help="Independent general-population samples, for priors (0: no file).",
)
@click.option(
    "--dmp-fraction",
    type=FiniteFloatRange(0.0, 1.0),
    default=_DEFAULTS.dmp_fraction,
    show_default=True,
    help="Fraction of probes whose disease mean differs (|delta| in [0.1, 0.3]).",
)
@click.option(
    "--noise",
    type=FiniteFloatRange(0.0, 1.0),
    default=_DEFAULTS.noise,
    show_default=True,
    help="sd of the measurement noise of the re-measured profiles.",
)
@click.option(
    "--missing",
    type=FiniteFloatRange(0.0, 1.0, max_open=True),
    default=_DEFAULTS.missing,
    show_default=True,
    help="Fraction of missing values in the measured files.",
)
@click.option(
    "--neighbour-correlation",
    type=FiniteFloatRange(0.0, sim.MAX_NEIGHBOUR_CORRELATION),
    default=_DEFAULTS.neighbour_correlation,
    show_default=True,
    help="Latent correlation of neighbouring probes (co-methylation; see docs/simulation.md).",
)
@click.option("--seed", type=click.IntRange(min=0), default=sim.DEFAULT_SEED, show_default=True)
@click.option(
    "--report",
    is_flag=True,
    help="Also write report.png and report.json: simulated versus real data (needs --reference >= 2).",
)
@reports_data_errors
def simulate(
    out_dir: Path,
    probes: int,
    patients: int,
    nonmembers: int,
    reference: int,
    dmp_fraction: float,
    noise: float,
    missing: float,
    neighbour_correlation: float,
    seed: int,
    report: bool,
) -> None:
    """Simulate realistic methylation cohorts for a membership-inference evaluation.

    Writes into OUT: the members as a GEO series matrix (cohort_series_matrix.txt.gz), non-members and
    a general-population reference sample as CSV matrices, noisy re-measurements of every member and
    non-member (what an attacker holds), and truth.json (parameters, sample ids of each group, the DMPs
    with their effects). Deterministic for a seed.
    """
    if report:
        require_extra("mbeacon simulate --report", "attack")  # its figure is drawn with matplotlib
    if report and reference < 2:
        raise click.BadParameter(
            "--report compares the reference sample with real data: use 2 or more", param_hint="--reference"
        )
    config = sim.SimulationConfig(
        probes=probes,
        patients=patients,
        nonmembers=nonmembers,
        reference=reference,
        dmp_fraction=dmp_fraction,
        noise=noise,
        missing=missing,
        seed=seed,
        neighbour_correlation=neighbour_correlation,
    )
    with progress(
        TextColumn("[bold]simulate[/] probes"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
    ) as bar:
        task = bar.add_task("probes", total=probes)
        result = sim.simulate(out_dir, config, report=report, progress=lambda done: bar.advance(task, done))

    table = Table(
        title=f"mbeacon simulate: {out_dir}", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False
    )
    for column, justify in (("file", "left"), ("probes", "right"), ("samples", "right"), ("size", "right")):
        table.add_column(column, justify=justify)
    table.add_column("content")
    for name, info in result.files.items():
        table.add_row(
            name,
            f"{info['rows']:,}" if "rows" in info else "",
            f"{info['columns']:,}" if "columns" in info else "",
            _size(info["bytes"]),
            info["content"],
        )
    out = Console()
    out.print(table)
    out.print(
        f"{result.probes:,} probes ({result.dmps:,} DMPs, {result.bimodal:,} bimodal); "
        f"{result.groups['members']:,} members, {result.groups['nonmembers']:,} non-members, "
        f"{result.groups['reference']:,} reference samples; seed {seed}; {result.seconds:.1f} s",
        highlight=False,
    )
    if result.realism is not None:
        corr = result.realism["neighbour_correlation"]
        out.print(
            f"neighbour correlation: simulated {corr['simulated_all_reference']:.3f} "
            f"(target {corr['latent_target']:g}). Figure and numbers: "
            f"{out_dir / sim.REPORT_FILE}, {out_dir / sim.REPORT_NUMBERS_FILE}",
            highlight=False,
        )

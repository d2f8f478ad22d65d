"""``mbeacon ingest``, ``mbeacon datasets`` and ``mbeacon demo-data``: the operator's commands for the
cohort store."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from mbeacon.cli._ui import FiniteFloatRange, progress, reports_data_errors

FORMATS = ("auto", "geo", "matrix", "gdc")


@click.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--store", required=True, type=click.Path(path_type=Path), help="Store directory (created if absent)."
)
@click.option("--dataset", "dataset_id", required=True, help="Dataset id, e.g. GSE41169-blood.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="auto",
    show_default=True,
    help="geo: GEO series matrix; matrix: CSV/TSV or supplementary beta matrix (with or without "
    "detection p-value columns); gdc: folder of GDC/TCGA level-3 files plus a sample sheet.",
)
@click.option(
    "--manifest",
    type=click.Path(exists=True, path_type=Path),
    help="Illumina manifest (or probe,chromosome,position table) for probe positions.",
)
@click.option("--name", default="", help="Human-readable dataset name.")
@click.option("--description", default="", help="What the cohort is.")
@click.option("--tissue", default="", help="Tissue, e.g. 'whole blood'.")
@click.option("--disease", default="", help="Disease or condition of the cohort.")
@click.option("--assembly", default="", help="Genome assembly of the manifest positions, e.g. GRCh37.")
@click.option(
    "--pval-cut",
    type=FiniteFloatRange(0, 1),
    default=None,
    help="Mask beta values whose detection p-value is above this cut (matrix format).",
)
@click.option(
    "--sample-sheet", type=click.Path(exists=True, path_type=Path), help="GDC sample sheet (gdc format)."
)
@click.option("--replace", is_flag=True, help="Replace an existing dataset with the same id (atomically).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@reports_data_errors
def ingest(
    path: Path,
    store: Path,
    dataset_id: str,
    fmt: str,
    manifest: Path | None,
    name: str,
    description: str,
    tissue: str,
    disease: str,
    assembly: str,
    pval_cut: float | None,
    sample_sheet: Path | None,
    replace: bool,
    as_json: bool,
) -> None:
    """Ingest a methylation matrix file into the store as a new dataset.

    The file is streamed and validated; the dataset appears in the store only once it is complete.
    Bad input is refused with the file, line and column at fault (exit status 2), and the store is
    left exactly as it was.
    """
    from mbeacon.store.cohorts import Metadata
    from mbeacon.store.ingest import ingest as run_ingest

    meta = Metadata(name=name, description=description, tissue=tissue, disease=disease, assembly=assembly)
    with progress(
        SpinnerColumn(),
        TextColumn("[bold]ingest[/] {task.description}"),
        TextColumn("{task.completed:,} probes"),
        TimeElapsedColumn(),
    ) as bar:
        task = bar.add_task(str(path), total=None)
        info = run_ingest(
            path,
            store,
            dataset_id,
            format=fmt,
            metadata=meta,
            manifest=manifest,
            pval_cut=pval_cut,
            sample_sheet=sample_sheet,
            replace=replace,
            on_rows=lambda n: bar.advance(task, n),
        )
    if as_json:
        click.echo(json.dumps(info.to_json(), indent=2))
        return
    click.echo(
        f"ingested {info.id!r} ({info.source_format}): {info.patients:,} patients x {info.probes:,} probes, "
        f"missing {info.missing_fraction:.2%}, values {info.value_min:.4g}..{info.value_max:.4g}"
        f"{', with positions' if info.has_positions else ''}\n"
        f"store: {store}  checksum: {info.checksum}"
    )


@click.group(invoke_without_command=True)
@click.option("--store", required=True, type=click.Path(path_type=Path), help="Store directory.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
@reports_data_errors
def datasets(ctx: click.Context, store: Path, as_json: bool) -> None:
    """List the datasets of a store (or manage them with a subcommand)."""
    from mbeacon.store.cohorts import CohortStore

    ctx.obj = store
    if ctx.invoked_subcommand is not None:
        return
    infos = CohortStore(store).list()
    if as_json:
        click.echo(json.dumps([i.to_json() for i in infos], indent=2))
        return
    table = Table(title=f"datasets in {store}")
    for col in ("id", "name", "patients", "probes", "missing", "tissue", "disease", "created"):
        table.add_column(col)
    for i in infos:
        table.add_row(
            i.id,
            i.name,
            f"{i.patients:,}",
            f"{i.probes:,}",
            f"{i.missing_fraction:.2%}",
            i.tissue,
            i.disease,
            i.created,
        )
    Console().print(table)
    if not infos:
        click.echo("(no datasets yet: add one with `mbeacon ingest`)")


@datasets.command("remove")
@click.argument("dataset_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
@reports_data_errors
def remove_dataset(store: Path, dataset_id: str, yes: bool) -> None:
    """Remove a dataset from the store (atomically: it is there or it is gone)."""
    from mbeacon.store.cohorts import CohortStore

    target = CohortStore(store)
    target.info(dataset_id)  # refuse unknown ids before asking
    if not yes and sys.stdin.isatty():
        click.confirm(f"Remove dataset {dataset_id!r} from {store}?", abort=True)
    target.remove(dataset_id)
    click.echo(f"removed {dataset_id!r}")


@click.command("demo-data")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("data/demo"),
    show_default=True,
    help="Where the demo store and its simulated source files go.",
)
@reports_data_errors
def demo_data(data_dir: Path) -> None:
    """Build the small deterministic demo cohort and prior (once; a few seconds)."""
    from mbeacon.store.demo import ensure_demo

    demo = ensure_demo(data_dir)
    click.echo(
        f"demo store: {demo.store}\n  dataset: {demo.dataset}\n  prior:   {demo.prior}\n"
        f"  simulated source files (members, non-members, re-measurements, truth): {demo.simulation}"
    )

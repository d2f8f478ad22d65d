"""``mbeacon ingest``, ``mbeacon datasets`` and ``mbeacon demo-data``: the operator's commands for the
cohort store."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click
from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from mbeacon.cli._ui import (
    FiniteFloatRange,
    confirmed,
    progress,
    reports_data_errors,
    table_console,
    yes_option,
)
from mbeacon.cli.lazy_group import HELP_OPTIONS, Group

FORMATS = ("auto", "geo", "matrix", "gdc")


@click.command(context_settings=HELP_OPTIONS)
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
@click.option(
    "--platform",
    default="",
    help="Array platform, e.g. GPL13534, whose annotation locates the probes (default: a GEO series "
    "matrix's !Series_platform_id).",
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
@click.option(
    "--patient-key",
    help="GEO characteristic naming each sample's patient (default: the first of patient id, patient, "
    "individual, subject, donor, participant, case id that the samples have).",
)
@click.option(
    "--patients",
    "patients_table",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="CSV/TSV table of sample and patient columns: whose each sample is (any format).",
)
@click.option(
    "--contribution-bound",
    type=click.IntRange(min=1),
    default=None,
    help="Declare the most samples of one patient to count (free). Default with patient ids: learn it.",
)
@click.option(
    "--bound-epsilon",
    type=FiniteFloatRange(0, 100, min_open=True),
    default=0.5,
    show_default=True,
    help="Epsilon spent once, for the dataset, to learn the contribution bound from the patient ids.",
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
    platform: str,
    name: str,
    description: str,
    tissue: str,
    disease: str,
    assembly: str,
    pval_cut: float | None,
    sample_sheet: Path | None,
    patient_key: str | None,
    patients_table: Path | None,
    contribution_bound: int | None,
    bound_epsilon: float,
    replace: bool,
    as_json: bool,
) -> None:
    """Ingest a methylation matrix file into the store as a new dataset.

    The file is streamed and validated; the dataset appears in the store only once it is complete.
    Bad input is refused with the file, line and column at fault (exit status 2), and the store is
    left exactly as it was. Where the input says whose each sample is (GEO characteristics, GDC case
    ids, --patients), the ids are stored with the most samples of one patient the service will count:
    declared, or learned with the sparse vector technique at --bound-epsilon (docs/store.md).
    """
    from mbeacon.beacon.contribution import bound_rule
    from mbeacon.store.cohorts import Metadata
    from mbeacon.store.ingest import IngestReport
    from mbeacon.store.ingest import ingest as run_ingest

    report = IngestReport()
    meta = Metadata(name=name, description=description, tissue=tissue, disease=disease, assembly=assembly,
                    platform=platform)  # fmt: skip
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
            patient_key=patient_key,
            patients=patients_table,
            bound_rule=bound_rule(contribution_bound, bound_epsilon),
            report=report,
        )
    if as_json:
        click.echo(json.dumps({**info.to_json(), "ingest": dataclasses.asdict(report)}, indent=2))
        return
    click.echo(
        f"ingested {info.id!r} ({info.source_format}): {info.patients:,} "
        f"{'samples' if info.has_patient_ids else 'patients'} x {info.probes:,} probes, "
        f"missing {info.missing_fraction:.2%}, values {info.value_min:.4g}..{info.value_max:.4g}"
        f"{', with positions' if info.has_positions else ''}"
        f"{f', platform {info.platform}' if info.platform else ''}\n"
        f"{_patients_line(info)}"
        f"store: {store}  checksum: {info.checksum}"
    )
    for note in _ingest_notes(report, pval_cut, store):
        click.echo(f"note: {note}", err=True)


def _ingest_notes(report, pval_cut: float | None, store: Path) -> list[str]:
    """What the ingest did that the summary does not show: a store it created, p-values it used or not."""
    notes = []
    if report.store_created:
        notes.append(f"the store {store} did not exist: this ingest created it")
    columns = f"{report.pvalue_columns} detection p-value column{'' if report.pvalue_columns == 1 else 's'}"
    if report.pvalue_columns and not report.pvalues_applied:
        notes.append(f"{columns} ignored: every beta value was kept (--pval-cut P masks the values whose "
                     "p-value is above P; --replace to ingest again)")  # fmt: skip
    elif report.pvalues_applied:
        notes.append(f"{columns} applied: {report.masked:,} value{'' if report.masked == 1 else 's'} with a "
                     f"p-value above {pval_cut:g} masked (stored as missing)")  # fmt: skip
    return notes


def _patients_line(info) -> str:
    """What ingest learned about patients, for the operator (the exact maximum is not published)."""
    if not info.has_patient_ids:
        return ""
    cost = f", learning spent epsilon {info.bound_epsilon:g} once" if info.bound_source == "learned" else ""
    return (
        f"{info.patient_count:,} patients, at most {info.max_samples_per_patient} samples each; "
        f"counted at most {info.contribution_bound} per patient ({info.bound_source}{cost})\n"
    )


@click.group(cls=Group, invoke_without_command=True, context_settings=HELP_OPTIONS)
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
    table_console().print(table)
    if not infos:
        click.echo("(no datasets yet: add one with `mbeacon ingest`)")


@datasets.command("remove")
@click.argument("dataset_id")
@yes_option
@click.pass_obj
@reports_data_errors
def remove_dataset(store: Path, dataset_id: str, yes: bool) -> None:
    """Remove a dataset from the store (atomically: it is there or it is gone)."""
    from mbeacon.store.cohorts import CohortStore

    target = CohortStore(store)
    target.info(dataset_id)  # refuse unknown ids before asking
    confirmed(f"Remove dataset {dataset_id!r} from {store}?", f"removing {dataset_id!r} deletes its data",
              yes=yes)  # fmt: skip
    target.remove(dataset_id)
    click.echo(f"removed {dataset_id!r}")


@click.command("demo-data", context_settings=HELP_OPTIONS)
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

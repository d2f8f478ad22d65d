"""``mbeacon annotation``: platform annotations (probe positions and genes) in the cohort store."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from mbeacon.cli._ui import progress, reports_data_errors, table_console
from mbeacon.cli.lazy_group import HELP_OPTIONS, Group

_STORE = click.option("--store", required=True, type=click.Path(path_type=Path), help="Store directory.")


@click.group(cls=Group, context_settings=HELP_OPTIONS)
def annotation() -> None:
    """Probe annotations of array platforms: positions and genes for region and gene queries.

    A dataset is located through the annotation of its platform: the one its GEO series matrix names
    (!Series_platform_id), the one given by `mbeacon ingest --platform`, or a link made here.
    """


@annotation.command("import")
@click.argument("table", type=click.Path(path_type=Path))
@_STORE
@click.option(
    "--platform", default=None, help="Platform id, e.g. GPL13534 (required when the file names none)."
)
@click.option(
    "--build",
    default=None,
    help="Genome build of the positions, e.g. GRCh37 (required when the file states none; hg19 = GRCh37).",
)
@click.option("--replace", is_flag=True, help="Replace the platform's annotation (atomically).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@reports_data_errors
def import_table(
    table: Path, store: Path, platform: str | None, build: str | None, replace: bool, as_json: bool
) -> None:
    """Import a GEO platform table or an Illumina manifest as a platform's probe annotation.

    Reads IlmnID or ID, CHR, MAPINFO, UCSC_RefGene_Name and Relation_to_UCSC_CpG_Island columns, in
    an Illumina manifest CSV ([Heading]/[Assay]/[Controls]), a GEO platform table (SOFT, between
    !platform_table_begin and !platform_table_end) or a plain CSV/TSV; gzip or not. The platform id
    and the genome build are the file's where it states them (!Platform_geo_accession, a Genome_Build
    column), else --platform and --build. Bad input is refused with the file, line and column at
    fault (exit status 2) and the store is left as it was.
    """
    from mbeacon.store.annotation import import_annotation

    with progress(
        SpinnerColumn(),
        TextColumn("[bold]import[/] {task.description}"),
        TextColumn("{task.completed:,} probes"),
        TimeElapsedColumn(),
    ) as bar:
        task = bar.add_task(str(table), total=None)
        info = import_annotation(
            table,
            store,
            platform=platform,
            build=build,
            replace=replace,
            on_rows=lambda n: bar.advance(task, n),
        )
    if as_json:
        click.echo(json.dumps(info.to_json(), indent=2))
        return
    click.echo(
        f"imported {info.platform!r} ({info.source_format}, {info.build}): {info.probes:,} probes, "
        f"{info.positioned:,} with positions, {info.genes:,} genes\nstore: {store}"
    )


@annotation.command("list")
@_STORE
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@reports_data_errors
def list_annotations(store: Path, as_json: bool) -> None:
    """List the imported annotations and the datasets located through each."""
    from mbeacon.store.annotation import AnnotationStore
    from mbeacon.store.cohorts import CohortStore

    annotations = AnnotationStore(store)
    infos = annotations.list()
    links = annotations.links()
    platform_of = {d.id: links.get(d.id) or d.platform for d in CohortStore(store).list()}
    users = {i.platform: sorted(d for d, p in platform_of.items() if p == i.platform) for i in infos}
    if as_json:
        click.echo(json.dumps([{**i.to_json(), "datasets": users[i.platform]} for i in infos], indent=2))
        return
    table = Table(title=f"annotations in {store}")
    for col in ("platform", "build", "probes", "positioned", "genes", "format", "datasets", "created"):
        table.add_column(col)
    for i in infos:
        table.add_row(
            i.platform,
            i.build,
            f"{i.probes:,}",
            f"{i.positioned:,}",
            f"{i.genes:,}",
            i.source_format,
            ", ".join(users[i.platform]),
            i.created,
        )
    table_console().print(table)
    missing = sorted({p for p in platform_of.values() if p} - set(users))
    if missing:
        click.echo(f"platforms of datasets with no annotation imported yet: {', '.join(missing)}")
    if not infos:
        click.echo("(no annotations yet: add one with `mbeacon annotation import`)")


@annotation.command("link")
@click.argument("dataset_id")
@click.argument("platform", required=False)
@_STORE
@click.option(
    "--unlink", is_flag=True, help="Drop the dataset's link (its ingest-time platform applies again)."
)
@reports_data_errors
def link(dataset_id: str, platform: str | None, store: Path, unlink: bool) -> None:
    """Link a dataset to a platform, whose annotation then locates its probes.

    The link takes precedence over the platform recorded at ingest. The platform's annotation may be
    imported before or after linking.
    """
    from mbeacon.store.annotation import AnnotationStore
    from mbeacon.store.cohorts import CohortStore
    from mbeacon.store.errors import DataError

    CohortStore(store).info(dataset_id)  # an unknown dataset is refused by name
    if unlink == (platform is not None):
        raise DataError("give a PLATFORM to link, or --unlink (not both)")
    AnnotationStore(store).link(dataset_id, platform)
    click.echo(f"unlinked {dataset_id!r}" if unlink else f"linked {dataset_id!r} to platform {platform!r}")

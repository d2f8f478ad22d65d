"""Probe annotation: where each probe of a platform is (chromosome, position, genome build) and which
genes it is in, read from a GEO platform table or an Illumina manifest and kept in the store.

:func:`import_annotation` reads a table and publishes it; :class:`AnnotationStore` lists, loads and
links; :class:`ProbeAnnotation` answers "which probes are in this region / this gene".
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mbeacon.store.annotation.index import ProbeAnnotation
from mbeacon.store.annotation.reader import (
    AnnotationTable,
    canonical_build,
    canonical_chromosome,
    read_annotation,
)
from mbeacon.store.annotation.storage import AnnotationInfo, AnnotationStore, check_platform_id
from mbeacon.store.cohorts import CohortStore
from mbeacon.store.errors import DataError

__all__ = [
    "AnnotationInfo",
    "AnnotationStore",
    "AnnotationTable",
    "ProbeAnnotation",
    "canonical_build",
    "canonical_chromosome",
    "check_platform_id",
    "import_annotation",
    "read_annotation",
]


def _settle(what: str, from_file: str, given: str | None, option: str, example: str, path: str) -> str:
    """The value stated by the file or given by the operator; both must agree, one must exist."""
    if given and from_file and given != from_file:
        raise DataError(f"{option} {given!r} contradicts the file's {what} {from_file!r}", path=path)
    value = given or from_file
    if not value:
        raise DataError(f"the table does not state its {what}: give {option} (e.g. {example})", path=path)
    return value


def import_annotation(
    path: str | Path,
    store: str | Path,
    *,
    platform: str | None = None,
    build: str | None = None,
    replace: bool = False,
    on_rows: Callable[[int], None] | None = None,
) -> AnnotationInfo:
    """Read the table at ``path`` and publish it as the annotation of its platform, atomically.

    The platform id is the file's (GEO's ``!Platform_geo_accession``) or ``platform``; the genome
    build the file's (a ``Genome_Build`` column or heading line) or ``build``. Where the file states
    one, a different value given here is refused; where it states none, it must be given.
    """
    CohortStore(store, create=True)  # an annotation may come before the store's first dataset
    target = AnnotationStore(store)
    if platform:
        check_platform_id(platform)
        if not replace and target.path_of(platform).exists():
            raise DataError(
                f"platform {platform!r} already has an annotation in {target.root}: import with --replace "
                "to replace it atomically"
            )  # said before the table is read; write() keeps its own check
    table = read_annotation(path, on_rows=on_rows)
    where = str(path)
    chosen = check_platform_id(
        _settle("platform id", table.platform, platform, "--platform", "GPL13534", where)
    )
    given_build = canonical_build(build) if build else None
    genome = _settle("genome build", table.build, given_build, "--build", "GRCh37", where)
    annotation = ProbeAnnotation.from_table(table, chosen, genome)
    return target.write(annotation, source_file=where, source_format=table.format, replace=replace)

"""Ingest: a methylation file in a real format -> a published cohort in the store."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mbeacon.store.annotation import check_platform_id, read_annotation
from mbeacon.store.cohorts import CHUNK_ROWS, CohortStore, DatasetInfo, Manifest, Metadata
from mbeacon.store.errors import DataError, IngestError
from mbeacon.store.patients import BoundRule, contributions, source_patient_ids


def read_manifest(path: str | Path) -> Manifest:
    """Probe positions from an Illumina manifest CSV, a GEO platform table or a plain table with probe,
    chromosome and position columns: the reader of platform annotations
    (:func:`mbeacon.store.annotation.read_annotation`, which names the accepted layouts and columns),
    so a manifest ingested with a dataset and an imported platform annotation are read alike. A
    damaged file raises IngestError naming the file, line and column.
    """
    table = read_annotation(path)
    chromosome = np.array([b"chr" + c if c else b"" for c in table.chromosome.tolist()], dtype="S64")
    return Manifest(table.probe_ids.astype("S64"), chromosome, table.position)


@dataclasses.dataclass
class IngestReport:
    """What an ingest did that the dataset's own info does not say, for the operator to read."""

    store_created: bool = False  # the store folder did not exist: this ingest made it
    pvalue_columns: int = 0  # detection p-value columns in the file
    pvalues_applied: bool = False  # masked with the cut (else the columns were ignored)
    masked: int = 0  # values the cut turned missing


def ingest(
    path: str | Path,
    store: str | Path,
    dataset_id: str,
    *,
    format: str = "auto",
    metadata: Metadata | None = None,
    manifest: str | Path | None = None,
    pval_cut: float | None = None,
    sample_sheet: str | Path | None = None,
    replace: bool = False,
    on_rows: Callable[[int], None] | None = None,
    patient_key: str | None = None,
    patients: str | Path | None = None,
    bound_rule: BoundRule | None = None,
    report: IngestReport | None = None,
) -> DatasetInfo:
    """Read ``path`` in its format, validate it, and publish it as ``dataset_id`` atomically.

    Patient ids come from the input (GEO characteristics, ``patient_key`` naming which; GDC case ids)
    or from the table ``patients``; see :mod:`mbeacon.store.patients`. With ids, ``bound_rule`` gives
    the contribution bound recorded with them (declared, or learned by SVT: the caller's choice).
    ``report``, when given, is filled in with what the ingest did (:class:`IngestReport`). A store
    folder this call creates is removed again if the ingest fails: a failed ingest leaves nothing.
    """
    from mbeacon.store.readers import open_matrix

    try:
        source = open_matrix(path, format, pval_cut=pval_cut, sample_sheet=sample_sheet)
    except ValueError as error:  # an option that does not fit this file (e.g. a sample sheet for a CSV)
        raise IngestError(str(error), path=str(path)) from None
    patient_ids = source_patient_ids(source, key=patient_key, table=patients)
    bound = bound_rule(contributions(patient_ids)) if patient_ids is not None and bound_rule else None
    positions = read_manifest(manifest) if manifest is not None else None
    metadata = _with_platform(metadata or Metadata(), source.metadata)
    report = report if report is not None else IngestReport()
    report.pvalue_columns = source.tally.get("pvalue_columns", 0)
    report.pvalues_applied = pval_cut is not None and report.pvalue_columns > 0
    created = _new_folders(Path(store))
    report.store_created = bool(created)
    target = CohortStore(store, create=True)
    try:
        if not replace and target.path_of(dataset_id).exists():
            # said here, before the rows are read, and naming the way out; write() keeps its own check
            raise DataError(
                f"dataset {dataset_id!r} already exists in {target.root}: ingest with --replace to replace "
                "it atomically (replace=True in Python), or choose another id"
            )
        info = target.write(
            dataset_id,
            list(source.samples),
            ((batch.probe_ids, batch.values) for batch in source.blocks(CHUNK_ROWS)),
            metadata=metadata,
            source_file=str(path),
            source_format=source.format,
            manifest=positions,
            replace=replace,
            on_rows=on_rows,
            patients=patient_ids,
            bound=bound,
        )
    except BaseException:
        if created:  # only what this call made, outermost first: never a folder that existed before
            shutil.rmtree(created[0], ignore_errors=True)
        raise
    report.masked = source.tally.get("masked", 0)
    return info


def _new_folders(store: Path) -> list[Path]:
    """The folders of ``store``'s path that do not exist yet, outermost first."""
    missing = []
    for folder in [store.absolute(), *store.absolute().parents]:
        if folder.exists():
            break
        missing.append(folder)
    return missing[::-1]


def _with_platform(metadata: Metadata, source: dict[str, str]) -> Metadata:
    """``metadata`` with its platform: as given, else the GEO series matrix's ``!Series_platform_id``
    (when it names one platform), which links the dataset to that platform's annotation."""
    if metadata.platform:
        check_platform_id(metadata.platform)
        return metadata
    stated = source.get("Series_platform_id", "").split()
    if len(stated) == 1:
        return dataclasses.replace(metadata, platform=check_platform_id(stated[0]))
    return metadata

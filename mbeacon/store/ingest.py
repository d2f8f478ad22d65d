"""Ingest: a methylation file in a real format -> a published cohort in the store."""

from __future__ import annotations

import csv
import gzip
import io
import math
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mbeacon.store.cohorts import CohortStore, DatasetInfo, Manifest, Metadata
from mbeacon.store.errors import DataError, IngestError

_PROBE_COLUMNS = ("ilmnid", "name", "probe_id", "probe", "id_ref", "id")
_CHROM_COLUMNS = ("chr", "chromosome", "chrom", "chromosome_36", "chromosome_37")
_POS_COLUMNS = ("mapinfo", "position", "pos", "start", "coordinate_36", "coordinate_37")


def _open_text(path: Path) -> io.TextIOBase:
    raw = path.open("rb")
    head = raw.read(2)
    raw.seek(0)
    stream = gzip.open(raw) if head == b"\x1f\x8b" else raw  # noqa: SIM115 - the wrapper owns it
    return io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline="")


def read_manifest(path: str | Path) -> Manifest:
    """Probe positions from an Illumina manifest CSV (its ``[Assay]`` section) or a plain table.

    Accepted header names: probe ``IlmnID``/``Name``/``probe_id``, chromosome ``CHR``/``chromosome``,
    position ``MAPINFO``/``position``. Lines before the header (the Illumina ``[Heading]`` block) are
    skipped; the ``[Controls]`` section ends the table. A damaged file (corrupt gzip, a bad CSV quote,
    a probe id that is not ASCII or longer than 64 characters, a position that is not a whole number)
    raises IngestError.
    """
    path = Path(path)
    if not path.is_file():
        raise IngestError("manifest file not found", path=str(path))
    try:
        return _read_manifest(path)
    except (OSError, EOFError, zlib.error) as error:
        raise IngestError(f"cannot read the manifest (corrupt gzip?): {error}", path=str(path)) from None
    except csv.Error as error:
        raise IngestError(f"not a readable CSV/TSV table: {error}", path=str(path)) from None


def _position(text: str, *, path: Path, line: int, column: int) -> int:
    """A 1-based position (empty: unknown, -1); anything but a non-negative whole number is refused."""
    if not text:
        return -1
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and number >= 0 and number == int(number) and number < 2**62):
        raise IngestError(f"position {text[:40]!r} is not a number", path=str(path), line=line, column=column)
    return int(number)


def _read_manifest(path: Path) -> Manifest:
    ids, chroms, positions = [], [], []
    with _open_text(path) as handle:
        sample = handle.read(65536)
        handle.seek(0)
        delimiter = "\t" if sample.count("\t") > sample.count(",") else ","
        reader = csv.reader(handle, delimiter=delimiter)
        header = None
        for line_no, row in enumerate(reader, start=1):
            if header is None:
                lowered = [c.strip().lower() for c in row]
                if any(c in _PROBE_COLUMNS for c in lowered) and any(c in _POS_COLUMNS for c in lowered):
                    header = lowered
                    col_id = next(lowered.index(c) for c in _PROBE_COLUMNS if c in lowered)
                    col_chr = next((lowered.index(c) for c in _CHROM_COLUMNS if c in lowered), None)
                    col_pos = next(lowered.index(c) for c in _POS_COLUMNS if c in lowered)
                continue
            if not row or row[0].startswith("["):
                break
            try:
                probe = row[col_id].strip()
                position = row[col_pos].strip()
                chrom = row[col_chr].strip() if col_chr is not None else ""
            except IndexError:
                raise IngestError("ragged manifest row", path=str(path), line=line_no) from None
            if not probe.isascii() or not 0 < len(probe) <= 64:
                raise IngestError(
                    f"probe id {probe[:70]!r} is not 1 to 64 ASCII characters",
                    path=str(path),
                    line=line_no,
                    column=col_id + 1,
                )
            if not chrom.isascii() or len(chrom) > 60:
                raise IngestError(
                    f"chromosome {chrom[:70]!r} is not a short ASCII name",
                    path=str(path),
                    line=line_no,
                    column=(col_chr or 0) + 1,
                )
            ids.append(probe)
            chroms.append(chrom if not chrom or chrom.lower().startswith("chr") else f"chr{chrom}")
            positions.append(_position(position, path=path, line=line_no, column=col_pos + 1))
    if header is None:
        raise IngestError(
            "no header with a probe id and a position column (e.g. IlmnID, CHR, MAPINFO)", path=str(path)
        )
    if not ids:
        raise IngestError("the manifest has no probe rows", path=str(path))
    return Manifest(
        np.array(ids, dtype="S64"), np.array(chroms, dtype="S64"), np.array(positions, dtype=np.int64)
    )


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
) -> DatasetInfo:
    """Read ``path`` in its format, validate it, and publish it as ``dataset_id`` atomically."""
    from mbeacon.store.readers import open_matrix

    try:
        source = open_matrix(path, format, pval_cut=pval_cut, sample_sheet=sample_sheet)
    except ValueError as error:  # an option that does not fit this file (e.g. a sample sheet for a CSV)
        raise IngestError(str(error), path=str(path)) from None
    positions = read_manifest(manifest) if manifest is not None else None
    target = CohortStore(store, create=True)
    if not replace and target.path_of(dataset_id).exists():
        # said here, before the rows are read, and naming the way out; write() keeps its own check
        raise DataError(
            f"dataset {dataset_id!r} already exists in {target.root}: ingest with --replace to replace it "
            "atomically (replace=True in Python), or choose another id"
        )
    return target.write(
        dataset_id,
        list(source.samples),
        ((batch.probe_ids, batch.values) for batch in source.batches()),
        metadata=metadata,
        source_file=str(path),
        source_format=source.format,
        manifest=positions,
        replace=replace,
        on_rows=on_rows,
    )

"""GDC / TCGA level-3 methylation downloads (format ``"gdc"``): a folder of per-sample files.

The GDC sample sheet (``sample_sheet=``, or the one ``*sample_sheet*.tsv`` in the folder) maps each
``File Name`` to its ``Sample ID``; files are found directly in the folder, in ``<File ID>/`` (the
layout ``gdc-client`` downloads to), or anywhere below it if the name is unique. Sheet rows whose file
is missing are refused; files that the sheet does not list are ignored.

Per-sample files are tab-separated, either the current two-column ``level3betas`` files without a
header (``cg00000029\\t0.1234``, ``NA`` missing), or legacy TCGA files with a header line
(``Composite Element REF\\tBeta_value\\tGene_Symbol\\t...``), possibly preceded by a
``Hybridization REF\\t<barcode>...`` line; only the probe id and the beta value are read. The matrix
is the union of all files' probes, in order of first appearance (NaN where a sample lacks a probe);
it is assembled in memory once, as one float32 column per sample, then handed out in row batches.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import IngestError
from ._common import next_content_line, parsed_parts, skip_lines_then_chunks
from ._model import MatrixBatch, MatrixSource
from ._stream import LineReader, decode_line, label
from ._table import NULL_TOKENS, Layout, parse_number, split_fields

FILE_NAME = "File Name"
SAMPLE_ID = "Sample ID"
FILE_ID = "File ID"
CASE_ID = "Case ID"
_SHEET_METADATA = ("Project ID", "Data Category", "Data Type", "Sample Type")
_PROBE_HEADERS = frozenset(
    {"composite element ref", "id_ref", "probe", "probe_id", "probeid", "ilmnid", "id"}
)


@dataclass(frozen=True)
class SheetEntry:
    """One sample of the sheet: its id, the file found for it, and the sheet line (for messages)."""

    sample: str
    file: Path
    line: int


def is_sample_sheet_header(fields: list[str]) -> bool:
    """Whether a TSV header is a GDC sample sheet's (it has ``File Name`` and ``Sample ID``)."""
    names = {field.strip() for field in fields}
    return FILE_NAME in names and SAMPLE_ID in names


def find_sample_sheet(folder: Path) -> Path:
    """The one ``*sample_sheet*.tsv`` file in ``folder``; refuses none or several."""
    sheets = sorted(
        entry
        for entry in folder.iterdir()
        if entry.is_file() and "sample_sheet" in entry.name.lower() and entry.name.lower().endswith(".tsv")
    )
    if not sheets:
        raise IngestError(
            "no GDC sample sheet (*sample_sheet*.tsv) in this folder: download it from the GDC cart "
            "and put it here, or pass sample_sheet=",
            path=label(folder),
        )
    if len(sheets) > 1:
        names = ", ".join(sheet.name for sheet in sheets)
        raise IngestError(f"several sample sheets ({names}): pass sample_sheet=", path=label(folder))
    return sheets[0]


def _index_files(folder: Path, exclude: Path) -> dict[str, list[Path]]:
    """Every file below ``folder`` by its name (a GDC download nests files in ``<File ID>/``)."""
    found: dict[str, list[Path]] = {}
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            path = Path(root) / name
            if path != exclude:
                found.setdefault(name, []).append(path)
    return found


def read_sample_sheet(sheet: Path, folder: Path) -> tuple[list[SheetEntry], dict[str, str]]:
    """The sheet's samples with their files, and metadata (project, data type...) from its columns."""
    where = label(sheet)
    entries: list[SheetEntry] = []
    seen: dict[str, int] = {}
    columns: dict[str, int] = {}
    extra: dict[str, list[str]] = {name: [] for name in _SHEET_METADATA}
    cases: list[str] = []  # each sample's Case ID (its patient), when the sheet has the column
    files: dict[str, list[Path]] | None = None
    with LineReader(sheet) as reader:
        while (raw := next_content_line(reader)) is not None:
            line = reader.lines_read
            fields, open_quote = split_fields(decode_line(raw, where, line), "\t")
            fields = [field.strip() for field in fields]
            if not columns:
                columns = {name: index for index, name in enumerate(fields)}
                for required in (FILE_NAME, SAMPLE_ID):
                    if required not in columns:
                        raise IngestError(
                            f"not a GDC sample sheet: no {required!r} column in the header",
                            path=where,
                            line=line,
                        )
                header = fields
                continue
            if open_quote is not None:
                raise IngestError(
                    "a quote opened here is not closed", path=where, line=line, column=open_quote + 1
                )
            if len(fields) != len(header):
                raise IngestError(
                    f"row has {len(fields)} fields but the header has {len(header)}",
                    path=where,
                    line=line,
                    column=min(len(fields), len(header)) + 1,
                )
            name_col, sample_col = columns[FILE_NAME], columns[SAMPLE_ID]
            sample, name = fields[sample_col], fields[name_col]
            if not sample or sample in NULL_TOKENS:
                raise IngestError(
                    "missing sample id", path=where, line=line, column=f"{sample_col + 1} ({SAMPLE_ID})"
                )
            if sample in seen:
                raise IngestError(
                    f"duplicate sample id {sample!r} (first on line {seen[sample]})",
                    path=where,
                    line=line,
                    column=f"{sample_col + 1} ({SAMPLE_ID})",
                )
            seen[sample] = line
            if files is None:
                files = _index_files(folder, sheet)
            file_id = fields[columns[FILE_ID]] if FILE_ID in columns else ""
            path = _find_file(folder, files, name, file_id)
            if path is None:
                raise IngestError(
                    f"file {name!r} listed in the sample sheet is not in {label(folder)}",
                    path=where,
                    line=line,
                    column=f"{name_col + 1} ({FILE_NAME})",
                )
            entries.append(SheetEntry(sample, path, line))
            if CASE_ID in columns:
                cases.append(fields[columns[CASE_ID]])
            for key in _SHEET_METADATA:
                if key in columns and fields[columns[key]] not in extra[key]:
                    extra[key].append(fields[columns[key]])
    if not columns:
        raise IngestError("the sample sheet is empty", path=where, line=1)
    if not entries:
        raise IngestError("the sample sheet lists no files (header only)", path=where, line=reader.lines_read)
    metadata = {"sample_sheet": where}
    metadata.update({key: ", ".join(values) for key, values in extra.items() if values})
    if CASE_ID in columns:
        metadata["case_ids"] = "\t".join(cases)  # read by mbeacon.store.patients
    return entries, metadata


def _find_file(folder: Path, files: dict[str, list[Path]], name: str, file_id: str) -> Path | None:
    if not name or name != Path(name).name:
        return None
    for candidate in (folder / file_id / name if file_id else None, folder / name):
        if candidate is not None and candidate.is_file():
            return candidate
    matches = files.get(name, [])
    return matches[0] if len(matches) == 1 else None


def sample_file_layout(path: Path) -> tuple[Layout, int]:
    """How to read one per-sample file, and how many lines precede its data."""
    where = label(path)
    with LineReader(path) as reader:
        raw = next_content_line(reader)
        if raw is None:
            raise IngestError("the file is empty", path=where, line=1)
        line = reader.lines_read
        fields = [field.strip() for field in split_fields(decode_line(raw, where, line), "\t")[0]]
        if fields[0].lower() == "hybridization ref":  # legacy TCGA: barcode line, then the header
            raw = next_content_line(reader)
            if raw is None:
                raise IngestError("no header line after the Hybridization REF line", path=where, line=line)
            line = reader.lines_read
            fields = [field.strip() for field in split_fields(decode_line(raw, where, line), "\t")[0]]
            has_header = True
        else:
            # level3betas files have no header: their first line already holds a beta value
            has_header = len(fields) > 1 and fields[1] not in NULL_TOKENS and parse_number(fields[1]) is None
    if len(fields) < 2:
        raise IngestError(
            "expected a probe id and a beta value per line (tab-separated)", path=where, line=line, column=2
        )
    if not has_header:
        names: tuple[str | None, ...] = (None,) * len(fields)
        return Layout(where, "\t", names, 0, (1,), (None,), None), line - 1
    lowered = [name.lower() for name in fields]
    if "beta_value" in lowered:
        beta = lowered.index("beta_value")
    elif len(fields) == 2:
        beta = 1
    else:
        raise IngestError("no Beta_value column in the header", path=where, line=line)
    return Layout(where, "\t", tuple(fields), 0, (beta,), (None,), line), line


def read_sample_file(path: Path) -> tuple[list[str], np.ndarray]:
    """Probe ids and float32 betas of one per-sample file, validated (no duplicates, in [0, 1])."""
    layout, skip = sample_file_layout(path)
    opener = functools.partial(skip_lines_then_chunks, path, skip)
    ids: list[str] = []
    parts: list[np.ndarray] = []
    for part_ids, values in parsed_parts(layout, opener):
        ids.extend(part_ids)
        parts.append(values[:, 0])
    return ids, np.concatenate(parts).astype(np.float32, copy=False)


def assemble(entries: list[SheetEntry]) -> tuple[list[str], list[np.ndarray]]:
    """The union of probes (first-appearance order) and one aligned float32 column per sample."""
    import pandas as pd  # here, not at the top: importing it costs every other format's ingest 0.3 s

    probes: list[str] = []
    index: pd.Index | None = None
    columns: list[np.ndarray] = []
    for entry in entries:
        ids, values = read_sample_file(entry.file)
        if not probes:
            probes = ids
            columns.append(values)
            continue
        if ids == probes[: len(ids)]:  # the usual case: every file lists the same probes in order
            columns.append(values)
            continue
        if index is None:
            index = pd.Index(probes, dtype=object)
        positions = index.get_indexer(pd.Index(ids, dtype=object))
        new = np.flatnonzero(positions < 0)
        if new.size:
            positions[new] = np.arange(len(probes), len(probes) + new.size)
            probes.extend(ids[i] for i in new)
            index = None
        column = np.full(len(probes), np.nan, dtype=np.float32)
        column[positions] = values
        columns.append(column)
    total = len(probes)
    for j, column in enumerate(columns):
        if len(column) < total:
            columns[j] = np.concatenate([column, np.full(total - len(column), np.nan, dtype=np.float32)])
    return probes, columns


def gdc_batches(entries: list[SheetEntry], batch_rows: int) -> Iterator[MatrixBatch]:
    """Read every sample file, align them, and hand out row batches of the probes x samples matrix."""
    probes, columns = assemble(entries)
    for start in range(0, len(probes), batch_rows):
        stop = min(start + batch_rows, len(probes))
        block = np.empty((stop - start, len(columns)), dtype=np.float32)
        for j, column in enumerate(columns):
            block[:, j] = column[start:stop]
        yield MatrixBatch(probes[start:stop], block)


def open_gdc_folder(path: str | Path, *, sample_sheet: str | Path | None, batch_rows: int) -> MatrixSource:
    """Read the sample sheet of a GDC download, check that its files exist, and return a source."""
    folder = Path(path)
    if folder.is_file():  # the sample sheet itself was given: its folder holds the files
        sample_sheet = sample_sheet or folder
        folder = folder.parent
    if not folder.is_dir():
        raise IngestError("no such folder (a GDC download is a folder with a sample sheet)", path=label(path))
    sheet = Path(sample_sheet) if sample_sheet is not None else find_sample_sheet(folder)
    if not sheet.is_file():
        raise IngestError("no such sample sheet file", path=label(sheet))
    entries, metadata = read_sample_sheet(sheet, folder)
    return MatrixSource(
        path=label(path),
        format="gdc",
        samples=[entry.sample for entry in entries],
        metadata=metadata,
        batch_rows=batch_rows,
        _stream=functools.partial(gdc_batches, entries),
    )

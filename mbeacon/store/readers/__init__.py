"""Streaming, memory-bounded readers for the methylation matrices operators bring.

Three formats, one interface: :func:`open_matrix` reads a file's header (samples, metadata) and
returns a :class:`MatrixSource` whose :meth:`~MatrixSource.batches` streams probe rows as float32
:class:`MatrixBatch` blocks.

* ``"geo"`` -- GEO series matrix files (``!Series_*``/``!Sample_*`` header lines, the table between
  ``!series_matrix_table_begin`` and ``!series_matrix_table_end``), see :mod:`.geo`;
* ``"matrix"`` -- supplementary beta matrices and plain CSV/TSV tables, with optional detection p-value
  columns, see :mod:`.matrix`;
* ``"gdc"`` -- a GDC/TCGA level-3 download: a folder of per-sample files and its sample sheet, see
  :mod:`.gdc`.

Any file may be gzip-compressed (told by content, not name) and use ``\\n`` or ``\\r\\n`` line endings.
Missing values (empty cell, ``NA``, ``NaN``, ``null``, ``NULL``, quoted empty) become NaN. Bad input
-- a value outside [0, 1], a non-numeric cell, a ragged row, a duplicate probe or sample id, an empty
matrix, an unknown format, a sample sheet row without its file -- is refused with an
:class:`~mbeacon.store.errors.IngestError` naming the file, the 1-based physical line (of the
decompressed text) and the column (1-based, with its header name), and never with another exception.

Speed: the data rows are read in chunks of a few MiB of whole lines, parsed by several threads at
once: a compiled kernel for the plain case (:mod:`._fastpath`), ``pyarrow.csv`` with explicit column
types for anything else, so that an ingest (parse, validate and write) is faster than
``pandas.read_csv`` alone and memory stays at a few chunks' worth. Only a chunk that fails is re-read
in Python, to find the exact line and column of the fault. :meth:`MatrixSource.blocks` hands the
parsed chunks on without regrouping them (what ingest writes); :meth:`MatrixSource.batches` regroups
them into batches of a fixed size.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import IngestError
from ._model import MatrixBatch, MatrixSource
from ._stream import READ_ERRORS, label, open_bytes
from ._table import split_fields
from .gdc import is_sample_sheet_header, open_gdc_folder
from .geo import open_series_matrix
from .matrix import DELIMITERS, open_beta_matrix

__all__ = ["FORMATS", "IngestError", "MatrixBatch", "MatrixSource", "detect_format", "open_matrix"]

#: The formats :func:`open_matrix` reads.
FORMATS: tuple[str, ...] = ("geo", "matrix", "gdc")

_GEO_LINE = re.compile(r"!(Series_|Sample_|series_matrix_table_begin)")
_SNIFF_BYTES = 1 << 20


def _first_text_lines(path: str | Path) -> tuple[list[str], int]:
    """The first two non-blank lines of a file (decompressed; at most 1 MiB is read), and the number
    of the first."""
    where = label(path)
    stream = open_bytes(path)
    head = b""
    try:
        while len(head) < _SNIFF_BYTES:
            block = stream.read(1 << 16)
            if not block:
                break
            head += block
    except READ_ERRORS as exc:
        if not head:  # else the reader reports the damage at its line
            raise IngestError(f"cannot read the file (corrupt?): {exc}", path=where, line=1) from None
    finally:
        stream.close()
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise IngestError("unknown format: UTF-16 text; save the file as UTF-8", path=where, line=1)
    if b"\x00" in head:
        raise IngestError("unknown format: binary data (NUL bytes), not a text table", path=where, line=1)
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]
    found: list[str] = []
    first = 1
    for number, raw in enumerate(head.split(b"\n"), start=1):
        raw = raw.rstrip(b"\r")
        if raw.strip(b" \t"):
            if not found:
                first = number
            found.append(raw.decode("utf-8", "replace"))
            if len(found) == 2:
                break
    return found, first


def detect_format(path: str | Path) -> str:
    """``"geo"``, ``"matrix"`` or ``"gdc"``, from what the file (or folder) holds, not its name.

    A folder, or a GDC sample sheet file, is ``"gdc"``; a file starting with ``!Series_``/``!Sample_``
    lines is ``"geo"``; a text table whose first line has tab, comma or space separated columns is
    ``"matrix"``. Anything else (empty, binary, compressed other than gzip, a GEO SOFT file, a single
    TCGA per-sample file...) raises IngestError.
    """
    where = label(path)
    if Path(path).is_dir():
        return "gdc"
    found, line = _first_text_lines(path)
    if not found:
        raise IngestError("the file is empty: no header and no data rows", path=where, line=line)
    text = found[0]
    if text.startswith("!"):
        if _GEO_LINE.match(text):
            return "geo"
        raise IngestError(
            "unknown format: a '!' line that is not a GEO series matrix header (!Series_..., !Sample_...)",
            path=where,
            line=line,
        )
    if text.startswith("^"):
        raise IngestError(
            "unknown format: a GEO SOFT file; use the series matrix (GSE..._series_matrix.txt.gz) instead",
            path=where,
            line=line,
        )
    fields = [field.strip() for field in split_fields(text, "\t")[0]]
    if is_sample_sheet_header(fields):
        return "gdc"
    if fields[0].lower() in ("hybridization ref", "composite element ref"):
        raise IngestError(
            "unknown format: a single TCGA/GDC per-sample file; read its folder, with the GDC sample "
            "sheet, as format 'gdc'",
            path=where,
            line=line,
        )
    for delimiter in DELIMITERS:
        widths = [len(split_fields(t.strip(" ") if delimiter == " " else t, delimiter)[0]) for t in found]
        if widths[0] >= 2 or (len(widths) == 2 and widths[1] == widths[0] + 1):  # R: no row-name header
            return "matrix"
    raise IngestError(
        "unknown format: the first line has no tab, comma or space separated columns", path=where, line=line
    )


def open_matrix(
    path: str | Path,
    format: str = "auto",
    *,
    pval_cut: float | None = None,
    sample_sheet: str | Path | None = None,
    batch_rows: int = 65_536,
) -> MatrixSource:
    """Open a methylation matrix for streaming: read its header, check it, return a MatrixSource.

    ``format`` is ``"auto"`` (see :func:`detect_format`), ``"geo"``, ``"matrix"`` or ``"gdc"``.
    ``pval_cut`` (matrix format) turns beta values whose detection p-value is above it into NaN;
    ``sample_sheet`` (gdc format) names the GDC sample sheet when it is not in the folder;
    ``batch_rows`` is the number of probe rows per batch (the last batch may be shorter).

    Header problems (unknown format, duplicate or missing sample ids, no data rows, a sample sheet row
    whose file is missing) raise IngestError here; problems in the rows raise it from ``batches()``.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be at least 1, not {batch_rows}")
    if pval_cut is not None and not 0 <= pval_cut <= 1:
        raise ValueError(f"pval_cut must be a p-value in [0, 1], not {pval_cut}")
    kind = detect_format(path) if format == "auto" else format
    if kind not in FORMATS:
        raise IngestError(f"unknown format {format!r}: expected auto, {', '.join(FORMATS)}", path=label(path))
    if sample_sheet is not None and kind != "gdc":
        raise ValueError(f"sample_sheet applies to the gdc format only, not to {kind!r}")
    if kind == "gdc":
        return open_gdc_folder(path, sample_sheet=sample_sheet, batch_rows=batch_rows)
    if Path(path).is_dir():
        raise IngestError(f"is a folder: format {kind!r} reads a file", path=label(path))
    if kind == "geo":
        return open_series_matrix(path, batch_rows=batch_rows)
    return open_beta_matrix(path, pval_cut=pval_cut, batch_rows=batch_rows)

"""GEO series matrix files (format ``"geo"``), plain or gzip, ``\\n`` or ``\\r\\n`` line endings.

Layout::

    !Series_title\t"..."                       <- series header lines, one value each
    !Series_geo_accession\t"GSE41169"
    !Sample_geo_accession\t"GSM1"\t"GSM2"      <- sample header lines, one value per sample
    !series_matrix_table_begin
    "ID_REF"\t"GSM1"\t"GSM2"                   <- the samples are the header's GSM ids
    "cg00000029"\t0.5\t0.6
    !series_matrix_table_end

Every ``!Series_*`` and ``!Sample_*`` line goes into the metadata under its name without the ``!``
(``Series_title``, ``Series_geo_accession``, ``Series_platform_id``, ``Sample_title``...): a line's
several values are joined by tabs, repeated lines (``!Series_summary``, ``!Sample_characteristics_ch1``)
by newlines. A file that ends before ``!series_matrix_table_end`` is refused as truncated.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

from ..errors import IngestError
from ._common import next_content_line, split_header, table_batches, table_blocks
from ._model import MatrixSource
from ._stream import LineReader, StreamError, decode_line, label
from ._table import Layout, check_samples, split_fields

TABLE_BEGIN = "!series_matrix_table_begin"
TABLE_END = b"!series_matrix_table_end"


def _read_header(reader: LineReader, where: str) -> tuple[dict[str, str], int]:
    """Metadata from the ``!`` lines, and the line number of ``!series_matrix_table_begin``."""
    metadata: dict[str, str] = {}
    while True:
        raw = next_content_line(reader)
        if raw is None:
            raise IngestError(
                f"no {TABLE_BEGIN} line: not a complete GEO series matrix",
                path=where,
                line=max(reader.lines_read, 1),
            )
        line = reader.lines_read
        text = decode_line(raw, where, line)
        if text.lower().startswith(TABLE_BEGIN):
            return metadata, line
        if not text.startswith("!"):
            raise IngestError(
                f"unexpected line before {TABLE_BEGIN} (GEO header lines start with '!')",
                path=where,
                line=line,
            )
        fields, _ = split_fields(text, "\t")
        key = fields[0][1:].strip()
        value = "\t".join(field.strip() for field in fields[1:])
        metadata[key] = f"{metadata[key]}\n{value}" if key in metadata else value


def _table_chunks(path: str | Path, skip: int) -> Iterator[tuple[bytes, LineReader]]:
    """Chunks of the table body: after the header line, up to ``!series_matrix_table_end``."""
    with LineReader(path) as reader:
        for _ in range(skip):
            if reader.readline() is None:
                return
        for chunk in reader.chunks():
            end = _find_table_end(chunk)
            if end >= 0:
                if end:
                    yield chunk[:end], reader
                return
            yield chunk, reader
        raise StreamError(
            f"the file ends without {TABLE_END.decode()}: truncated download?",
            path=label(path),
            lines_read=reader.lines_read,
            line_offset=0,
        )


def _find_table_end(chunk: bytes) -> int:
    """Offset of the ``!series_matrix_table_end`` line in a chunk of whole lines, or -1."""
    if b"!" not in chunk:  # a fast memchr: the table itself has no "!"
        return -1
    at = chunk.find(TABLE_END)
    while at >= 0:
        if at == 0 or chunk[at - 1] == 10:
            return at
        at = chunk.find(TABLE_END, at + 1)
    return -1


def open_series_matrix(path: str | Path, *, batch_rows: int) -> MatrixSource:
    """Read the header of a GEO series matrix and return a source that streams its table."""
    where = label(path)
    with LineReader(path) as reader:
        metadata, begin_line = _read_header(reader, where)
        header_raw = next_content_line(reader)
        header_line = reader.lines_read
        if header_raw is None or header_raw.startswith(TABLE_END):
            raise IngestError(
                f'no table header ("ID_REF"\\t"GSM...") after {TABLE_BEGIN}', path=where, line=begin_line
            )
        header = decode_line(header_raw, where, header_line)
        first_row = next_content_line(reader)
    fields = split_header(header, "\t", where=where, line=header_line)
    names = tuple(name.strip() for name in fields)
    layout = Layout(
        path=where,
        delimiter="\t",
        names=names,
        probe=0,
        betas=tuple(range(1, len(names))),
        pvals=(None,) * (len(names) - 1),
        header_line=header_line,
    )
    samples = check_samples(layout)
    if first_row is None:
        raise IngestError(
            f"no data rows after the header, and no {TABLE_END.decode()}: truncated download?",
            path=where,
            line=header_line,
        )
    if first_row.startswith(TABLE_END):
        raise IngestError(
            f"no data rows between the header and {TABLE_END.decode()}", path=where, line=header_line
        )
    opener = functools.partial(_table_chunks, path, header_line)
    return MatrixSource(
        path=where,
        format="geo",
        samples=samples,
        metadata=metadata,
        batch_rows=batch_rows,
        _stream=functools.partial(table_batches, layout, opener),
        _blocks=functools.partial(table_blocks, layout, opener),
    )

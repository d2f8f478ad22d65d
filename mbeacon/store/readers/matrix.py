"""Supplementary beta matrices and plain CSV/TSV tables (format ``"matrix"``).

The first column holds probe ids, the header names the samples; fields are separated by tabs, commas
or spaces (told from the header and the first data row), optionally quoted, plain or gzip. Tables
written by R without a name for the row-name column (header one field shorter than the rows) are
read as such. Detection p-value columns are recognised by name (case-insensitive "pval" or
"detection p": ``S1_pval``, ``S1.Detection Pval``, ``Detection Pval``) and belong to the beta column
before them: with ``pval_cut`` a beta whose p-value is above the cut becomes NaN (``<1E-16`` reads as
1e-16; a missing p-value leaves its beta alone); without it the p-value columns are not even parsed.
"""

from __future__ import annotations

import functools
from pathlib import Path

from ..errors import IngestError
from ._common import next_content_line, skip_lines_then_chunks, split_header, table_batches, table_blocks
from ._model import MatrixSource
from ._stream import LineReader, decode_line, label
from ._table import Layout, check_samples, classify_columns, parse_number, split_fields

DELIMITERS = ("\t", ",", " ")


def _split(text: str, delimiter: str) -> list[str]:
    return split_fields(text.strip(" ") if delimiter == " " else text, delimiter)[0]


def sniff_delimiter(header: str, data: str | None, *, path: str, line: int) -> str:
    """Tab, comma or space: the first that splits the header into columns and the first row alike.

    The first row may have one field more than the header (R's ``write.table`` row names). When no
    delimiter fits both, the one that splits the header is used and the row is refused as ragged.
    """
    fallback = None
    for delimiter in DELIMITERS:
        width = len(_split(header, delimiter))
        if data is not None:
            row = len(_split(data, delimiter))
            if row >= 2 and row in (width, width + 1):
                return delimiter
        if width >= 2:
            if data is None:
                return delimiter
            fallback = fallback or delimiter
    if fallback is None:
        raise IngestError(
            "unknown format: the header has no tab, comma or space separated columns", path=path, line=line
        )
    return fallback


def looks_like_data(fields: list[str]) -> bool:
    """Whether a would-be header is a data row: every field after the first a non-integer number."""
    values = fields[1:]
    return bool(values) and all(
        parse_number(value) is not None and any(c in value for c in ".eE") for value in values
    )


def open_beta_matrix(path: str | Path, *, pval_cut: float | None, batch_rows: int) -> MatrixSource:
    """Read the header of a beta matrix and return a source that streams its rows."""
    where = label(path)
    with LineReader(path) as reader:
        header_raw = next_content_line(reader)
        if header_raw is None:
            raise IngestError("the file is empty: no header and no data rows", path=where, line=1)
        header_line = reader.lines_read
        header = decode_line(header_raw, where, header_line)
        data_raw = next_content_line(reader)
    data = None if data_raw is None else data_raw.rstrip(b"\r").decode("utf-8", "replace")
    delimiter = sniff_delimiter(header, data, path=where, line=header_line)
    fields = split_header(
        header.strip(" ") if delimiter == " " else header, delimiter, where=where, line=header_line
    )
    if looks_like_data(fields):
        raise IngestError(
            "the first line looks like data, not a header naming the samples "
            "(a GDC per-sample file is read from its folder with format 'gdc')",
            path=where,
            line=header_line,
        )
    names: list[str | None] = [name.strip() for name in fields]
    if data is not None and len(_split(data, delimiter)) == len(names) + 1:
        names = [None, *names]  # R's write.table: no header name over the row names
    betas, pvals = classify_columns(names, path=where, header_line=header_line)
    layout = Layout(
        path=where,
        delimiter=delimiter,
        names=tuple(names),
        probe=0,
        betas=betas,
        pvals=pvals,
        header_line=header_line,
        pval_cut=pval_cut,
    )
    samples = check_samples(layout)
    if data_raw is None:
        raise IngestError("no data rows after the header", path=where, line=header_line)
    opener = functools.partial(skip_lines_then_chunks, path, header_line)
    metadata = {"delimiter": {"\t": "tab", ",": "comma", " ": "space"}[delimiter]}
    if any(p is not None for p in pvals):
        metadata["detection_pvalues"] = "applied" if pval_cut is not None else "ignored"
        if pval_cut is not None:
            metadata["pval_cut"] = repr(pval_cut)
    tally = {"pvalue_columns": sum(p is not None for p in pvals)}
    return MatrixSource(
        path=where,
        format="matrix",
        samples=samples,
        metadata=metadata,
        batch_rows=batch_rows,
        _stream=functools.partial(table_batches, layout, opener, tally=tally),
        _blocks=functools.partial(table_blocks, layout, opener, tally=tally),
        tally=tally,
    )

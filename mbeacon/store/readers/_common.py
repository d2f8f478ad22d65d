"""Glue shared by the formats: stream a laid-out table from a file into validated batches."""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ..errors import IngestError
from ._batches import align, rebatch
from ._model import MatrixBatch
from ._stream import LineReader, StreamError
from ._table import Converted, Layout, TableParser, first_line_of, split_fields

#: Threads converting chunks ahead of the one being accepted (Arrow releases the GIL while parsing).
WORKERS = max(1, min(4, os.cpu_count() or 1))

#: Opens the file again and yields its data chunks, each with the LineReader that counts their lines
#: (the consumer calls ``reader.advance(n)`` once it knows a chunk's line count).
ChunkOpener = Callable[[], Iterator[tuple[bytes, LineReader]]]


def skip_lines_then_chunks(path: str | Path, skip: int) -> Iterator[tuple[bytes, LineReader]]:
    """Chunks of a file after its first ``skip`` physical lines (the header part)."""
    with LineReader(path) as reader:
        for _ in range(skip):
            if reader.readline() is None:
                return
        for chunk in reader.chunks():
            yield chunk, reader


def split_header(header: str, delimiter: str, *, where: str, line: int) -> list[str]:
    """The fields of a header line; an unclosed quote is refused with its line and column."""
    fields, open_quote = split_fields(header, delimiter)
    if open_quote is not None:
        raise IngestError(
            "a quote opened in this header field is not closed", path=where, line=line, column=open_quote + 1
        )
    return fields


def next_content_line(reader: LineReader) -> bytes | None:
    """The next line that is not blank (only spaces, tabs, ``\\r``), or None at the end of the file."""
    while True:
        raw = reader.readline()
        if raw is None or raw.strip(b" \t\r"):
            return raw


def parsed_parts(
    layout: Layout, opener: ChunkOpener, tally: dict[str, int] | None = None
) -> Iterator[tuple[list[str], np.ndarray]]:
    """Validated ``(probe_ids, values)`` per chunk (float32, rows x samples); refuses an empty table.
    Once the table is read, ``tally["masked"]`` holds the values the detection p-value cut masked.

    Chunks are converted (Arrow parse, float32 blocks, range checks) by ``WORKERS`` threads, a few
    chunks ahead, while this thread accepts them in file order (line numbers, duplicate probe ids):
    parsing uses every core even when one chunk's parse does not scale. Errors are raised in file
    order: those of chunks read ahead before a read error or a missing end marker further on.
    """

    def locate(probe: str) -> int | None:
        with contextlib.closing(opener()) as chunks:
            return first_line_of(probe, layout, chunks)

    parser = TableParser(layout, locate)
    rows = 0
    ahead: deque[tuple[Future[Converted], LineReader]] = deque()

    def accept_oldest() -> tuple[list[str], np.ndarray]:
        future, reader = ahead.popleft()
        ids, values, lines = parser.accept(future.result(), reader.lines_read + 1)
        reader.advance(lines)
        return ids, values

    with contextlib.closing(opener()) as chunks, ThreadPoolExecutor(WORKERS, "mbeacon-parse") as pool:
        try:
            try:
                for chunk, reader in chunks:
                    ahead.append((pool.submit(parser.convert, chunk), reader))
                    if len(ahead) > WORKERS:
                        ids, values = accept_oldest()
                        rows += len(ids)
                        if ids:
                            yield ids, values
            except StreamError as exc:
                last = ahead[-1][1] if ahead else None
                while ahead:
                    accept_oldest()
                raise exc.relocate(last.lines_read) if last is not None else exc from None
            while ahead:
                ids, values = accept_oldest()
                rows += len(ids)
                if ids:
                    yield ids, values
        finally:
            for future, _ in ahead:
                future.cancel()
    if rows == 0:
        raise IngestError("no data rows after the header", path=layout.path, line=layout.header_line)
    if tally is not None:
        tally["masked"] = parser.masked


def table_batches(
    layout: Layout, opener: ChunkOpener, batch_rows: int, tally: dict[str, int] | None = None
) -> Iterator[MatrixBatch]:
    """Stream a table as MatrixBatches of ``batch_rows`` rows."""
    yield from rebatch(parsed_parts(layout, opener, tally), len(layout.betas), batch_rows)


def table_blocks(
    layout: Layout, opener: ChunkOpener, multiple: int, tally: dict[str, int] | None = None
) -> Iterator[MatrixBatch]:
    """Stream a table as parsed, in blocks of a multiple of ``multiple`` rows (see :func:`._table.align`)."""
    yield from align(parsed_parts(layout, opener, tally), multiple)

"""Delimited tables of beta values: a fast Arrow parse per chunk, and an exact Python re-scan for errors.

Every format ends up here once its header is understood: a :class:`Layout` says which field holds the
probe id, which hold beta values and which their detection p-values. :class:`TableParser` parses
chunks of whole lines (from :class:`~._stream.LineReader`) with ``pyarrow.csv`` into float32 blocks;
this is where the speed comes from (C++ parsing with explicit column types, nothing inferred, several
chunks at once in worker threads, see :func:`._common.parsed_parts`). Arrow's errors are not precise
enough for an operator (no line numbers, no notion of beta ranges or duplicate probes), so whenever
the fast path rejects a chunk or a check on its result fails, :meth:`TableParser.explain` re-reads
that one chunk line by line in Python, with the same cell rules, and raises an IngestError at the
first bad line and column. Valid files never take that path.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from ..errors import IngestError
from ._fastpath import convert_plain, plain_kinds, start_loading
from ._stream import LineReader

#: Cells that mean "missing" (compared before trimming, quoted or not). Empty, NA, NaN, null, NULL
#: are the common spellings; ``nan`` and the spreadsheet ``N/A`` / ``#N/A`` cost nothing to accept.
NULL_TOKENS: tuple[str, ...] = ("", "NA", "NaN", "nan", "null", "NULL", "N/A", "#N/A")
_NULLS = frozenset(NULL_TOKENS)

# Exactly the numbers Arrow's float parser accepts (after trimming blanks): decimal and scientific
# notation, inf/infinity and nan, optionally signed. NaN reads as missing; inf is out of range.
_NUMBER = re.compile(
    r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan(?:\(\w*\))?)", re.IGNORECASE | re.ASCII
)
_BLANKS = " \t"

#: Whether one chunk's Arrow parse uses several threads. Off: chunks are parsed in parallel instead
#: (see ``_common.WORKERS``), which scales better, notably on a machine shared with other work.
USE_THREADS = False

# Detection p-value columns, by name: "S1_pval", "S1.Detection Pval", "Detection Pval", "Detection P-value".
_PVAL_NAME = re.compile(r"pval|detection[ ._-]?p", re.IGNORECASE)

# Space-separated files may align columns with runs of spaces and pad lines; Arrow splits on every
# single space, so such chunks are normalised first (the Python re-scan splits the same way).
_EDGE_SPACES = re.compile(rb"(?m)^ +| +(?=\r?$)")
_SPACE_RUNS = re.compile(rb" {2,}")


def show(token: str, limit: int = 40) -> str:
    """A cell for a message: quoted, and shortened if long (a runaway cell can be megabytes)."""
    return repr(token if len(token) <= limit else token[:limit] + "...")


def is_pval_name(name: str | None) -> bool:
    """Whether a header name marks a detection p-value column (case-insensitive "pval", "detection p")."""
    return bool(name) and _PVAL_NAME.search(name) is not None


def split_fields(text: str, delimiter: str) -> tuple[list[str], int | None]:
    """Split one line into fields the way Arrow does: ``"`` quotes, ``""`` inside quotes is a quote.

    Characters after a closing quote join the field (``"cg"1`` is ``cg1``), a quote inside an unquoted
    field is literal, and a space delimiter collapses runs of spaces. Returns the fields and, if a
    quote is still open at the end of the line, the 0-based index of the field it opened (else None).
    """
    if '"' not in text:
        if delimiter == " ":
            return [field for field in text.split(" ") if field] or [""], None
        return text.split(delimiter), None
    fields: list[str] = []
    end = len(text)
    i = 0
    while True:
        if i < end and text[i] == '"':
            parts: list[str] = []
            i += 1
            while True:
                close = text.find('"', i)
                if close < 0:
                    fields.append("".join(parts) + text[i:])
                    return fields, len(fields) - 1
                parts.append(text[i:close])
                if close + 1 < end and text[close + 1] == '"':
                    parts.append('"')
                    i = close + 2
                    continue
                i = close + 1
                break
            stop = text.find(delimiter, i)
            parts.append(text[i : end if stop < 0 else stop])
            fields.append("".join(parts))
        else:
            stop = text.find(delimiter, i)
            fields.append(text[i : end if stop < 0 else stop])
        if stop < 0:
            return fields, None
        i = stop + 1
        if delimiter == " ":
            while i < end and text[i] == " ":
                i += 1
            if i == end:
                return fields, None


def parse_number(token: str) -> float | None:
    """The value of a numeric cell as Arrow reads it (blanks trimmed), or None if it is not a number."""
    stripped = token.strip(_BLANKS)
    if _NUMBER.fullmatch(stripped) is None:
        return None
    lowered = stripped.lower().lstrip("+-")
    if lowered.startswith("nan"):
        return float("nan")
    return float(stripped)


@dataclass(frozen=True)
class Layout:
    """How to read the data rows of one delimited table.

    ``names`` has one entry per physical field (None where the header has no name for it); ``betas``
    are the field indices (0-based) of the sample columns, in sample order, and ``pvals`` the index of
    each sample's detection p-value field, or None. ``header_line`` is the physical line of the
    header, used in messages.
    """

    path: str
    delimiter: str
    names: tuple[str | None, ...]
    probe: int
    betas: tuple[int, ...]
    pvals: tuple[int | None, ...]
    header_line: int | None
    pval_cut: float | None = None

    @property
    def n_fields(self) -> int:
        return len(self.names)

    def column(self, index: int) -> int | str:
        """How a field is named in messages: its 1-based index, with the header name when there is one."""
        name = self.names[index] if 0 <= index < len(self.names) else None
        return f"{index + 1} ({name})" if name else index + 1

    def error(self, message: str, line: int | None, index: int | None = None) -> IngestError:
        """An IngestError for this file, at a line and (0-based) field index."""
        return IngestError(
            message, path=self.path, line=line, column=None if index is None else self.column(index)
        )


def classify_columns(
    names: list[str | None], *, path: str, header_line: int, probe: int = 0
) -> tuple[tuple[int, ...], tuple[int | None, ...]]:
    """Sample (beta) fields and their p-value fields from header names.

    A p-value column belongs to the beta column just before it; one that follows no beta column, or
    a second one for the same sample, is refused.
    """
    betas: list[int] = []
    pvals: list[int | None] = []
    for index, name in enumerate(names):
        if index == probe:
            continue
        if is_pval_name(name):
            if not betas or pvals[-1] is not None:
                if betas:
                    owner = f"sample {names[betas[-1]]!r} already has column {pvals[-1]} as its p-values"
                else:
                    owner = "no beta column precedes it"
                raise IngestError(
                    f"detection p-value column {name!r} belongs to no sample: {owner} "
                    "(p-value columns must follow their beta column)",
                    path=path,
                    line=header_line,
                    column=f"{index + 1} ({name})",
                )
            pvals[-1] = index + 1  # 1-based while classifying (0 would read as "none"), fixed below
        else:
            betas.append(index)
            pvals.append(None)
    return tuple(betas), tuple(None if p is None else p - 1 for p in pvals)


def check_samples(layout: Layout) -> list[str]:
    """The sample ids of a layout, refusing empty and duplicate ones (at the header line)."""
    samples: list[str] = []
    first: dict[str, int] = {}
    for index in layout.betas:
        name = layout.names[index]
        if not name:
            raise layout.error("sample column without a name in the header", layout.header_line, index)
        if name in first:
            raise layout.error(
                f"duplicate sample id {name!r} (also column {first[name] + 1})", layout.header_line, index
            )
        first[name] = index
        samples.append(name)
    if not samples:
        raise IngestError(
            "the header has no sample columns (only a probe id column)",
            path=layout.path,
            line=layout.header_line,
        )
    return samples


def _pvalues(column: pa.ChunkedArray) -> np.ndarray:
    """Detection p-values as float64 (NaN = missing); ``<1E-16`` reads as 1e-16."""
    text = pc.replace_substring_regex(pc.utf8_trim(column, _BLANKS), "^<", "")
    return _floats(pc.cast(text, pa.float64()), np.float64)


def _floats(column: pa.ChunkedArray | pa.Array, dtype: type[np.floating]) -> np.ndarray:
    """A float column of Arrow's as a numpy array of ``dtype`` (its own type), nulls as NaN.

    What ``to_numpy`` gives, read from the column's buffers: pyarrow's ``to_numpy`` of a column with
    nulls imports pandas, which an ingest would wait for and never use (an Arrow-parsed chunk is
    common at the start, while the compiled parser loads)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    out = np.empty(len(column), dtype=dtype)
    size = np.dtype(dtype).itemsize
    at = 0
    for chunk in chunks:
        n = len(chunk)
        validity, data = chunk.buffers()[:2]
        part = out[at : at + n]
        if n:
            part[:] = np.frombuffer(data, dtype=dtype, count=n, offset=chunk.offset * size)
        if chunk.null_count:
            bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
            part[bits[chunk.offset : chunk.offset + n] == 0] = np.nan
        at += n
    return out


@dataclass
class Converted:
    """A chunk after the order-independent part of parsing (see :meth:`TableParser.convert`)."""

    chunk: bytes
    lines: int = 0
    probes: pa.Array | pa.ChunkedArray | None = None
    values: np.ndarray | None = None
    problem: str | None = None
    masked: int = 0  # values turned missing by the detection p-value cut


_BLANK_LINES = re.compile(rb"(?m)^\r?\n")


def _has_blank_line(data: bytes) -> bool:
    return data.startswith((b"\n", b"\r\n")) or b"\n\n" in data or b"\n\r\n" in data


def _content_lines(data: bytes) -> int:
    """Lines of a chunk that Arrow reads as rows: all but the empty ones (``\\r`` alone is empty)."""
    text = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(text == 10)
    if not ends.size:
        return int(bool(data.strip(b"\r")))
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    length = ends - starts
    only_cr = (length == 1) & (text[starts] == 13)
    return int(np.count_nonzero(length)) - int(np.count_nonzero(only_cr))


class TableParser:
    """Parses the chunks of one table into probe ids and float32 blocks of values, validating them.

    ``locate`` maps a probe id to the line where it first occurred; it is asked only to word the
    error for a duplicate of a probe from an earlier chunk (the parser keeps only a set of ids).
    """

    def __init__(self, layout: Layout, locate: Callable[[str], int | None] | None = None) -> None:
        self.layout = layout
        self.seen: set[str] = set()
        self.masked = 0  # values masked by the p-value cut in the chunks accepted so far
        self._locate = locate
        names = [f"f{i}" for i in range(layout.n_fields)]
        self._probe = names[layout.probe]
        self._betas = [names[i] for i in layout.betas]
        use_p = layout.pval_cut is not None
        self._pvals = [names[i] if use_p and i is not None else None for i in layout.pvals]
        types: dict[str, pa.DataType] = {self._probe: pa.string()}
        types.update(dict.fromkeys(self._betas, pa.float32()))
        types.update({name: pa.string() for name in self._pvals if name is not None})
        self._value_fields = sorted([*layout.betas, *(i for i in layout.pvals if use_p and i is not None)])
        self._pval_fields = frozenset(i for i in layout.pvals if use_p and i is not None)
        self._plain = plain_kinds(
            layout.n_fields, layout.probe, layout.betas, layout.delimiter, bool(self._pval_fields)
        )
        if self._plain is not None:
            start_loading()
        self._read_options = pacsv.ReadOptions(
            column_names=names, use_threads=USE_THREADS, block_size=1 << 20
        )
        self._parse_options = pacsv.ParseOptions(
            delimiter=layout.delimiter,
            quote_char='"',
            double_quote=True,
            escape_char=False,
            newlines_in_values=False,
            ignore_empty_lines=False,
        )
        self._convert_options = pacsv.ConvertOptions(
            column_types=types,
            include_columns=list(types),
            null_values=list(NULL_TOKENS),
            strings_can_be_null=True,
            quoted_strings_can_be_null=True,
            check_utf8=True,
        )

    # -- fast path ---------------------------------------------------------------------------------

    def parse(self, chunk: bytes, first_line: int) -> tuple[list[str], np.ndarray, int]:
        """Probe ids, float32 values (rows x samples, NaN = missing), and the number of lines of a chunk.

        ``chunk`` is whole lines, the first being line ``first_line`` of the file. The same as
        :meth:`accept` of :meth:`convert`, which a pipeline runs in different threads.
        """
        return self.accept(self.convert(chunk), first_line)

    def convert(self, chunk: bytes) -> Converted:
        """The order-independent part of parsing a chunk: Arrow parse, float32 block, range checks.

        Touches no state of the parser, so that several chunks may be converted in worker threads
        at once. Problems are recorded, not raised: only :meth:`accept` knows the line numbers.
        The plain case is parsed by the compiled kernel of :mod:`._fastpath`; any other chunk, and
        every chunk with a problem, by Arrow (and then, to word the error, by :meth:`explain`).
        """
        if self._plain is not None:
            plain = convert_plain(chunk, self.layout.delimiter, self._plain, len(self._betas))
            if plain is not None:
                probes, values = plain
                return Converted(chunk, lines=len(values), probes=probes, values=values)
        data = chunk
        if self.layout.delimiter == " " and (
            data.startswith(b" ") or b"  " in data or b"\n " in data or b" \n" in data or b" \r\n" in data
        ):
            data = _SPACE_RUNS.sub(b" ", _EDGE_SPACES.sub(b"", data))
        failure: str | None = None
        try:
            table = self._read(data)
        except (pa.ArrowException, ValueError) as exc:
            failure = str(exc)
        # Arrow is told not to skip empty lines, so that its rows are the lines without counting
        # them; an empty line then reads as a row of nulls. Chunks with blank lines (rare) are
        # parsed again without them, at the cost of a pass to find and count them.
        if (failure is not None or table.column(self._probe).null_count) and _has_blank_line(data):
            lines = data.count(b"\n")
            cleaned = _BLANK_LINES.sub(b"", data)
            if not cleaned:
                return Converted(chunk, lines=lines)
            try:
                table = self._read(cleaned)
            except (pa.ArrowException, ValueError) as exc:
                return Converted(chunk, problem=str(exc))
            if table.num_rows != _content_lines(data):
                return Converted(chunk, problem=f"{table.num_rows} rows parsed from {lines} lines")
        elif failure is not None:
            return Converted(chunk, problem=failure)
        else:
            lines = table.num_rows
            # A lone carriage return also ends a row for Arrow: then rows and lines disagree.
            if b"\r" in data and data.count(b"\n") != lines:
                return Converted(chunk, problem="carriage return inside a line")
        rows = table.num_rows
        if rows == 0:
            return Converted(chunk, lines=lines)
        probes = table.column(self._probe)
        if probes.null_count:
            return Converted(chunk, problem="missing probe id")
        cut = self.layout.pval_cut
        values = np.empty((rows, len(self._betas)), dtype=np.float32)
        masked = 0
        for j, (beta_name, pval_name) in enumerate(zip(self._betas, self._pvals, strict=True)):
            beta = _floats(table.column(beta_name), np.float32)
            if pval_name is not None and cut is not None:
                if np.fmin.reduce(beta) < 0 or np.fmax.reduce(beta) > 1:  # before the cut hides it
                    return Converted(chunk, problem="beta value outside [0, 1]")
                try:
                    pval = _pvalues(table.column(pval_name))
                except (pa.ArrowException, ValueError) as exc:
                    return Converted(chunk, problem=str(exc))
                if np.fmin.reduce(pval) < 0 or np.fmax.reduce(pval) > 1:
                    return Converted(chunk, problem="detection p-value outside [0, 1]")
                above = pval > cut
                masked += int(np.count_nonzero(above & ~np.isnan(beta)))
                beta = np.where(above, np.float32(np.nan), beta)
            values[:, j] = beta
        if np.fmin.reduce(values, axis=None) < 0 or np.fmax.reduce(values, axis=None) > 1:
            return Converted(chunk, problem="beta value outside [0, 1]")
        return Converted(chunk, lines=lines, probes=probes, values=values, masked=masked)

    def accept(self, converted: Converted, first_line: int) -> tuple[list[str], np.ndarray, int]:
        """Finish a converted chunk in file order: raise its problem at its line, check probe ids."""
        chunk = converted.chunk
        if converted.problem is not None:
            self.explain(chunk, first_line, converted.problem)
        if converted.probes is None or converted.values is None:
            return [], np.empty((0, len(self._betas)), dtype=np.float32), converted.lines
        ids: list[str] = converted.probes.to_pylist()
        fresh = set(ids)
        if len(fresh) != len(ids) or not self.seen.isdisjoint(fresh):
            self.explain(chunk, first_line, "duplicate probe id")
        self.seen |= fresh
        self.masked += converted.masked
        return ids, converted.values, converted.lines

    def _read(self, data: bytes) -> pa.Table:
        return pacsv.read_csv(
            pa.py_buffer(data),
            read_options=self._read_options,
            parse_options=self._parse_options,
            convert_options=self._convert_options,
        )

    # -- exact path --------------------------------------------------------------------------------

    def explain(self, chunk: bytes, first_line: int, cause: str) -> NoReturn:
        """Re-read a rejected chunk line by line and raise an IngestError at its first bad cell.

        The rules are the fast path's, cell for cell; if (unexpectedly) no line is at fault, the
        Arrow message is reported for the chunk's first line.
        """
        layout = self.layout
        local: dict[str, int] = {}
        lines = chunk.split(b"\n")
        if lines and not lines[-1]:
            lines.pop()
        for offset, raw in enumerate(lines):
            line = first_line + offset
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            if b"\r" in raw:
                raise layout.error(
                    "carriage return inside the line (classic Mac OS line endings?): "
                    "convert the file to \\n or \\r\\n line endings",
                    line,
                )
            if layout.delimiter == " ":
                raw = raw.strip(b" ")
            if not raw:
                continue
            fields, open_quote = split_fields(raw.decode("utf-8", "surrogateescape"), layout.delimiter)
            if open_quote is not None:
                raise layout.error(
                    "a quote opened in this field is not closed on this line", line, open_quote
                )
            if len(fields) != layout.n_fields:
                self._ragged(len(fields), line)
            probe = fields[layout.probe]
            self._check_probe(probe, line, local)
            local[probe] = line
            for index in self._value_fields:
                self._check_cell(fields[index], line, index)
        raise layout.error(f"cannot parse these lines: {cause}", first_line)

    def _ragged(self, found: int, line: int) -> NoReturn:
        layout = self.layout
        expected = layout.n_fields
        where = f"the header on line {layout.header_line} has" if layout.header_line else "rows have"
        if found < expected:
            raise layout.error(
                f"row has {found} fields but {where} {expected}: this column is missing", line, found
            )
        raise IngestError(
            f"row has {found} fields but {where} {expected}: this column is extra",
            path=layout.path,
            line=line,
            column=expected + 1,
        )

    def _check_probe(self, probe: str, line: int, local: dict[str, int]) -> None:
        layout = self.layout
        if probe in _NULLS:
            raise layout.error(f"missing probe id ({show(probe)})", line, layout.probe)
        try:
            probe.encode("utf-8")
        except UnicodeEncodeError:
            raise layout.error("probe id is not valid UTF-8 text", line, layout.probe) from None
        earlier = local.get(probe)
        if earlier is None and probe in self.seen:
            earlier = self._locate(probe) if self._locate is not None else None
            if earlier is None:
                raise layout.error(
                    f"duplicate probe id {show(probe)} (already on an earlier line)", line, layout.probe
                )
        if earlier is not None:
            raise layout.error(
                f"duplicate probe id {show(probe)} (first on line {earlier})", line, layout.probe
            )

    def _check_cell(self, token: str, line: int, index: int) -> None:
        if token in _NULLS:
            return
        layout = self.layout
        if index in self._pval_fields:
            stripped = token.strip(_BLANKS)
            value = parse_number(stripped[1:] if stripped.startswith("<") else stripped)
            if value is None:
                raise layout.error(f"detection p-value {show(token)} is not a number", line, index)
            if value < 0 or value > 1:
                raise layout.error(
                    f"detection p-value {show(token.strip(_BLANKS))[1:-1]} is outside [0, 1]", line, index
                )
            return
        value = parse_number(token)
        if value is None:
            raise layout.error(
                f"not a number: {show(token)} (write missing values as an empty cell, NA, NaN or null)",
                line,
                index,
            )
        with np.errstate(over="ignore"):  # 1e300 becomes inf in float32: outside [0, 1] all the same
            beta = np.float32(value)
        if beta < 0 or beta > 1:
            raise layout.error(
                f"beta value {show(token.strip(_BLANKS))[1:-1]} is outside [0, 1]", line, index
            )


def first_line_of(probe: str, layout: Layout, chunks: Iterable[tuple[bytes, LineReader]]) -> int | None:
    """The first line whose probe field is ``probe`` (for duplicate messages; a plain Python scan)."""
    delimiter = layout.delimiter.encode()
    needle = probe.encode("utf-8", "surrogateescape")
    for chunk, reader in chunks:
        first = reader.lines_read + 1
        reader.advance(chunk.count(b"\n"))
        if needle not in chunk:
            continue
        for offset, raw in enumerate(chunk.split(b"\n")):
            raw = raw.rstrip(b"\r").strip(b" ") if layout.delimiter == " " else raw.rstrip(b"\r")
            if needle not in raw:
                continue
            if layout.probe == 0 and not raw.startswith(b'"'):
                head = raw.split(delimiter, 1)[0]
                if head == needle:
                    return first + offset
                continue
            fields, _ = split_fields(raw.decode("utf-8", "surrogateescape"), layout.delimiter)
            if len(fields) > layout.probe and fields[layout.probe] == probe:
                return first + offset
    return None

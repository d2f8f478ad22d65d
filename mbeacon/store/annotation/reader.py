"""Read a probe annotation table: an Illumina manifest CSV, a GEO platform table, or a plain CSV/TSV.

Accepted layouts (gzip-compressed or not, detected by content):

* Illumina manifest: a ``[Heading]`` block of ``key,value`` lines, then ``[Assay]``, the header
  (``IlmnID,Name,...,Genome_Build,CHR,MAPINFO,...,UCSC_RefGene_Name,...,Relation_to_UCSC_CpG_Island``),
  the probe rows, and a ``[Controls]`` section that ends the table;
* GEO platform table (SOFT ``GPLxxxxx_family.soft`` or the platform's full table download):
  ``^PLATFORM``/``!Platform_*``/``#column = description`` lines, ``!platform_table_begin``, a
  tab-separated header whose probe column is ``ID``, the rows, ``!platform_table_end``;
* a plain table with a header row: probe, chromosome and position columns at least.

Columns are found by name, case-insensitively: probe ``IlmnID``/``ID``/``ID_REF``/``probe_id``/
``probe``/``Name``; position (1-based, as ``MAPINFO``) ``MAPINFO``/``position``/``pos``/``start``;
chromosome ``CHR``/``chromosome``/``chrom`` (without it no position can be searched); optional
genes ``UCSC_RefGene_Name`` (``;``-separated, with repeats), CpG island relation
``Relation_to_UCSC_CpG_Island``, genome build ``Genome_Build``.
The platform id comes from GEO's ``!Platform_geo_accession`` (or ``^PLATFORM``); the genome build from
a ``Genome_Build`` column or heading line. Either may be absent here and given by the caller instead.

Every refusal is an :class:`~mbeacon.store.errors.IngestError` naming the file, line and column.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mbeacon.store.errors import IngestError

PROBE_COLUMNS = ("ilmnid", "id", "id_ref", "probe_id", "probe", "name")
CHROM_COLUMNS = ("chr", "chromosome", "chrom", "chromosome_37")
POS_COLUMNS = ("mapinfo", "position", "pos", "start", "coordinate_37")
GENE_COLUMNS = ("ucsc_refgene_name", "gene", "genes", "gene_name")
ISLAND_COLUMNS = ("relation_to_ucsc_cpg_island", "relation_to_island")
BUILD_COLUMNS = ("genome_build",)

GENE_SYMBOL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
"""What a gene name in the table may look like (HGNC symbols, ``LOC`` and ``MIR`` names...)."""

_BUILDS = {
    "37": "GRCh37",
    "grch37": "GRCh37",
    "hg19": "GRCh37",
    "b37": "GRCh37",
    "38": "GRCh38",
    "grch38": "GRCh38",
    "hg38": "GRCh38",
    "36": "NCBI36",
    "hg18": "NCBI36",
    "ncbi36": "NCBI36",
}
_ACCESSION = re.compile(r"^(?:\^PLATFORM|!Platform_geo_accession)\s*=\s*(\S+)\s*$", re.IGNORECASE)
_HEADING_BUILD = re.compile(r"^[\"']?genome[ _]?build[\"']?\s*[,\t=:]\s*[\"']?([^\"',\t]+)", re.IGNORECASE)
TABLE_END = "!platform_table_end"
_PROGRESS_EVERY = 10_000


def canonical_build(text: str) -> str:
    """One name per genome build (``37``, ``hg19``, ``GRCh37`` -> ``GRCh37``); others as written."""
    text = text.strip()
    return _BUILDS.get(text.lower(), text)


def canonical_chromosome(text: str) -> str:
    """One name per chromosome: without ``chr``, upper case, ``M`` as ``MT`` (``chr1`` -> ``1``)."""
    text = text.strip()
    if text[:3].lower() == "chr":
        text = text[3:]
    text = text.upper()
    return "MT" if text == "M" else text


@dataclass
class AnnotationTable:
    """A parsed table, in file order; ``genes`` pairs (upper-case gene, row) for every gene of a row."""

    path: str
    format: str
    platform: str
    build: str
    probe_ids: np.ndarray
    chromosome: np.ndarray
    position: np.ndarray
    island: np.ndarray
    gene_names: list[str] = field(default_factory=list)
    gene_rows: list[int] = field(default_factory=list)
    has_genes: bool = False


def open_text(path: Path) -> io.TextIOBase:
    """A text stream of ``path``, gunzipped when its first bytes say gzip."""
    raw = path.open("rb")
    head = raw.read(2)
    raw.seek(0)
    stream = gzip.open(raw) if head == b"\x1f\x8b" else raw  # noqa: SIM115 - the wrapper owns it
    return io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline="")


def read_annotation(path: str | Path, *, on_rows: Callable[[int], None] | None = None) -> AnnotationTable:
    """Parse the table at ``path`` (module docstring: the layouts); IngestError on any fault."""
    path = Path(path)
    if not path.is_file():
        raise IngestError("annotation file not found", path=str(path))
    try:
        with open_text(path) as handle:
            return _Parser(path, handle, on_rows).run()
    except (OSError, EOFError, zlib.error) as error:
        raise IngestError(f"cannot read the file (corrupt gzip?): {error}", path=str(path)) from None
    except csv.Error as error:
        raise IngestError(f"not a readable CSV/TSV table: {error}", path=str(path)) from None


def _first(names: list[str], wanted: tuple[str, ...]) -> int | None:
    return next((names.index(c) for c in wanted if c in names), None)


class _Parser:
    def __init__(self, path: Path, handle: io.TextIOBase, on_rows: Callable[[int], None] | None) -> None:
        self.path, self.where, self.handle, self.on_rows = path, str(path), handle, on_rows
        self.line = 0
        self.platform = ""
        self.build = ""
        self.build_line: int | None = None
        self.format = "table"
        self.framed = False  # a GEO !platform_table_begin was seen: its end must be too
        self.ended = False

    def error(self, message: str, *, line: int | None = None, column: int | None = None) -> IngestError:
        return IngestError(message, path=self.where, line=line, column=column)

    def _lines(self) -> Iterator[str]:
        for text in self.handle:
            self.line += 1
            yield text

    def _preamble(self, lines: Iterator[str]) -> tuple[list[str], str]:
        """Read up to the header row; note the platform and build stated on the way."""
        for text in lines:
            stripped = text.strip().lstrip("\ufeff")
            if not stripped:
                continue
            lowered = stripped.lower()
            if lowered.startswith("#"):
                continue  # a comment (GEO's column descriptions)
            if lowered.startswith(("^platform", "!platform")) or lowered == "[assay]":
                self.format = "illumina-manifest" if lowered == "[assay]" else "geo-platform"
                self.framed = self.framed or lowered.startswith("!platform_table_begin")
                match = _ACCESSION.match(stripped)
                if match:
                    self.platform = match.group(1)
                continue
            match = _HEADING_BUILD.match(stripped)
            if match and not _looks_like_header(stripped):
                self.build, self.build_line = canonical_build(match.group(1)), self.line
                continue
            if stripped.startswith("[") or not _looks_like_header(stripped):
                if stripped.startswith("[Heading]"):
                    self.format = "illumina-manifest"
                continue
            delimiter = "\t" if "\t" in stripped else ","
            names = next(csv.reader([stripped], delimiter=delimiter))
            return [n.strip().lower() for n in names], delimiter
        raise self.error(
            "no header row with a probe id and a position column (e.g. IlmnID or ID, CHR, MAPINFO)"
        )

    def run(self) -> AnnotationTable:
        lines = self._lines()
        names, delimiter = self._preamble(lines)
        header_line = self.line
        col_id, col_chr, col_pos = (_first(names, c) for c in (PROBE_COLUMNS, CHROM_COLUMNS, POS_COLUMNS))
        assert col_id is not None and col_pos is not None
        col_gene, col_island, col_build = (
            _first(names, c) for c in (GENE_COLUMNS, ISLAND_COLUMNS, BUILD_COLUMNS)
        )
        width, needed = len(names), max(col_id, col_chr or 0, col_pos)
        ids: list[str] = []
        chroms: list[str] = []
        positions: list[int] = []
        islands: list[str] = []
        lines_of: list[int] = []
        table = AnnotationTable(
            self.where, self.format, "", "", *(np.empty(0),) * 4, has_genes=col_gene is not None
        )

        def body() -> Iterator[str]:
            for text in lines:
                head = text.lstrip()
                if head.lower().startswith(TABLE_END) or head.startswith("["):
                    self.ended = True
                    return
                if text.strip():
                    yield text

        for row in csv.reader(body(), delimiter=delimiter):
            line = self.line
            if len(row) > width:
                raise self.error(
                    f"row has {len(row)} fields, the header has {width}", line=line, column=width + 1
                )
            if len(row) <= needed:
                raise self.error(
                    f"row has {len(row)} fields; the probe, chromosome and position columns "
                    f"need {needed + 1}",
                    line=line,
                    column=len(row) + 1,
                )
            probe = row[col_id].strip()
            if not probe.isascii() or not 0 < len(probe) <= 64 or any(c.isspace() for c in probe):
                raise self.error(
                    f"probe id {probe[:70]!r} is not 1 to 64 ASCII characters", line=line, column=col_id + 1
                )
            chrom = canonical_chromosome(row[col_chr]) if col_chr is not None else ""
            if not chrom.isascii() or len(chrom) > 16 or any(c.isspace() for c in chrom):
                raise self.error(
                    f"chromosome {chrom[:70]!r} is not a short ASCII name",
                    line=line,
                    column=(col_chr or 0) + 1,
                )
            position = _position(row[col_pos].strip(), self, line, col_pos + 1)
            if col_build is not None and col_build < len(row) and row[col_build].strip():
                self._note_build(row[col_build], line, col_build + 1)
            index = len(ids)
            if col_gene is not None and col_gene < len(row):
                for gene in {g.strip() for g in row[col_gene].split(";") if g.strip()}:
                    if not GENE_SYMBOL.fullmatch(gene):
                        raise self.error(
                            f"gene name {gene[:70]!r} is not a gene symbol", line=line, column=col_gene + 1
                        )
                    table.gene_names.append(gene.upper())
                    table.gene_rows.append(index)
            island = row[col_island].strip() if col_island is not None and col_island < len(row) else ""
            if not island.isascii() or len(island) > 32:
                raise self.error(
                    f"CpG island relation {island[:70]!r} is not a short ASCII name",
                    line=line,
                    column=(col_island or 0) + 1,
                )
            ids.append(probe)
            chroms.append(chrom)
            positions.append(position)
            islands.append(island)
            lines_of.append(line)
            if self.on_rows is not None and len(ids) % _PROGRESS_EVERY == 0:
                self.on_rows(_PROGRESS_EVERY)
        if self.framed and not self.ended:
            raise self.error(f"no {TABLE_END} after the rows: truncated download?", line=self.line)
        if not ids:
            raise self.error("the table has no probe rows after its header", line=header_line)
        if self.on_rows is not None:
            self.on_rows(len(ids) % _PROGRESS_EVERY)
        table.probe_ids = np.array(ids, dtype="S")
        _refuse_duplicates(table.probe_ids, lines_of, self, col_id + 1)
        table.chromosome = np.array(chroms, dtype="S")
        table.position = np.array(positions, dtype=np.int64)
        table.island = np.array(islands, dtype="S")
        table.platform, table.build, table.format = self.platform, self.build, self.format
        return table

    def _note_build(self, text: str, line: int, column: int) -> None:
        build = canonical_build(text)
        if self.build and build != self.build:
            where = f"line {self.build_line}" if self.build_line else "an earlier line"
            raise self.error(
                f"genome build {build!r} differs from {self.build!r} on {where}", line=line, column=column
            )
        if not self.build:
            self.build, self.build_line = build, line


def _looks_like_header(text: str) -> bool:
    delimiter = "\t" if "\t" in text else ","
    names = [n.strip().strip('"').lower() for n in text.split(delimiter)]
    return all(_first(names, c) is not None for c in (PROBE_COLUMNS, POS_COLUMNS))


def _position(text: str, parser: _Parser, line: int, column: int) -> int:
    """A 1-based position (empty or ``0``: unknown, -1); anything but a whole number is refused."""
    if not text:
        return -1
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and number >= 0 and number == int(number) and number < 2**62):
        message = f"position {text[:40]!r} is not a number (a whole 1-based position)"
        raise parser.error(message, line=line, column=column)
    return int(number) if number > 0 else -1


def _refuse_duplicates(ids: np.ndarray, lines_of: list[int], parser: _Parser, column: int) -> None:
    order = np.argsort(ids, kind="stable")
    ordered = ids[order]
    repeats = np.flatnonzero(ordered[1:] == ordered[:-1])
    if repeats.size:
        lines = np.asarray(lines_of)
        first, again = order[repeats[0]], order[repeats[0] + 1]
        raise parser.error(
            f"probe id {ids[again].decode()!r} repeats line {lines[first]}",
            line=int(lines[again]),
            column=column,
        )

"""Readers of methylation matrices (mbeacon.store.readers): exact values, exact errors, any batch size.

Fixtures in tests/data/ingest/ are small hand-made files in the real layouts (GEO series matrix, GEO
supplementary matrices with detection p-values, a GDC download folder) and one bad file per refusal.
Property tests write random matrices in every format and dialect and read them back exactly, and
corrupt valid files at random: the only exception ever allowed is IngestError.
"""

from __future__ import annotations

import contextlib
import gzip
import math
import shutil
import string
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from mbeacon.store.errors import IngestError
from mbeacon.store.readers import MatrixBatch, MatrixSource, _stream, detect_format, open_matrix

DATA = Path(__file__).parent / "data" / "ingest"
NAN = math.nan

GEO_SAMPLES = ["GSM1009660", "GSM1009661", "GSM1009662"]
GEO_IDS = ["cg00000029", "cg00000321", "cg00003578", "cg00003965", "cg00005166", "cg00005619"]
GEO_VALUES = [
    [0.5553, 0.53676, 0.514478],
    [0.390637, NAN, 0.337039],
    [0.684878, 0.679939, NAN],
    [0.86314, 0.862348, 0.858031],
    [0.586977, 0.632108, 0.559112],
    [1, 0, 0.519052],
]

PVAL_IDS = ["cg00000029", "cg00000321", "cg00003578", "cg00003965"]
PVAL_BETAS = [
    [0.5553, 0.53676, 0.514478],
    [0.390637, NAN, 0.337039],
    [0.684878, 0.679939, NAN],
    [0.86314, 0.862348, 0.858031],
]
# p-values:  Blood1: <1E-16 0.05 <1E-16 0.5 | Blood2: 0.0012 <1E-16 0.011 <1E-16 | Blood3: 0.2 1.5E-3 NA 0.009
PVAL_CUT_001 = [
    [0.5553, 0.53676, NAN],
    [NAN, NAN, 0.337039],
    [0.684878, NAN, NAN],
    [NAN, 0.862348, 0.858031],
]

GDC_SAMPLES = ["TCGA-A1-A0SB-01A", "TCGA-A1-A0SD-01A", "TCGA-A1-A0SE-11A", "TCGA-A1-A0SF-01A"]
GDC_IDS = ["cg00000029", "cg00000108", "cg00000109", "cg00000165", "cg00000236"]
GDC_VALUES = [
    [0.5553, 0.49, 0.61, 0.259],
    [NAN, 0.75, NAN, NAN],
    [0.912, NAN, 0.88, 0.873],
    [0.1034, 0.2, 0.3, 0.143],
    [NAN, NAN, 0.71, NAN],
]


def read_all(source: MatrixSource) -> tuple[list[str], np.ndarray]:
    """Every batch of a source, checked for shape and type, concatenated."""
    ids: list[str] = []
    blocks: list[np.ndarray] = []
    for batch in source.batches():
        assert isinstance(batch, MatrixBatch)
        assert batch.values.dtype == np.float32
        assert batch.values.flags.c_contiguous
        assert batch.values.shape == (len(batch.probe_ids), len(source.samples))
        assert 0 < len(batch.probe_ids) <= source.batch_rows
        ids.extend(batch.probe_ids)
        blocks.append(batch.values)
    sizes = [len(block) for block in blocks]
    assert all(size == source.batch_rows for size in sizes[:-1]), sizes
    return ids, np.concatenate(blocks)


def assert_values(actual: np.ndarray, expected: list[list[float]] | np.ndarray) -> None:
    np.testing.assert_array_equal(actual, np.asarray(expected, dtype=np.float32), strict=True)


def consume(path: str | Path, **kwargs: object) -> tuple[MatrixSource, list[str], np.ndarray]:
    source = open_matrix(path, **kwargs)  # type: ignore[arg-type]
    ids, values = read_all(source)
    return source, ids, values


@contextlib.contextmanager
def chunk_bytes(size: int) -> Iterator[None]:
    """Parse in chunks of about ``size`` bytes (tiny chunks put every row on a chunk boundary)."""
    saved = _stream.CHUNK_BYTES
    _stream.CHUNK_BYTES = size
    try:
        yield
    finally:
        _stream.CHUNK_BYTES = saved


# --------------------------------------------------------------------------------------------------
# Formats parse to the exact values, whatever the batch and chunk sizes


@pytest.mark.parametrize(
    "name",
    ["GSE41169_series_matrix.txt", "GSE41169_series_matrix.txt.gz", "GSE41169_series_matrix_crlf.txt"],
)
@pytest.mark.parametrize("batch_rows", [1, 2, 7, 65_536])
def test_geo_series_matrix(name: str, batch_rows: int) -> None:
    path = DATA / "geo" / name
    assert detect_format(path) == "geo"
    source, ids, values = consume(path, batch_rows=batch_rows)
    assert source.format == "geo"
    assert source.path == str(path)
    assert source.samples == GEO_SAMPLES
    assert ids == GEO_IDS
    assert_values(values, GEO_VALUES)
    meta = source.metadata
    assert meta["Series_title"] == "Genome-wide DNA methylation of whole blood (excerpt)"
    assert meta["Series_geo_accession"] == "GSE41169"
    assert meta["Series_platform_id"] == "GPL13534"
    assert meta["Series_summary"].split("\n")[1] == "Excerpt of 6 probes and 3 samples for tests."
    assert meta["Sample_geo_accession"] == "\t".join(GEO_SAMPLES)
    assert meta["Sample_characteristics_ch1"] == (
        "gender: Male\tgender: Female\tgender: Male\nage: 32\tage: 51\tage: 27"
    )


@pytest.mark.parametrize("name", ["betas_pval.tsv", "betas_pval.csv", "betas_pval.txt"])
@pytest.mark.parametrize("batch_rows", [1, 2, 7])
def test_matrix_with_detection_pvalues(name: str, batch_rows: int) -> None:
    path = DATA / "matrix" / name
    assert detect_format(path) == "matrix"
    source, ids, values = consume(path, batch_rows=batch_rows)
    assert source.format == "matrix"
    assert source.samples == ["Blood1", "Blood2", "Blood3"]
    assert ids == PVAL_IDS
    assert_values(values, PVAL_BETAS)  # without a cut the p-value columns are dropped
    source, ids, values = consume(path, pval_cut=0.01, batch_rows=batch_rows)
    assert source.samples == ["Blood1", "Blood2", "Blood3"]
    assert ids == PVAL_IDS
    assert_values(values, PVAL_CUT_001)
    _, _, values = consume(path, pval_cut=1e-16)  # <1E-16 reads as 1e-16: kept at a cut of 1e-16
    assert_values(values, [[0.5553, NAN, NAN], [NAN, NAN, NAN], [0.684878, NAN, NAN], [NAN, 0.862348, NAN]])


def test_plain_csv_with_quoting_and_missing_values() -> None:
    path = DATA / "matrix" / "plain_quoted.csv"
    source, ids, values = consume(path, batch_rows=2)
    assert source.samples == ["Patient A", "Patient B", "Patient C"]
    assert ids == ["cg00000029", "cg00000321", "cg00003578", "cg00003965", "cg0000,5166", 'cg"quoted"']
    assert_values(
        values,
        [
            [0.5553, 0.53676, 0.514478],
            [NAN, NAN, NAN],
            [NAN, NAN, NAN],
            [0.86314, NAN, 1],
            [0.586977, 0.632108, 0],
            [0.001, 0.25, 0.5],
        ],
    )


@pytest.mark.parametrize("batch_rows", [1, 2, 7, 65_536])
def test_gdc_folder(batch_rows: int) -> None:
    folder = DATA / "gdc"
    assert detect_format(folder) == "gdc"
    source, ids, values = consume(folder, batch_rows=batch_rows)
    assert source.format == "gdc"
    assert source.samples == GDC_SAMPLES
    assert ids == GDC_IDS  # union in order of first appearance; the file not in the sheet is ignored
    assert_values(values, GDC_VALUES)
    assert source.metadata["Project ID"] == "TCGA-BRCA"
    assert source.metadata["Sample Type"] == "Primary Tumor, Solid Tissue Normal"


def test_gdc_sample_sheet_given_explicitly_or_as_path(tmp_path: Path) -> None:
    sheet = DATA / "gdc" / "gdc_sample_sheet.2024-05-01.tsv"
    assert detect_format(sheet) == "gdc"
    _, ids, values = consume(sheet)
    assert ids == GDC_IDS
    assert_values(values, GDC_VALUES)
    folder = tmp_path / "download"
    shutil.copytree(DATA / "gdc", folder)
    elsewhere = tmp_path / "sheet.tsv"
    (folder / sheet.name).rename(elsewhere)
    with pytest.raises(IngestError, match="no GDC sample sheet"):
        open_matrix(folder)
    source, ids, values = consume(folder, sample_sheet=elsewhere, batch_rows=3)
    assert source.samples == GDC_SAMPLES
    assert ids == GDC_IDS
    assert_values(values, GDC_VALUES)


@pytest.mark.parametrize("size", [1, 13, 64])
def test_chunk_boundaries_do_not_matter(size: int) -> None:
    with chunk_bytes(size):
        _, ids, values = consume(DATA / "geo" / "GSE41169_series_matrix_crlf.txt", batch_rows=4)
        assert ids == GEO_IDS
        assert_values(values, GEO_VALUES)
        _, ids, values = consume(DATA / "matrix" / "betas_pval.txt", pval_cut=0.01, batch_rows=3)
        assert_values(values, PVAL_CUT_001)
        _, ids, values = consume(DATA / "gdc", batch_rows=2)
        assert ids == GDC_IDS
        assert_values(values, GDC_VALUES)


def test_real_geo_blood_table_matches_pandas() -> None:
    import pandas as pd

    path = (
        Path(__file__).resolve().parents[1]
        / "mbeacon"
        / "data"
        / "GSE41169_blood_20k_probes_x_10_samples.csv.gz"
    )
    expected = pd.read_csv(path, index_col=0)
    source, ids, values = consume(path, batch_rows=5_000)
    assert source.samples == list(expected.columns)
    assert ids == list(expected.index)
    assert_values(values, expected.to_numpy(dtype=np.float32))


def test_blank_lines_r_style_header_and_batches_twice(tmp_path: Path) -> None:
    path = tmp_path / "r_style.tsv"
    path.write_bytes(b"\nS1\tS2\n\ncg1\t0.1\t0.2\n\r\ncg2\t0.3\tNA\n\n\n")
    source = open_matrix(path, batch_rows=1)
    assert source.samples == ["S1", "S2"]
    for _ in range(2):  # each call of batches() reads the file again
        ids, values = read_all(source)
        assert ids == ["cg1", "cg2"]
        assert_values(values, [[0.1, 0.2], [0.3, NAN]])
    one = tmp_path / "one_sample.csv"
    one.write_text("S1\ncg1,0.5\n")
    _, ids, values = consume(one)
    assert ids == ["cg1"]
    assert_values(values, [[0.5]])


def test_byte_order_mark_aligned_spaces_and_latin1_header(tmp_path: Path) -> None:
    bom = tmp_path / "excel.csv"
    bom.write_bytes(b"\xef\xbb\xbfID_REF,S1\r\ncg1,0.5\r\n")
    source, ids, values = consume(bom)
    assert (source.samples, ids) == (["S1"], ["cg1"])
    aligned = tmp_path / "aligned.txt"
    aligned.write_text('  ID_REF        S1       S2\ncg1    0.25   NA  \n  cg2 1e-2 ""\n')
    source, ids, values = consume(aligned, batch_rows=1)
    assert (source.samples, ids) == (["S1", "S2"], ["cg1", "cg2"])
    assert_values(values, [[0.25, NAN], [0.01, NAN]])
    latin1 = tmp_path / "latin1.tsv"
    latin1.write_bytes("ID\tPatient \u00e9\ncg1\t0.5\n".encode("latin-1"))
    source, _, _ = consume(latin1)
    assert source.samples == ["Patient \u00e9"]


def test_abandoned_stream_stops_its_threads() -> None:
    import threading

    before = threading.active_count()
    with chunk_bytes(64):
        batches = open_matrix(DATA / "geo" / "GSE41169_series_matrix.txt.gz", batch_rows=1).batches()
        next(batches)
        assert threading.active_count() > before
        batches.close()
    assert threading.active_count() == before


def test_pvalue_exactly_at_the_cut_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "cut.csv"
    path.write_text("ID,A,A_pval,B,B Detection Pval\ncg1,0.1,0.05,0.2,0.0500001\ncg2,0.3,,0.4,NA\n")
    _, _, values = consume(path, pval_cut=0.05)
    assert_values(values, [[0.1, NAN], [0.3, 0.4]])


# --------------------------------------------------------------------------------------------------
# Refusals: IngestError naming file, line and column


REFUSALS = [
    # file, open_matrix keyword arguments, line, column, part of the message
    ("bad/out_of_range.csv", {}, 4, "3 (S2)", "beta value 1.2 is outside [0, 1]"),
    ("bad/negative.tsv", {}, 3, "2 (S1)", "beta value -0.01 is outside [0, 1]"),
    ("bad/geo_out_of_range.txt", {}, 32, "2 (GSM1009660)", "outside [0, 1]"),
    ("bad/non_numeric.csv", {}, 4, "4 (S3)", "not a number: '0.9x'"),
    ("bad/ragged_short.csv", {}, 4, "4 (S3)", "row has 3 fields but the header on line 1 has 4"),
    ("bad/ragged_long.csv", {}, 4, 5, "row has 5 fields but the header on line 1 has 4"),
    ("bad/duplicate_probe.csv", {}, 5, "1 (ID_REF)", "duplicate probe id 'cg00000108' (first on line 3)"),
    ("bad/duplicate_sample.csv", {}, 1, "4 (S1)", "duplicate sample id 'S1' (also column 2)"),
    ("bad/empty.csv", {}, 1, None, "the file is empty"),
    ("bad/empty.csv", {"format": "matrix"}, 1, None, "the file is empty"),
    ("matrix/header_only.csv", {}, 1, None, "no data rows after the header"),
    ("bad/unknown_soft.txt", {}, 1, None, "unknown format: a GEO SOFT file"),
    ("bad/unknown_one_column.txt", {}, 1, None, "unknown format"),
    ("bad/unknown_binary.dat", {}, 1, None, "unknown format: binary data"),
    ("geo/GSE41169_series_matrix.txt", {"format": "excel"}, None, None, "unknown format 'excel'"),
    ("bad/geo_truncated.txt", {}, 31, None, "ends without !series_matrix_table_end"),
    ("bad/unterminated_quote.csv", {}, 4, "1 (ID_REF)", "quote"),
    ("bad/pval_orphan.tsv", {}, 1, "2 (Detection Pval)", "belongs to no sample"),
    (
        "bad/pval_not_numeric.tsv",
        {"pval_cut": 0.05},
        3,
        "3 (S1_pval)",
        "detection p-value 'low' is not a number",
    ),
    ("bad/does_not_exist.csv", {}, None, None, "no such file"),
]


@pytest.mark.parametrize(("name", "kwargs", "line", "column", "message"), REFUSALS)
@pytest.mark.parametrize("size", [None, 9])
def test_refusals_name_line_and_column(
    name: str,
    kwargs: dict[str, object],
    line: int | None,
    column: int | str | None,
    message: str,
    size: int | None,
) -> None:
    path = DATA / name
    with chunk_bytes(size or _stream.CHUNK_BYTES), pytest.raises(IngestError) as caught:
        consume(path, **kwargs)
    error = caught.value
    assert error.path == str(path)
    assert (error.line, error.column) == (line, column)
    assert message in error.message
    assert str(error).startswith(f"{path}, line {line}" if line else str(path))


def test_gdc_sheet_row_without_its_file() -> None:
    sheet = DATA / "gdc_missing_file" / "gdc_sample_sheet.tsv"
    with pytest.raises(IngestError) as caught:
        open_matrix(DATA / "gdc_missing_file")
    error = caught.value
    assert (error.path, error.line, error.column) == (str(sheet), 3, "2 (File Name)")
    assert "missing.methylation_array.sesame.level3betas.txt" in error.message


def _gdc_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "gdc"
    shutil.copytree(DATA / "gdc", folder)
    return folder


def test_gdc_refusals(tmp_path: Path) -> None:
    folder = _gdc_copy(tmp_path)
    sheet = folder / "gdc_sample_sheet.2024-05-01.tsv"
    first = folder / "0b8f4e53-3d38-4a73-8c2c-1b4fc9a2f5a1.methylation_array.sesame.level3betas.txt"
    original_sheet, original_first = sheet.read_text(), first.read_text()

    sheet.write_text(original_sheet.replace("TCGA-A1-A0SD-01A", "TCGA-A1-A0SB-01A"))
    with pytest.raises(IngestError) as caught:
        open_matrix(folder)
    assert (caught.value.path, caught.value.line, caught.value.column) == (str(sheet), 3, "7 (Sample ID)")
    assert "duplicate sample id" in caught.value.message
    sheet.write_text(original_sheet)

    first.write_text(original_first.replace("0.912", "9.12"))
    with pytest.raises(IngestError) as caught:
        consume(folder)
    assert (caught.value.path, caught.value.line, caught.value.column) == (str(first), 3, 2)
    first.write_text(original_first + "cg00000108\t0.5\n")
    with pytest.raises(IngestError, match="duplicate probe id 'cg00000108' \\(first on line 2\\)") as caught:
        consume(folder)
    assert (caught.value.path, caught.value.line) == (str(first), 5)
    first.write_text("")
    with pytest.raises(IngestError, match="empty") as caught:
        consume(folder)
    assert caught.value.path == str(first)
    first.write_text(original_first)

    legacy = next(folder.glob("*/jhu-usc*.txt"))
    legacy.write_text(legacy.read_text().replace("cg00000109\t0.873\tFNDC3B\t3", "cg00000109\t0.873\tFNDC3B"))
    with pytest.raises(IngestError) as caught:
        consume(folder)
    assert (caught.value.path, caught.value.line, caught.value.column) == (
        str(legacy),
        5,
        "5 (Genomic_Coordinate)",
    )


def test_line_endings_and_stray_carriage_returns(tmp_path: Path) -> None:
    path = tmp_path / "cr.csv"
    path.write_bytes(b"ID,S1,S2\r\ncg1,0.1,0.2\rcg2,0.3,0.4\r\n")
    with pytest.raises(IngestError, match="carriage return") as caught:
        consume(path)
    assert caught.value.line == 2
    path.write_bytes(b"ID,S1,S2\rcg1,0.1,0.2\r")
    with pytest.raises(IngestError, match="carriage return"):
        consume(path)


def test_corrupt_gzip(tmp_path: Path) -> None:
    text = "ID_REF,S1\n" + "".join(f"cg{i:08d},0.{i % 97:02d}\n" for i in range(20_000))
    packed = gzip.compress(text.encode(), mtime=0)
    path = tmp_path / "truncated.csv.gz"
    path.write_bytes(packed[: len(packed) // 2])
    with chunk_bytes(4096), pytest.raises(IngestError, match="cannot read") as caught:
        consume(path)
    assert caught.value.line is not None and caught.value.line > 1
    path.write_bytes(packed[:10] + b"\x00" * 50 + packed[60:])
    with pytest.raises(IngestError):
        consume(path)


def test_duplicate_probe_far_apart_names_its_first_line(tmp_path: Path) -> None:
    lines = [f"cg{i:08d}\t0.5" for i in range(3_000)]
    lines.append("cg00000007\t0.25")
    path = tmp_path / "dup.tsv"
    path.write_text("ID_REF\tS1\n" + "\n".join(lines) + "\n")
    with chunk_bytes(1024), pytest.raises(IngestError) as caught:
        consume(path)
    assert (caught.value.line, caught.value.column) == (3_002, "1 (ID_REF)")
    assert "first on line 9" in caught.value.message


def test_argument_errors() -> None:
    path = DATA / "matrix" / "plain_quoted.csv"
    with pytest.raises(ValueError, match="batch_rows"):
        open_matrix(path, batch_rows=0)
    with pytest.raises(ValueError, match="pval_cut"):
        open_matrix(path, pval_cut=1.5)
    with pytest.raises(ValueError, match="sample_sheet"):
        open_matrix(path, sample_sheet=path)
    with pytest.raises(IngestError, match="folder"):
        open_matrix(DATA / "gdc", format="matrix")


# --------------------------------------------------------------------------------------------------
# Properties: random matrices round-trip exactly in every dialect; corruptions raise only IngestError

ID_CHARS = string.ascii_letters + string.digits + "_-."
MISSING = ["", "NA", "NaN", "null", "NULL", '""']


def _name(prefix: str) -> st.SearchStrategy[str]:
    return st.text(ID_CHARS, min_size=0, max_size=10).map(lambda tail: prefix + tail)


@st.composite
def matrices(
    draw: st.DrawFn, max_rows: int = 25, max_samples: int = 5
) -> tuple[list[str], list[str], np.ndarray]:
    n_rows = draw(st.integers(1, max_rows))
    n_samples = draw(st.integers(1, max_samples))
    probes = draw(
        st.lists(
            st.text(ID_CHARS, min_size=1, max_size=12).filter(lambda s: s not in MISSING and s != "nan"),
            min_size=n_rows,
            max_size=n_rows,
            unique=True,
        )
    )
    samples = draw(
        st.lists(
            _name("S").filter(lambda s: "pval" not in s.lower()),
            min_size=n_samples,
            max_size=n_samples,
            unique=True,
        )
    )
    values = draw(
        arrays(
            np.float32, (n_rows, n_samples), elements=st.floats(0, 1, width=32) | st.just(np.float32(np.nan))
        )
    )
    return probes, samples, values


FORMATTERS = [
    lambda v: repr(float(v)),
    lambda v: np.format_float_positional(np.float32(v)),
    lambda v: np.format_float_scientific(np.float32(v)),
]


def _cell(value: float, fmt: int, missing: str) -> str:
    return missing if math.isnan(value) else FORMATTERS[fmt](value)


def _quote(field: str, quoting: bool) -> str:
    if not quoting or field == '""':  # '""' is the quoted-empty spelling of a missing value already
        return field
    return '"' + field.replace('"', '""') + '"'


def _write(path: Path, lines: list[str], *, crlf: bool, compress: bool) -> None:
    data = ("\r\n" if crlf else "\n").join(lines) + ("\r\n" if crlf else "\n")
    path.write_bytes(gzip.compress(data.encode(), mtime=0) if compress else data.encode())


dialects = st.fixed_dictionaries(
    {
        "crlf": st.booleans(),
        "compress": st.booleans(),
        "fmt": st.integers(0, len(FORMATTERS) - 1),
        "missing": st.sampled_from(MISSING),
        "quote_ids": st.booleans(),
        "quote_values": st.booleans(),
        "batch_rows": st.integers(1, 9),
        "chunk": st.sampled_from([5, 17, 64, 1 << 20]),
    }
)


def _geo_lines(probes: list[str], samples: list[str], values: np.ndarray, d: dict) -> list[str]:
    lines = [
        '!Series_title\t"A random series"',
        '!Series_geo_accession\t"GSE1"',
        '!Series_platform_id\t"GPL13534"',
        "",
        "!Sample_geo_accession\t" + "\t".join(f'"{s}"' for s in samples),
        "!series_matrix_table_begin",
        "\t".join(f'"{s}"' for s in ["ID_REF", *samples]),
    ]
    for probe, row in zip(probes, values, strict=True):
        cells = [_quote(_cell(v, d["fmt"], d["missing"]), d["quote_values"]) for v in row]
        lines.append("\t".join([_quote(probe, d["quote_ids"]), *cells]))
    lines.append("!series_matrix_table_end")
    return lines


@st.composite
def matrix_files(draw: st.DrawFn) -> dict:
    probes, samples, values = draw(matrices())
    d = draw(dialects)
    delimiter = draw(st.sampled_from(["\t", ",", " "]))
    first = draw(st.sampled_from(["ID_REF", "TargetID", "", None]))
    if delimiter == " " and first == "":
        first = "ID"
    missing = d["missing"] if delimiter != " " or d["missing"] else "NA"
    pvals = draw(
        st.none()
        | arrays(
            np.float64,
            values.shape,
            elements=st.sampled_from([0.0, 1e-16, 0.001, 0.01, 0.05, 0.5, 1.0, math.nan]),
        )
    )
    cut = draw(st.none() | st.sampled_from([0.0, 0.01, 0.05])) if pvals is not None else None
    header = [] if first is None else [first]
    for sample in samples:
        header.append(sample)
        if pvals is not None:
            header.append(
                draw(st.sampled_from([f"{sample}_pval", f"{sample}.Detection_Pval", "DetectionPval"]))
            )
    quote_header = d["quote_ids"] or draw(st.booleans())
    lines = [delimiter.join(_quote(name, quote_header) for name in header)]
    for i, probe in enumerate(probes):
        cells = [_quote(probe, d["quote_ids"])]
        for j in range(len(samples)):
            cells.append(_quote(_cell(values[i, j], d["fmt"], missing), d["quote_values"]))
            if pvals is not None:
                p = pvals[i, j]
                text = "NA" if math.isnan(p) else ("<1E-16" if p == 1e-16 else repr(float(p)))
                cells.append(_quote(text, d["quote_values"]))
        lines.append(delimiter.join(cells))
    expected = values.copy()
    if cut is not None:
        expected[pvals > cut] = np.nan
    return {
        "kind": "matrix",
        "lines": lines,
        "probes": probes,
        "samples": samples,
        "expected": expected,
        "cut": cut,
        **d,
    }


@st.composite
def geo_files(draw: st.DrawFn) -> dict:
    probes, samples, values = draw(matrices())
    samples = [f"GSM{i}{s}" for i, s in enumerate(samples)]
    d = draw(dialects)
    lines = _geo_lines(probes, samples, values, d)
    return {
        "kind": "geo",
        "lines": lines,
        "probes": probes,
        "samples": samples,
        "expected": values,
        "cut": None,
        **d,
    }


def _check_round_trip(case: dict, path: Path) -> None:
    _write(path, case["lines"], crlf=case["crlf"], compress=case["compress"])
    assert detect_format(path) == case["kind"]
    with chunk_bytes(case["chunk"]):
        source, ids, values = consume(path, pval_cut=case["cut"], batch_rows=case["batch_rows"])
    assert source.format == case["kind"]
    assert source.samples == case["samples"]
    assert ids == case["probes"]
    assert_values(values, case["expected"])


def _examples(n: int) -> settings:
    return settings(max_examples=n, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def round_trip(case: dict) -> None:
    """A random matrix written in a random dialect reads back exactly."""
    with tempfile.TemporaryDirectory() as tmp:
        _check_round_trip(case, Path(tmp) / ("table.gz" if case["compress"] else "table.txt"))


test_random_matrices_round_trip = _examples(120)(
    given(case=st.one_of(matrix_files(), geo_files()))(round_trip)
)
test_random_matrices_round_trip_many = pytest.mark.slow(
    _examples(3_000)(given(case=st.one_of(matrix_files(), geo_files()))(round_trip))
)

gdc_downloads = st.fixed_dictionaries(
    {
        "data": matrices(max_rows=12, max_samples=4),
        "styles": st.lists(
            st.sampled_from(["level3betas", "legacy", "legacy_barcode"]), min_size=4, max_size=4
        ),
        "keep": st.lists(st.lists(st.booleans(), min_size=12, max_size=12), min_size=4, max_size=4),
        "shuffle": st.randoms(use_true_random=False),
        "compress": st.booleans(),
        "batch_rows": st.integers(1, 7),
    }
)


def gdc_round_trip(download: dict) -> None:
    """Random per-sample files (both layouts, random probe subsets and orders) assemble exactly."""
    probes, samples, values = download["data"]
    styles, keep, shuffle = download["styles"], download["keep"], download["shuffle"]
    compress, batch_rows = download["compress"], download["batch_rows"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sheet = ["File ID\tFile Name\tData Category\tData Type\tProject ID\tCase ID\tSample ID\tSample Type"]
        union: list[str] = []
        columns: dict[str, list[tuple[str, float]]] = {}
        for j, sample in enumerate(samples):
            # every file lists some probes (the first file all of them): a file without rows is refused
            rows = [
                (p, values[i, j])
                for i, p in enumerate(probes)
                if keep[j % 4][i % 12] or j == 0 or i == j % len(probes)
            ]
            if j:
                shuffle.shuffle(rows)
            columns[sample] = rows
            union.extend(p for p, _ in rows if p not in union)
            style = styles[j % 4]
            lines = []
            if style == "legacy_barcode":
                lines.append("Hybridization REF\t" + "\t".join([f"TCGA-{j}"] * 4))
            if style != "level3betas":
                lines.append("Composite Element REF\tBeta_value\tGene_Symbol\tChromosome\tGenomic_Coordinate")
            for probe, value in rows:
                beta = "NA" if math.isnan(value) else repr(float(value))
                lines.append(f"{probe}\t{beta}" + ("" if style == "level3betas" else "\tGENE\t1\t12345"))
            name = f"file{j}.txt"
            sub = folder / f"id{j}" if j % 2 else folder
            sub.mkdir(exist_ok=True)
            _write(sub / name, lines, crlf=False, compress=compress)
            sheet.append(
                f"id{j}\t{name}\tDNA Methylation\tBeta Value\tTCGA-X\tcase{j}\t{sample}\tPrimary Tumor"
            )
        (folder / "gdc_sample_sheet.tsv").write_text("\n".join(sheet) + "\n")
        expected = np.full((len(union), len(samples)), np.nan, dtype=np.float32)
        where = {p: i for i, p in enumerate(union)}
        for j, sample in enumerate(samples):
            for probe, value in columns[sample]:
                expected[where[probe], j] = value
        source, ids, got = consume(folder, batch_rows=batch_rows)
        assert source.samples == samples
        assert ids == union
        assert_values(got, expected)


test_random_gdc_downloads_round_trip = _examples(40)(given(download=gdc_downloads)(gdc_round_trip))
test_random_gdc_downloads_round_trip_many = pytest.mark.slow(
    _examples(1_000)(given(download=gdc_downloads)(gdc_round_trip))
)


JUNK = [
    b"\t",
    b",",
    b" ",
    b'"',
    b"\n",
    b"\r",
    b"\r\n",
    b"x",
    b"-",
    b"9",
    b".",
    b"\x00",
    b"\xff",
    b"!",
    b"NA",
    b"<",
]


@st.composite
def corruptions(draw: st.DrawFn) -> tuple[bytes, bool, str]:
    case = draw(st.one_of(matrix_files(), geo_files()))
    newline = "\r\n" if case["crlf"] else "\n"
    data = bytearray((newline.join(case["lines"]) + newline).encode())
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["replace", "insert", "delete", "truncate", "duplicate_line"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "replace" and data:
            data[at : at + 1] = draw(st.sampled_from(JUNK))
        elif kind == "insert":
            data[at:at] = draw(st.sampled_from(JUNK))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        elif kind == "truncate":
            del data[at:]
        else:
            lines = bytes(data).split(b"\n")
            k = at % len(lines)
            lines.insert(k, lines[k])
            data = bytearray(b"\n".join(lines))
    compress = draw(st.booleans())
    raw = bytes(data)
    if compress:
        raw = gzip.compress(raw, mtime=0)
        if draw(st.booleans()):  # damage the compressed stream itself
            at = draw(st.integers(0, len(raw) - 1))
            raw = raw[:at] + draw(st.sampled_from([b"", b"\x00", b"\xff\xff"])) + raw[at + 1 :]
    return raw, case["cut"] is not None, draw(st.sampled_from(["auto", case["kind"], "matrix", "geo"]))


def corrupted(corrupt: tuple[bytes, bool, str], chunk: int) -> None:
    """A valid file damaged at random raises IngestError, or still reads as a valid matrix."""
    raw, use_cut, fmt = corrupt
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "corrupt.txt"
        path.write_bytes(raw)
        try:
            with chunk_bytes(chunk):
                _, ids, values = consume(path, format=fmt, pval_cut=0.05 if use_cut else None)
        except IngestError as error:
            assert error.path == str(path)
            assert error.message
        else:  # what a corruption leaves valid must still be a valid matrix
            assert len(ids) == len(set(ids)) == len(values)
            finite = values[~np.isnan(values)]
            assert ((finite >= 0) & (finite <= 1)).all()


_corrupt_cases = given(corrupt=corruptions(), chunk=st.sampled_from([7, 64, 1 << 20]))
test_corrupted_files_raise_only_ingest_error = _examples(200)(_corrupt_cases(corrupted))
# 2,500 (was 5,000: 150 s of CI time); tests/test_fuzz_parsers.py fuzzes the same readers besides.
test_corrupted_files_raise_only_ingest_error_many = pytest.mark.slow(
    _examples(2_500)(_corrupt_cases(corrupted))
)

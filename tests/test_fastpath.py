"""The fast ingest path: the compiled kernel, unregrouped blocks, direct chunk writes.

The kernel (mbeacon.store.readers._fastpath) parses the plain case of a table and gives up on
anything else, which then goes through the Arrow parse and, for errors, the exact Python re-scan. The
properties here: on random plain tables the kernel accepts the chunk and gives exactly what Arrow
gives (ids, bit-identical float32 values, NaN); on random damaged tables a whole read gives the same
values or the same error (file, line, column, message) with and without the kernel.
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mbeacon.store.cohorts import CHUNK_ROWS, CohortStore
from mbeacon.store.errors import IngestError
from mbeacon.store.ingest import ingest
from mbeacon.store.readers import _fastpath, _stream, open_matrix
from mbeacon.store.readers._table import Layout, TableParser

NULLS = ["", "NA", "NaN", "nan", "null", "NULL", "N/A", "#N/A"]
ID_CHARS = st.sampled_from("abcgtxyzCG0123456789_-.:é")


@contextlib.contextmanager
def kernel(enabled: bool) -> Iterator[None]:
    saved = _fastpath.ENABLED
    _fastpath.ENABLED = enabled
    try:
        yield
    finally:
        _fastpath.ENABLED = saved


@contextlib.contextmanager
def chunk_bytes(size: int) -> Iterator[None]:
    saved = _stream.CHUNK_BYTES
    _stream.CHUNK_BYTES = size
    try:
        yield
    finally:
        _stream.CHUNK_BYTES = saved


@st.composite
def decimals(draw: st.DrawFn) -> tuple[str, bool]:
    """A beta value as text, and whether it is in the kernel's grammar (mantissa <= 2**24)."""
    places = draw(st.integers(0, 11))
    if places == 0:
        return draw(st.sampled_from(["0", "1"])), True
    mantissa = draw(st.integers(0, 10**places))
    whole, frac = divmod(mantissa, 10**places)
    return f"{whole}.{frac:0{places}d}", mantissa <= 1 << 24 and places <= 10


@st.composite
def plain_tables(draw: st.DrawFn) -> tuple[bytes, Layout, bool]:
    """A chunk of valid data rows, its layout, and whether every cell is in the kernel's grammar."""
    delimiter = draw(st.sampled_from(["\t", ","]))
    n_samples = draw(st.integers(1, 5))
    ids = draw(st.lists(st.text(ID_CHARS, min_size=1, max_size=12), min_size=1, max_size=25, unique=True))
    ids = [i for i in ids if i not in NULLS] or ["cg1"]
    quote = draw(st.booleans())
    end = draw(st.sampled_from(["\n", "\r\n"]))
    plain = True
    lines = []
    for probe in ids:
        cells = []
        for _ in range(n_samples):
            if draw(st.integers(0, 9)) == 0:
                cells.append(draw(st.sampled_from(NULLS)))
            else:
                text, fits = draw(decimals())
                plain &= fits
                cells.append(text)
        lines.append(delimiter.join([f'"{probe}"' if quote else probe, *cells]) + end)
    names = ("ID_REF", *(f"S{j}" for j in range(n_samples)))
    layout = Layout("t.txt", delimiter, names, 0, tuple(range(1, n_samples + 1)), (None,) * n_samples, 1)
    return "".join(lines).encode(), layout, plain


@settings(max_examples=300, deadline=None)
@given(plain_tables())
@example(
    (
        b"cg1\t0.1\t1\t0.3333333\t0.0000001\n",
        Layout("t", "\t", ("a",) * 5, 0, (1, 2, 3, 4), (None,) * 4, 1),
        True,
    )
)
@example((b"cg1\t0.33333334\n", Layout("t", "\t", ("a", "b"), 0, (1,), (None,), 1), False))
def test_kernel_gives_what_arrow_gives_on_plain_tables(case: tuple[bytes, Layout, bool]) -> None:
    assert _fastpath.wait_loaded(), "the compiled kernel could not be loaded"
    chunk, layout, plain = case
    parser = TableParser(layout)
    fast = _fastpath.convert_plain(chunk, layout.delimiter, parser._plain, len(layout.betas))
    assert (fast is not None) == plain, "the kernel refused a plain table, or accepted a non-plain one"
    with kernel(False):
        arrow_ids, arrow_values, _ = TableParser(layout).parse(chunk, 1)
    ids, values, lines = parser.parse(chunk, 1)
    assert ids == arrow_ids
    assert lines == len(arrow_ids)
    assert values.dtype == np.float32 and values.flags.c_contiguous
    np.testing.assert_array_equal(values.view(np.uint32), arrow_values.view(np.uint32))


HOSTILE = [
    "1e-3", " 0.5", "0.5 ", "-0.1", "-0", "-0.0", "+0.5", "1.5", "1.0000001", '"0.5"', "abc", ".5", "5.",
    "0.123456789012", "0.99999997", "inf", "nan", "NA", "", "0x1", "0..5", "0.5.5", "１",
    '"cg"x', '"open', "a\rb", "\udcff", "0.00000000000000000001", "10000000000000000000000", "0.0000000001",
]  # fmt: skip


@st.composite
def damaged_files(draw: st.DrawFn) -> tuple[bytes, str]:
    """A GEO series matrix or a CSV matrix with random hostile edits; the format to read it as."""
    geo = draw(st.booleans())
    delimiter = "\t" if geo else draw(st.sampled_from(["\t", ","]))
    n_samples = draw(st.integers(1, 4))
    rows = []
    for i in range(draw(st.integers(1, 40))):
        cells = [draw(decimals())[0] for _ in range(n_samples)]
        rows.append([f'"cg{i:08d}_TC21"' if geo else f"cg{i:08d}", *cells])
    for _ in range(draw(st.integers(0, 3))):
        row = draw(st.integers(0, len(rows) - 1))
        action = draw(st.sampled_from(["cell", "drop", "extra", "dup", "blank"]))
        if not rows[row]:
            continue
        if action == "cell":
            rows[row][draw(st.integers(0, len(rows[row]) - 1))] = draw(st.sampled_from(HOSTILE))
        elif action == "drop":
            rows[row].pop()
        elif action == "extra":
            rows[row].append("0.5")
        elif action == "dup":
            rows[row][0] = draw(st.sampled_from([other[0] for other in rows if other]))
        else:
            rows[row] = []
    body = "".join(delimiter.join(row) + "\n" for row in rows)
    header = delimiter.join(["ID_REF", *(f"GSM{j}" for j in range(n_samples))]) + "\n"
    if geo:
        text = (
            '!Series_title\t"t"\n!series_matrix_table_begin\n' + header + body + "!series_matrix_table_end\n"
        )
    else:
        text = header + body
    return text.encode("utf-8", "surrogateescape"), "geo" if geo else "matrix"


def read_outcome(path: Path, format: str) -> tuple[list[str], np.ndarray] | str:
    """Everything a read gives: the ids and values, or the error's full text."""
    try:
        source = open_matrix(path, format, batch_rows=3)
        ids: list[str] = []
        blocks = []
        for batch in source.batches():
            ids.extend(batch.probe_ids)
            blocks.append(batch.values)
        return ids, np.concatenate(blocks)
    except IngestError as error:
        return f"{error} | line={error.line} column={error.column}"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged_files(), st.sampled_from([64, 1 << 20]))
def test_damaged_files_read_the_same_with_and_without_the_kernel(case: tuple[bytes, str], size: int) -> None:
    assert _fastpath.wait_loaded()
    data, format = case
    with tempfile.TemporaryDirectory() as folder, chunk_bytes(size):
        path = Path(folder) / "input.txt"
        path.write_bytes(data)
        with kernel(True):
            fast = read_outcome(path, format)
        with kernel(False):
            slow = read_outcome(path, format)
    if isinstance(slow, str) or isinstance(fast, str):
        assert fast == slow
    else:
        assert fast[0] == slow[0]
        np.testing.assert_array_equal(fast[1].view(np.uint32), slow[1].view(np.uint32))


def test_kernel_refusals_leave_the_exact_errors(tmp_path: Path) -> None:
    """A bad cell found by the kernel is reported by the exact path, at its line and column."""
    path = tmp_path / "m.csv"
    path.write_text("ID,S1,S2\ncg1,0.5,0.25\ncg2,0.5,1.5\n")
    with pytest.raises(IngestError) as caught:
        list(open_matrix(path).batches())
    assert (caught.value.line, caught.value.column) == (3, "3 (S2)")
    assert "1.5 is outside [0, 1]" in str(caught.value)


@pytest.mark.parametrize("multiple", [1, 7, CHUNK_ROWS])
def test_blocks_hold_the_rows_of_batches_without_regrouping(tmp_path: Path, multiple: int) -> None:
    rng = np.random.default_rng(5)  # noise-ok: test input
    values = np.round(rng.random((1_000, 3)), 4)
    path = tmp_path / "m.tsv"
    path.write_text(
        "ID\tA\tB\tC\n" + "".join(f"cg{i}\t" + "\t".join(map(str, v)) + "\n" for i, v in enumerate(values))
    )
    with chunk_bytes(1_000):  # many chunks of a few dozen rows: blocks straddle them
        source = open_matrix(path)
        blocks = list(source.blocks(multiple))
        batches = list(source.batches())
    assert all(len(b.probe_ids) % multiple == 0 for b in blocks[:-1])
    assert all(b.values.flags.c_contiguous and b.values.shape == (len(b.probe_ids), 3) for b in blocks)
    assert [i for b in blocks for i in b.probe_ids] == [i for b in batches for i in b.probe_ids]
    np.testing.assert_array_equal(np.concatenate([b.values for b in blocks]), values.astype(np.float32))


def test_store_reads_back_any_mix_of_aligned_and_unaligned_batches(tmp_path: Path) -> None:
    """Whole chunks are written directly, the rest through HDF5; both read back exactly."""
    rng = np.random.default_rng(6)  # noise-ok: test input
    sizes = [CHUNK_ROWS, 7, CHUNK_ROWS - 7, 3 * CHUNK_ROWS + 5, 1, 300, CHUNK_ROWS - 50]
    values = rng.random((sum(sizes), 5), dtype=np.float32)
    values[rng.random(values.shape) < 0.1] = np.nan
    ids = [f"cg{i:08d}" for i in range(len(values))]
    bounds = np.cumsum([0, *sizes])
    batches = [(ids[a:b], values[a:b]) for a, b in itertools.pairwise(bounds)]
    store = CohortStore(tmp_path, create=True)
    store.write("mix", [f"S{j}" for j in range(5)], iter(batches))
    cohort = store.open("mix")
    np.testing.assert_array_equal(cohort.rows(np.arange(len(values))), values)
    assert cohort.probe_row("cg00000300") == 300


def test_ingest_of_a_plain_geo_file_through_the_kernel(tmp_path: Path) -> None:
    path = tmp_path / "series_matrix.txt"
    rows = [
        f'"cg{i:08d}_TC21"\t0.{i:06d}\t{"NA" if i % 7 == 0 else "1"}\n' for i in range(3 * CHUNK_ROWS + 9)
    ]
    path.write_text('!Series_title\t"t"\n!series_matrix_table_begin\n"ID_REF"\t"GSM1"\t"GSM2"\n'
                    + "".join(rows) + "!series_matrix_table_end\n")  # fmt: skip
    info = ingest(path, tmp_path / "store", "epic", format="geo")
    assert info.probes == len(rows)
    cohort = CohortStore(tmp_path / "store").open("epic")
    row = cohort.rows(np.array([cohort.probe_row("cg00000014_TC21")]))[0]
    assert row[0] == np.float32(0.000014) and np.isnan(row[1])

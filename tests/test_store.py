"""The HDF5 cohort store: round trip, atomic publication (also under SIGKILL), fork safety, CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.cli import main
from mbeacon.store import atomic, sealed
from mbeacon.store.cohorts import CHUNK_ROWS, CohortStore, Metadata
from mbeacon.store.errors import DataError, IngestError
from mbeacon.store.ingest import read_manifest


def _matrix(rows: int, cols: int, seed: int = 0, missing: float = 0.05) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = rng.random((rows, cols), dtype=np.float32)
    values[rng.random((rows, cols)) < missing] = np.nan
    return values


def _batches(ids: list[str], values: np.ndarray, size: int):
    for start in range(0, len(ids), size):
        yield ids[start : start + size], values[start : start + size]


@pytest.fixture
def store(tmp_path: Path) -> CohortStore:
    return CohortStore(tmp_path / "store", create=True)


def _write(store: CohortStore, dataset_id: str = "d1", rows: int = 1000, cols: int = 7, seed: int = 0):
    ids = [f"cg{i:08d}" for i in range(rows)]
    values = _matrix(rows, cols, seed)
    samples = [f"GSM{i}" for i in range(cols)]
    info = store.write(
        dataset_id, samples, _batches(ids, values, 333), metadata=Metadata(name="Test", tissue="blood")
    )
    return ids, samples, values, info


def test_round_trip_and_summary(store: CohortStore):
    ids, samples, values, info = _write(store)
    assert (info.probes, info.patients, info.name, info.tissue) == (1000, 7, "Test", "blood")
    assert info.missing_fraction == pytest.approx(np.isnan(values).mean())
    assert info.value_min == pytest.approx(np.nanmin(values)) and info.value_max == pytest.approx(
        np.nanmax(values)
    )
    cohort = store.open("d1")
    assert cohort.probe_ids.tolist() == ids and cohort.sample_ids.tolist() == samples
    assert cohort._map is not None  # the memory-mapped hot path is in use
    rows = np.array([999, 0, 512, 3, 3])
    np.testing.assert_array_equal(cohort.rows(rows), values[rows])
    streamed = np.concatenate([block for _, block in cohort.blocks(block_rows=300)])
    np.testing.assert_array_equal(streamed, values)
    assert cohort.probe_index(["cg00000005", "nope", "cg00000999"]).tolist() == [5, -1, 999]
    lo, hi = np.array([0.2, 0.0]), np.array([0.5, 1.0])
    expected = [
        int(((values[i] >= a) & (values[i] <= b)).sum()) for i, a, b in zip([4, 9], lo, hi, strict=True)
    ]
    assert cohort.count_in_range(np.array([4, 9]), lo, hi).tolist() == expected


def test_checksum_is_deterministic_and_content_sensitive(tmp_path: Path):
    a = CohortStore(tmp_path / "a", create=True)
    b = CohortStore(tmp_path / "b", create=True)
    c = CohortStore(tmp_path / "c", create=True)
    assert _write(a)[3].checksum == _write(b)[3].checksum
    assert _write(c, seed=1)[3].checksum != _write(a, "d2")[3].checksum


def test_a_failed_ingest_leaves_the_store_exactly_as_it_was(store: CohortStore):
    _write(store, "kept")
    before = {p.name: p.stat().st_mtime_ns for p in (store.root / "datasets").iterdir()}

    def failing():
        yield ["cg1"], np.full((1, 3), 0.5, dtype=np.float32)
        raise IngestError("bad cell", path="x.csv", line=3, column=2)

    with pytest.raises(IngestError):
        store.write("new", ["a", "b", "c"], failing())
    after = {p.name: p.stat().st_mtime_ns for p in (store.root / "datasets").iterdir()}
    assert after == before
    assert list((store.root / atomic.STAGING).iterdir()) == []
    assert store.ids() == ["kept"]


@pytest.mark.parametrize(
    ("samples", "batches", "message"),
    [
        (["a", "a"], [(["cg1"], np.zeros((1, 2), np.float32))], "duplicate sample"),
        (
            ["a", "b"],
            [(["cg1"], np.zeros((1, 2), np.float32)), (["cg1"], np.zeros((1, 2), np.float32))],
            "duplicate probe",
        ),
        (["a", "b"], [], "no probe rows"),
        ([], [(["cg1"], np.zeros((1, 0), np.float32))], "no samples"),
        (["a", "b"], [(["cg1"], np.zeros((1, 3), np.float32))], "does not match"),
    ],
)
def test_bad_matrices_are_refused(store: CohortStore, samples, batches, message):
    with pytest.raises(DataError, match=message):
        store.write("bad", samples, iter(batches))
    assert store.ids() == []


def test_ids_replace_and_remove(store: CohortStore):
    _write(store)
    with pytest.raises(DataError, match="already exists"):
        _write(store)
    new_info = store.write("d1", ["x"], iter([(["cg9"], np.array([[0.25]], np.float32))]), replace=True)
    assert new_info.probes == 1
    store.remove("d1")
    assert store.ids() == []
    with pytest.raises(DataError, match="no dataset"):
        store.remove("d1")
    for bad in ("", "../etc", "a b", "x" * 65):
        with pytest.raises(DataError, match="invalid dataset id"):
            store.path_of(bad)


def test_a_reader_keeps_its_version_while_the_dataset_is_replaced(store: CohortStore):
    _write(store)
    reader = store.open("d1")
    first = reader.rows([1])
    store.write("d1", ["x"], iter([(["cg9"], np.array([[0.25]], np.float32))]), replace=True)
    np.testing.assert_array_equal(reader.rows([1]), first)  # the old inode lives on for this reader
    assert store.open("d1").n_probes == 1


def test_reading_after_fork_reopens_the_file(store: CohortStore):
    _, _, values, _ = _write(store)
    cohort = store.open("d1")
    cohort.rows([0])  # opened in the parent before the fork
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_end)
        ok = (
            np.array_equal(cohort.rows([10, 20]), values[[10, 20]], equal_nan=True)
            and cohort._pid == os.getpid()
        )
        os.write(write_end, b"1" if ok else b"0")
        os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 1)
    os.waitpid(pid, 0)
    assert answer == b"1"


def test_compressed_files_are_read_through_h5py(store: CohortStore):
    _, _, values, _ = _write(store)
    path = store.path_of("d1")
    with h5py.File(path, "r+") as f:
        data = f["beta"][...]
        del f["beta"]
        f.create_dataset("beta", data=data, chunks=(CHUNK_ROWS, data.shape[1]), compression="gzip")
    sealed.seal(path)  # changed after it was written: sealed again, or it would be refused as damaged
    cohort = store.open("d1")
    np.testing.assert_array_equal(cohort.rows([7, 3, 7]), values[[7, 3, 7]])
    assert cohort._map is None  # compressed chunks cannot be memory-mapped
    lo, hi = np.array([0.1, 0.3, 0.0]), np.array([0.6, 0.9, 1.0])
    counts = cohort.count_in_range(np.array([7, 3, 999]), lo, hi).tolist()
    assert [cohort.count_one(r, a, b) for r, a, b in zip([7, 3, 999], lo, hi, strict=True)] == counts


@pytest.mark.parametrize("where", ["seal", "hdf5 superblock", "ids", "values", "last byte"])
def test_a_damaged_cohort_file_is_refused_before_hdf5_reads_it(
    store: CohortStore, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Every cohort file carries the SHA-256 of its bytes in its HDF5 user block: one flipped byte
    anywhere (the seal included) is refused with a message that names the file, on every way in."""
    _write(store)
    path = store.path_of("d1")
    assert path.read_bytes().startswith(sealed.MAGIC)
    size = path.stat().st_size
    offsets = {"seal": 30, "hdf5 superblock": sealed.USERBLOCK + 20, "ids": size // 2, "values": size // 3,
               "last byte": size - 1}  # fmt: skip
    with open(path, "r+b") as handle:
        handle.seek(offsets[where])
        byte = handle.read(1)
        handle.seek(offsets[where])
        handle.write(bytes([byte[0] ^ 0x01]))
    monkeypatch.setattr(sealed, "_verified", set())  # a new process: nothing verified yet
    for way_in in (lambda: store.open("d1").n_probes, lambda: store.info("d1")):
        with pytest.raises(DataError, match="damaged") as refused:
            way_in()
        assert str(path) in str(refused.value)


def test_unsealed_cohort_files_are_read_and_strangers_refused(store: CohortStore, tmp_path: Path) -> None:
    """A cohort written before seals existed (no user block) is read unchecked; a file that starts with
    neither a seal nor the HDF5 signature is refused."""
    _, _, values, _ = _write(store)
    path = store.path_of("d1")
    unsealed = tmp_path / "unsealed.h5"
    with h5py.File(path, "r") as src, h5py.File(unsealed, "w") as dst:
        for name in src:
            src.copy(name, dst)
        dst.attrs.update(src.attrs)
    assert unsealed.read_bytes().startswith(sealed.HDF5_SIGNATURE)
    atomic.remove(store.root, path)
    os.replace(unsealed, path)
    np.testing.assert_array_equal(store.open("d1").rows([5]), values[[5]])
    path.write_bytes(b"PK\x03\x04" + bytes(8000))
    with pytest.raises(DataError, match="neither a seal nor the HDF5 signature"):
        store.info("d1")


def test_a_cohort_is_hashed_once_per_file_and_process(store: CohortStore, monkeypatch: pytest.MonkeyPatch):
    """Verification is remembered by the file's identity: opening the same file again (another reader,
    a worker forked after start-up) does not hash it again; a replaced file is hashed."""
    _write(store)
    hashed: list[int] = []
    digest = sealed._digest

    def counting(fd: int) -> str:
        hashed.append(fd)
        return digest(fd)

    monkeypatch.setattr(sealed, "_verified", set())
    monkeypatch.setattr(sealed, "_digest", counting)
    assert store.open("d1").n_probes == store.open("d1").n_probes == 1000
    assert store.info("d1").probes == 1000
    assert len(hashed) == 1
    store.write("d1", ["x"], iter([(["cg9"], np.array([[0.25]], np.float32))]), replace=True)
    hashed.clear()
    assert store.open("d1").n_probes == 1  # sealed and remembered by the writer: not hashed again
    monkeypatch.setattr(sealed, "_verified", set())
    assert store.open("d1").n_probes == 1
    assert len(hashed) == 1


_KILL_SCRIPT = textwrap.dedent(
    """
    import sys, time, numpy as np
    from mbeacon.store.cohorts import CohortStore
    store = CohortStore(sys.argv[1], create=True)
    def slow():
        for i in range(10_000):
            yield [f"cg{i:08d}"], np.full((1, 500), 0.5, dtype=np.float32)
            if i == 50:
                print("writing", flush=True)
            time.sleep(0.002)
    store.write("victim", [f"S{j}" for j in range(500)], slow())
    """
)


def test_a_killed_ingest_leaves_the_store_as_it_was(store: CohortStore):
    _, _, values, info = _write(store, "kept")
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILL_SCRIPT, str(store.root)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "writing"
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert store.ids() == ["kept"]  # no half-written dataset is visible
    assert store.info("kept").checksum == info.checksum
    np.testing.assert_array_equal(store.open("kept").rows([0, 999]), values[[0, 999]])
    leftovers = list((store.root / atomic.STAGING).iterdir())
    assert leftovers, "the killed writer's temporary file should be in .staging"
    assert atomic.clean_staging(store.root, older_than_seconds=0) == len(leftovers)


def test_manifest_reader_skips_the_illumina_heading(tmp_path: Path):
    path = tmp_path / "manifest.csv"
    path.write_text(
        "Illumina, Inc.\n[Heading]\nDescriptor File Name,HumanMethylation450_15017482_v1-2.bpm\n[Assay]\n"
        "IlmnID,Name,AddressA_ID,CHR,MAPINFO,Strand\n"
        "cg00000029,cg00000029,14782418,16,53468112,F\n"
        "cg00000108,cg00000108,12709357,3,37459206,R\n"
        "[Controls]\n28684356,STAINING,Red,DNP (High)\n"
    )
    manifest = read_manifest(path)
    chrom, pos = manifest.lookup(np.array([b"cg00000108", b"cgXX"], dtype="S64"))
    assert chrom.tolist() == [b"chr3", b""] and pos.tolist() == [37459206, -1]
    bad = tmp_path / "bad.csv"
    bad.write_text("probe_id,position\ncg1,notanumber\n")
    with pytest.raises(IngestError, match="not a number") as excinfo:
        read_manifest(bad)
    assert excinfo.value.line == 2


def test_datasets_cli_lists_and_removes(store: CohortStore):
    _write(store)
    runner = CliRunner()
    listed = runner.invoke(main, ["datasets", "--store", str(store.root), "--json"])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.output)
    assert rows[0]["id"] == "d1" and rows[0]["patients"] == 7 and rows[0]["probes"] == 1000
    table = runner.invoke(main, ["datasets", "--store", str(store.root)])
    assert "d1" in table.output and "1,000" in table.output
    missing = runner.invoke(main, ["datasets", "--store", str(store.root), "remove", "nope", "--yes"])
    assert missing.exit_code == 2 and "no dataset 'nope'" in missing.output
    removed = runner.invoke(main, ["datasets", "--store", str(store.root), "remove", "d1", "--yes"])
    assert removed.exit_code == 0 and store.ids() == []
    not_a_store = runner.invoke(main, ["datasets", "--store", str(store.root / "nowhere")])
    assert not_a_store.exit_code == 2 and "not an MBeacon store" in not_a_store.output


def test_a_store_path_that_is_a_file_is_refused_clearly(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("not a store")
    with pytest.raises(DataError, match="cannot create a store here"):
        CohortStore(blocker, create=True)


@pytest.fixture(scope="module")
def mapped_cohort(tmp_path_factory: pytest.TempPathFactory):
    """A memory-mapped cohort of 1,000 probes x 7 patients, 5 % missing, and its values."""
    store = CohortStore(tmp_path_factory.mktemp("mapped") / "store", create=True)
    _, _, values, _ = _write(store)
    cohort = store.open("d1")
    assert cohort.n_probes == 1000 and cohort._map is not None  # opened, and mapped
    return cohort, values


@settings(max_examples=300, deadline=None)
@given(
    row=st.integers(0, 999),
    lo=st.floats(-0.2, 1.2, allow_nan=False),
    width=st.floats(-0.1, 1.0, allow_nan=False),
    probe=st.one_of(st.sampled_from(["nope", "", "cg" + "9" * 70, "cg0000000é"]), st.text(max_size=12)),
)
def test_single_query_paths_equal_the_array_paths(
    mapped_cohort, row: int, lo: float, width: float, probe: str
) -> None:
    """``probe_row`` and ``count_one`` (one query, no arrays) answer as ``probe_index`` and
    ``count_in_range`` do, missing values and float32 edges included."""
    cohort, values = mapped_cohort
    hi = lo + width
    for edge in (lo, hi, float(values[row][0])):  # a bound exactly on a stored value counts it
        assert cohort.count_one(row, edge, hi) == cohort.count_in_range(np.array([row]), [edge], [hi])[0]
    assert cohort.count_one(row, lo, hi) == cohort.count_in_range(np.array([row]), [lo], [hi])[0]
    probe_id = f"cg{row:08d}"
    assert cohort.probe_row(probe_id) == row == cohort.probe_index([probe_id])[0]
    try:
        expected = int(cohort.probe_index([probe])[0])
    except UnicodeEncodeError:  # the array path cannot even look a non-ASCII id up: not there
        expected = -1
    assert cohort.probe_row(probe) == expected


def test_count_one_refuses_rows_outside_the_cohort(mapped_cohort) -> None:
    cohort, _ = mapped_cohort
    for row in (-1, 1000):
        with pytest.raises(IndexError):
            cohort.count_one(row, 0.0, 1.0)

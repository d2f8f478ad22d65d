"""The HDF5 cohort store: several cohorts (Beacon datasets) in one store directory.

Layout of a store directory::

    STORE/datasets/<id>.h5        one file per cohort, published atomically (see atomic.py)
    STORE/priors/<name>/v<k>.h5   population priors (priors/)
    STORE/.staging/               files being written; nothing reads here

Layout of a cohort file, chosen for the beacon's hot path (read a few probe rows across all patients):

* ``/beta``: float32, probes x patients, NaN = missing, **uncompressed row chunks** of
  ``CHUNK_ROWS`` probes x all patients, chunks aligned to 4 KiB. Rows are streamed in during ingest
  (the dataset grows chunk by chunk, so the number of probes need not be known in advance). For
  reading, the chunk offsets are looked up once and the file is memory-mapped, so a probe row is a
  plain memory read from the page cache, with no HDF5 call per query (``benchmarks/bench_store.py``
  measures this against h5py reads and an in-memory array).
* ``/probe_ids``, ``/sample_ids``: fixed-length ASCII; ``/probe_order``: the argsort of the probe ids
  for vectorised lookups; optional ``/chromosome`` and ``/position`` from a manifest; optional
  ``/patient_ids`` (UTF-8, one per sample) where the input says whose each sample is
  (:mod:`mbeacon.store.patients`); a file without it has one sample per patient.
* attributes: id, name, description, tissue, disease, assembly, created, source file, checksum
  (SHA-256 of ids and values), patients, probes, missing fraction, value range, format version, and
  with patient ids: distinct patients, most samples of one patient, the contribution bound (its value,
  source and the epsilon learning it cost).
* the first 4 KiB, an HDF5 user block: the seal, a hash of the rest of the file, checked before the
  HDF5 library reads it (:mod:`mbeacon.store.sealed`).

Readers open files lazily in the process that reads them (after a gunicorn fork) and never write.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import h5py
import numpy as np

from mbeacon.process import PROCESS
from mbeacon.store import atomic, prefault, sealed
from mbeacon.store._count import count_rows
from mbeacon.store.cohort_layout import CHUNK_ROWS, ID_BYTES, encode_ids
from mbeacon.store.cohort_writer import patient_attributes, write_cohort_file
from mbeacon.store.errors import DataError, IngestError
from mbeacon.store.id_hash import IdHash
from mbeacon.store.patients import ContributionBound
from mbeacon.store.probe_ids import loci, locus, representatives

_DATASET_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class DatasetInfo:
    """What the store says about a cohort.

    All of it is public metadata except ``max_samples_per_patient``, the exact largest contribution,
    which is for the operator: the service publishes ``contribution_bound`` instead. ``patients`` is
    the number of samples (columns); ``patient_count`` the number of distinct patients.
    """

    id: str
    name: str
    patients: int
    probes: int
    missing_fraction: float
    value_min: float
    value_max: float
    description: str = ""
    tissue: str = ""
    disease: str = ""
    assembly: str = ""
    created: str = ""
    source_file: str = ""
    source_format: str = ""
    checksum: str = ""
    has_positions: bool = False
    patient_count: int = 0
    max_samples_per_patient: int = 1
    has_patient_ids: bool = False
    contribution_bound: int = 1  # 0: patient ids repeat and no bound was recorded
    bound_source: str = "one sample per patient"
    bound_epsilon: float = 0.0
    platform: str = ""  # the array platform (e.g. GPL13534), whose annotation locates its probes

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Metadata:
    """Descriptive metadata an operator gives at ingest."""

    name: str = ""
    description: str = ""
    tissue: str = ""
    disease: str = ""
    assembly: str = ""
    extra: dict[str, str] = field(default_factory=dict)
    platform: str = ""


class Manifest:
    """Probe positions from an Illumina manifest (probe id -> chromosome, position); never empty."""

    def __init__(self, probe_ids: np.ndarray, chromosome: np.ndarray, position: np.ndarray) -> None:
        if len(probe_ids) == 0:
            raise ValueError("a manifest needs at least one probe")
        order = np.argsort(probe_ids)
        self.probe_ids = probe_ids[order]
        self.chromosome = chromosome[order]
        self.position = position[order]

    def lookup(self, probe_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Chromosome and position of each probe ('' and -1 where the manifest lacks it)."""
        idx = np.minimum(np.searchsorted(self.probe_ids, probe_ids), len(self.probe_ids) - 1)
        found = self.probe_ids[idx] == probe_ids
        chrom = np.where(found, self.chromosome[idx], b"").astype(f"S{ID_BYTES}")
        return chrom, np.where(found, self.position[idx], -1).astype(np.int64)


def check_dataset_id(dataset_id: str) -> str:
    if not _DATASET_ID.match(dataset_id or ""):
        raise DataError(
            f"invalid dataset id {dataset_id!r}: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return dataset_id


class CohortStore:
    """A directory of cohorts and priors. Creating it is idempotent."""

    def __init__(self, root: str | Path, *, create: bool = False) -> None:
        self.root = Path(root)
        if create:
            try:
                (self.root / "datasets").mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise DataError(
                    f"cannot create a store here: {error.strerror}", path=str(self.root)
                ) from None
        elif not (self.root / "datasets").is_dir():
            raise DataError(f"{self.root}: not an MBeacon store (no datasets/ folder); ingest creates one")

    def path_of(self, dataset_id: str) -> Path:
        return self.root / "datasets" / f"{check_dataset_id(dataset_id)}.h5"

    def ids(self) -> list[str]:
        return sorted(p.stem for p in (self.root / "datasets").glob("*.h5"))

    def info(self, dataset_id: str) -> DatasetInfo:
        path = self.path_of(dataset_id)
        if not path.exists():
            raise DataError(f"no dataset {dataset_id!r} in store {self.root}")
        sealed.verify(path)
        with h5py.File(path, "r") as f:
            return _info_from_attrs(f.attrs)

    def list(self) -> list[DatasetInfo]:
        return [self.info(i) for i in self.ids()]

    def open(self, dataset_id: str) -> Cohort:
        path = self.path_of(dataset_id)
        if not path.exists():
            raise DataError(f"no dataset {dataset_id!r} in store {self.root}")
        return Cohort(path)

    def remove(self, dataset_id: str) -> None:
        path = self.path_of(dataset_id)
        if not path.exists():
            raise DataError(f"no dataset {dataset_id!r} in store {self.root}")
        atomic.remove(self.root, path)

    def write(
        self,
        dataset_id: str,
        samples: list[str],
        batches: Iterable[tuple[list[str], np.ndarray]],
        *,
        metadata: Metadata | None = None,
        source_file: str = "",
        source_format: str = "",
        manifest: Manifest | None = None,
        replace: bool = False,
        on_rows: Callable[[int], None] | None = None,
        patients: list[str] | None = None,
        bound: ContributionBound | None = None,
    ) -> DatasetInfo:
        """Stream ``(probe_ids, values)`` batches into a new cohort and publish it atomically.

        ``patients`` (one id per sample) and the ``bound`` to record with them are optional; without
        a bound, a cohort whose patients repeat is stored but the service refuses to serve it until
        its configuration declares one.

        Nothing is visible in the store until every batch has been written and checked; any error
        (bad input, full disk, a kill) leaves the store exactly as it was.
        """
        dest = self.path_of(dataset_id)
        if dest.exists() and not replace:
            raise DataError(f"dataset {dataset_id!r} already exists in {self.root} (remove it first)")
        metadata = metadata or Metadata()
        sample_ids = encode_ids(samples, "sample", source_file)
        if len(set(sample_ids.tolist())) != len(sample_ids):
            raise IngestError("duplicate sample ids", path=source_file)
        n = len(sample_ids)
        if n == 0:
            raise IngestError("the matrix has no samples", path=source_file)
        patient_attrs = patient_attributes(patients, bound, n, source_file)
        with atomic.publish(self.root, dest) as temp:
            write_cohort_file(temp, dataset_id, sample_ids, batches, metadata, source_file, source_format,
                              manifest, on_rows, patient_attrs)  # fmt: skip
            sealed.seal(temp)  # after HDF5 has closed the file, before publish() flushes and renames it
        return self.info(dataset_id)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _info_from_attrs(attrs: h5py.AttributeManager) -> DatasetInfo:
    return DatasetInfo(
        id=_text(attrs["id"]),
        name=_text(attrs["name"]),
        patients=int(attrs["patients"]),
        probes=int(attrs["probes"]),
        missing_fraction=float(attrs["missing_fraction"]),
        value_min=float(attrs["value_min"]),
        value_max=float(attrs["value_max"]),
        description=_text(attrs.get("description", "")),
        tissue=_text(attrs.get("tissue", "")),
        disease=_text(attrs.get("disease", "")),
        assembly=_text(attrs.get("assembly", "")),
        created=_text(attrs.get("created", "")),
        source_file=_text(attrs.get("source_file", "")),
        source_format=_text(attrs.get("source_format", "")),
        checksum=_text(attrs.get("checksum", "")),
        has_positions=bool(attrs.get("has_positions", False)),
        # files written without patient ids: one sample per patient
        patient_count=int(attrs.get("patient_count", attrs["patients"])),
        max_samples_per_patient=int(attrs.get("max_samples_per_patient", 1)),
        has_patient_ids=bool(attrs.get("has_patient_ids", False)),
        contribution_bound=int(attrs.get("contribution_bound", 1)),
        bound_source=_text(attrs.get("bound_source", "one sample per patient")),
        bound_epsilon=float(attrs.get("bound_epsilon", 0.0)),
        platform=_text(attrs.get("platform", "")),
    )


class Counts(Protocol):
    """What answering reads of a cohort, plain (:class:`Cohort`) or counted at a contribution bound
    (:class:`mbeacon.beacon.contribution.TruncatedCohort`): its metadata, its probes and its counts."""

    path: Path

    @property
    def info(self) -> DatasetInfo: ...
    @property
    def n_patients(self) -> int: ...
    @property
    def probe_ids(self) -> np.ndarray: ...
    @property
    def stored_probe_ids(self) -> np.ndarray: ...
    def probe_index(self, probe_ids: Iterable[str] | np.ndarray) -> np.ndarray: ...
    def prepare_lookups(self) -> None: ...
    def probe_row(self, probe_id: str) -> int: ...
    def probe_name(self, row: int) -> str: ...
    def probe_names(self, rows: np.ndarray) -> list[str]: ...
    def count_one(self, row: int, lo: float, hi: float) -> int: ...
    def count_in_range(self, index: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray: ...


class Cohort:
    """Read-only access to one cohort; opens its file lazily, once per process.

    After a ``fork`` the child re-opens the file on first use (HDF5 handles and memory maps are not
    shared across processes).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        #: map every page of the file at each (per-process) open: :mod:`mbeacon.store.prefault`
        self.populate = False
        self._pid: int | None = None

    # --- lazy, per-process opening ---------------------------------------------------------------

    def _ensure_open(self) -> None:
        if self._pid == PROCESS.pid:
            return
        sealed.verify(self.path)  # before the HDF5 library reads a byte of it
        with h5py.File(self.path, "r") as f:
            self._info = _info_from_attrs(f.attrs)
            self._probe_ids = f["probe_ids"][...]
            self._probe_order = f["probe_order"][...]
            self._sorted_ids = self._probe_ids[self._probe_order]  # once per open, not per lookup
            self._loci: tuple[np.ndarray, np.ndarray] | None = None  # on the first lookup
            self._loci_hash: IdHash | None = None  # on the first lookup of many ids
            self._sample_ids = f["sample_ids"][...]
            beta = f["beta"]
            self._shape = beta.shape
            self._row_starts = _memmap_row_starts(beta)
        words = self.path.stat().st_size // 4
        self._map = (
            np.memmap(self.path, dtype=np.float32, mode="r", shape=(words,))
            if self._row_starts is not None
            else None
        )
        # the same mapping as a plain ndarray: slicing a memmap builds a memmap, which costs more
        self._plain_map = self._map.view(np.ndarray) if self._map is not None else None
        self._h5 = None if self._map is not None else h5py.File(self.path, "r")
        if self._plain_map is not None and self.populate:
            prefault.populate(self._plain_map)
        self._pid = PROCESS.pid

    @property
    def info(self) -> DatasetInfo:
        self._ensure_open()
        return self._info

    @property
    def n_probes(self) -> int:
        self._ensure_open()
        return self._shape[0]

    @property
    def n_patients(self) -> int:
        self._ensure_open()
        return self._shape[1]

    @property
    def probe_ids(self) -> np.ndarray:
        self._ensure_open()
        try:
            return self._probe_ids.astype(str)  # ASCII, in one step
        except UnicodeDecodeError:  # ids are stored as UTF-8
            return np.char.decode(self._probe_ids, "utf-8")

    @property
    def stored_probe_ids(self) -> np.ndarray:
        """The probe ids as stored (``S64``, UTF-8 bytes, row order), read-only and without a copy:
        :attr:`probe_ids` decodes all of them at once, four times their size for an EPIC v2 cohort."""
        self._ensure_open()
        view = self._probe_ids.view()
        view.flags.writeable = False
        return view

    @property
    def sample_ids(self) -> np.ndarray:
        self._ensure_open()
        return self._sample_ids.astype(str)

    def _locus_index(self) -> tuple[np.ndarray, np.ndarray]:
        """The sorted loci of the cohort's probes and the row of each one's representative probe
        (:mod:`mbeacon.store.probe_ids` has the rule: the smallest stored id of the locus). Built on
        the first lookup, from the probe list only; a cohort without EPIC v2 suffixes reuses its id
        index."""
        if self._loci is None:
            names, first = representatives(self._sorted_ids, presorted=True)
            self._loci = (names, self._probe_order[first])
        return self._loci

    @property
    def patient_ids(self) -> np.ndarray | None:
        """The patient of each sample (str array, sample order), None if the file has none."""
        self._ensure_open()
        if not self._info.has_patient_ids:
            return None
        with h5py.File(self.path, "r") as f:
            return f["patient_ids"].asstr()[...].astype(str)

    def probe_index(self, probe_ids: Iterable[str] | np.ndarray) -> np.ndarray:
        """Row answering for each probe id (-1 where the cohort lacks its locus), vectorised: any id
        of a CpG (``cg00000029``, ``cg00000029_TC21``) finds the CpG's representative probe."""
        self._ensure_open()
        wanted = np.asarray(list(probe_ids) if not isinstance(probe_ids, np.ndarray) else probe_ids)
        wanted = loci(wanted.astype(f"S{ID_BYTES}"))
        rows = self._locus_index()[1]
        pos = self._locus_hash().find(wanted)
        return np.where(pos >= 0, rows[pos], -1)

    def _locus_hash(self) -> IdHash:
        """The hash index of the sorted loci: a batch's ids scattered over close to a million take one
        table slot each rather than a binary search whose every step misses the caches
        (:mod:`mbeacon.store.id_hash`)."""
        if self._loci_hash is None:
            self._loci_hash = IdHash(self._locus_index()[0])
        return self._loci_hash

    def prepare_lookups(self) -> None:
        """Build the lookup indexes of probe ids now rather than on the first lookup: a serving
        process calls it at start-up, so no request waits for them and the garbage collector's start-up
        freeze covers them."""
        self._ensure_open()
        self._locus_hash()

    def probe_row(self, probe_id: str) -> int:
        """Row answering for one probe id, -1 if the cohort lacks its locus: :meth:`probe_index` for a
        single query, without its array set-up (numpy's per-call overhead is most of a one-element
        lookup)."""
        self._ensure_open()
        try:
            wanted = probe_id.encode("ascii")
        except UnicodeEncodeError:
            return -1
        if len(wanted) > ID_BYTES:
            probe_id = wanted[:ID_BYTES].decode("ascii")  # as probe_index's conversion to S64 does
        wanted = locus(probe_id).encode("ascii")
        sorted_ids, rows = self._locus_index()
        pos = int(sorted_ids.searchsorted(wanted))
        if pos < len(sorted_ids) and sorted_ids[pos] == wanted:
            return int(rows[pos])
        return -1

    def probe_name(self, row: int) -> str:
        """The stored id of probe ``row`` (the probe that answers, whatever spelling found it)."""
        self._ensure_open()
        return self._probe_ids[row].decode("utf-8")

    def probe_names(self, rows: np.ndarray) -> list[str]:
        """:meth:`probe_name` of every row of ``rows`` (valid rows), in one gather and one decode."""
        self._ensure_open()
        stored = self._probe_ids[np.asarray(rows, dtype=np.int64)]
        try:
            return stored.astype(str).tolist()  # ASCII, as Illumina ids are
        except UnicodeDecodeError:
            return [raw.decode("utf-8") for raw in stored.tolist()]

    def count_one(self, row: int, lo: float, hi: float) -> int:
        """``alpha`` of one query: :meth:`count_in_range` for a single probe row, the same float32
        comparisons, without fancy indexing (a memory-mapped file gives a plain slice of the row)."""
        self._ensure_open()
        if not 0 <= row < self._shape[0]:
            raise IndexError("probe row out of range")
        if self._map is None:
            return int(self.count_in_range(np.array([row]), np.array([lo]), np.array([hi]))[0])
        start = int(self._row_starts[row // CHUNK_ROWS]) + (row % CHUNK_ROWS) * self._shape[1]
        values = self._plain_map[start : start + self._shape[1]]
        return int(np.count_nonzero((values >= np.float32(lo)) & (values <= np.float32(hi))))

    def row_values(self, row: int) -> np.ndarray:
        """One probe row across all samples (float32, NaN missing): a plain slice of the mapped file
        where the layout allows, for per-query readers that select their own columns."""
        self._ensure_open()
        if not 0 <= row < self._shape[0]:
            raise IndexError("probe row out of range")
        if self._map is None:
            return self.rows(np.array([row]))[0]
        start = int(self._row_starts[row // CHUNK_ROWS]) + (row % CHUNK_ROWS) * self._shape[1]
        return self._plain_map[start : start + self._shape[1]]

    def rows(self, index: np.ndarray | list[int]) -> np.ndarray:
        """Beta values of the given probe rows across all patients (float32, NaN missing)."""
        self._ensure_open()
        idx = np.asarray(index, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self._shape[0]):
            raise IndexError("probe row out of range")
        if self._map is not None:
            starts = self._row_starts[idx // CHUNK_ROWS] + (idx % CHUNK_ROWS) * self._shape[1]
            return self._map[starts[:, None] + np.arange(self._shape[1])]
        order = np.argsort(idx)
        out = np.empty((idx.size, self._shape[1]), dtype=np.float32)
        out[order] = self._h5["beta"][np.unique(idx)][np.searchsorted(np.unique(idx), idx[order])]
        return out

    def count_in_range(
        self, index: np.ndarray, lo: np.ndarray, hi: np.ndarray, columns: np.ndarray | None = None
    ) -> np.ndarray:
        """``alpha``: patients with a non-missing value in ``[lo, hi]`` at each probe row; with
        ``columns`` (sorted sample indices), only those samples are counted."""
        if np.ndim(lo) <= 1 and np.ndim(hi) <= 1:
            self._ensure_open()
            if self._plain_map is not None:  # counted in place in the map, no gathered copy
                idx = np.asarray(index, dtype=np.int64).reshape(-1)
                if idx.size and (idx.min() < 0 or idx.max() >= self._shape[0]):
                    raise IndexError("probe row out of range")
                width = self._shape[1]
                if columns is not None and len(columns) and (columns[0] < 0 or columns[-1] >= width):
                    raise IndexError("sample column out of range")
                return count_rows(self._plain_map, self._row_starts, CHUNK_ROWS, width, idx, lo, hi, columns)
        values = self.rows(index)
        if columns is not None:
            values = values[:, columns]
        lo = np.asarray(lo, dtype=np.float32).reshape(-1, 1)
        hi = np.asarray(hi, dtype=np.float32).reshape(-1, 1)
        return np.count_nonzero((values >= lo) & (values <= hi), axis=1)

    def blocks(self, block_rows: int = 65_536) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Stream ``(probe_ids, values)`` in file order, ``block_rows`` rows at a time."""
        self._ensure_open()
        for start in range(0, self._shape[0], block_rows):
            stop = min(start + block_rows, self._shape[0])
            yield self._probe_ids[start:stop].astype(str), self.rows(np.arange(start, stop))


def _memmap_row_starts(beta: h5py.Dataset) -> np.ndarray | None:
    """Float32 offset of the first value of each chunk, or None if the layout cannot be mapped."""
    chunks = beta.chunks
    if chunks is None or chunks[1] != beta.shape[1] or beta.compression is not None or beta.dtype != "f4":
        return None
    n_chunks = -(-beta.shape[0] // chunks[0])
    starts = np.empty(n_chunks, dtype=np.int64)
    for info_index in range(beta.id.get_num_chunks()):
        info = beta.id.get_chunk_info(info_index)
        if info.byte_offset is None or info.byte_offset % 4 or info.filter_mask:
            return None
        starts[info.chunk_offset[0] // chunks[0]] = info.byte_offset // 4
    if beta.id.get_num_chunks() != n_chunks:
        return None  # unallocated chunks (never written): read through h5py instead
    return starts

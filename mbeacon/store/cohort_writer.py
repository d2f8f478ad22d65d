"""Writing a cohort's HDF5 file: the matrix streamed in row chunks, its ids, statistics and attributes
(the layout is described in :mod:`mbeacon.store.cohorts`, whose :meth:`CohortStore.write` seals and
publishes the file this module writes)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import h5py
import numpy as np

from mbeacon.store import sealed
from mbeacon.store.cohort_layout import ALIGNMENT, CHUNK_ROWS, FORMAT_VERSION, encode_ids
from mbeacon.store.errors import IngestError
from mbeacon.store.patients import ContributionBound, contributions

if TYPE_CHECKING:
    from mbeacon.store.cohorts import Manifest, Metadata


def write_cohort_file(
    temp: Path, dataset_id: str, sample_ids: np.ndarray, batches: Iterable[tuple[list[str], np.ndarray]],
    metadata: Metadata, source_file: str, source_format: str, manifest: Manifest | None,
    on_rows: Callable[[int], None] | None, patient_attrs: dict | None = None,
) -> None:  # fmt: skip
    """The cohort's HDF5 file (the module docstring has its layout), with room for its seal."""
    with h5py.File(
        temp, "w", userblock_size=sealed.USERBLOCK, alignment_threshold=1, alignment_interval=ALIGNMENT
    ) as f:
        stats = _write_matrix(f, len(sample_ids), batches, source_file, on_rows)
        probe_ids = stats.pop("probe_ids")
        f.create_dataset("probe_ids", data=probe_ids, compression="gzip", shuffle=True)
        f.create_dataset("probe_order", data=stats.pop("probe_order").astype(np.int64))
        f.create_dataset("sample_ids", data=sample_ids)
        if manifest is not None:
            chrom, pos = manifest.lookup(probe_ids)
            f.create_dataset("chromosome", data=chrom, compression="gzip")
            f.create_dataset("position", data=pos, compression="gzip")
        attrs = {
            "format_version": FORMAT_VERSION,
            "id": dataset_id,
            "name": metadata.name or dataset_id,
            "description": metadata.description,
            "tissue": metadata.tissue,
            "disease": metadata.disease,
            "assembly": metadata.assembly,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "source_file": source_file,
            "source_format": source_format,
            "extra": json.dumps(metadata.extra),
            "has_positions": manifest is not None,
            "platform": metadata.platform,
            **stats,
        }
        if patient_attrs is not None:
            ids = patient_attrs.pop("patient_ids")
            f.create_dataset("patient_ids", data=ids, dtype=h5py.string_dtype("utf-8"))
            attrs.update(patient_attrs)
        f.attrs.update(attrs)


def _write_matrix(
    f: h5py.File,
    n_samples: int,
    batches: Iterable[tuple[list[str], np.ndarray]],
    source_file: str,
    on_rows: Callable[[int], None] | None,
) -> dict:
    beta = f.create_dataset(
        "beta",
        shape=(0, n_samples),
        maxshape=(None, n_samples),
        chunks=(CHUNK_ROWS, n_samples),
        dtype="f4",
        fillvalue=np.nan,
    )
    digest = hashlib.sha256()
    probe_ids: list[np.ndarray] = []
    missing = 0
    lo, hi = np.inf, -np.inf
    rows = 0  # written so far; /beta grows ahead of them (fewer resizes) and is trimmed at the end
    # hashlib lets go of the GIL: each block is hashed in this thread while the next one is parsed
    with ThreadPoolExecutor(1, "mbeacon-checksum") as hasher:
        hashed = None
        for ids, values in batches:
            values = np.ascontiguousarray(values, dtype=np.float32)
            if values.ndim != 2 or values.shape != (len(ids), n_samples):
                raise IngestError(
                    f"a batch of shape {values.shape} does not match {len(ids)} probes x {n_samples} samples",
                    path=source_file,
                )
            if not len(ids):
                continue
            start, rows = rows, rows + len(ids)
            if rows > beta.shape[0]:
                beta.resize(max(rows, 2 * beta.shape[0]), axis=0)
            _write_rows(beta, start, values)
            encoded = encode_ids(ids, "probe", source_file)
            probe_ids.append(encoded)
            if hashed is not None:
                hashed.result()  # in file order, and at most one block held for the hash
            hashed = hasher.submit(_hash_block, digest, encoded, values)
            nan = np.isnan(values)
            missing_here = int(np.count_nonzero(nan))  # not nan.sum(): a bool sum widens every element
            missing += missing_here
            if missing_here < nan.size:
                lo = min(lo, float(np.nanmin(values)))
                hi = max(hi, float(np.nanmax(values)))
            if on_rows is not None:
                on_rows(len(ids))
        if hashed is not None:
            hashed.result()
    if rows == 0:
        raise IngestError("the matrix has no probe rows", path=source_file)
    beta.resize(rows, axis=0)
    ids_array = np.concatenate(probe_ids)
    order = np.argsort(ids_array, kind="stable")  # the lookup order, and sorted ids show duplicates
    ordered = ids_array[order]
    if np.any(ordered[1:] == ordered[:-1]):
        raise IngestError("duplicate probe ids", path=source_file)
    return {
        "probe_ids": ids_array,
        "probe_order": order,
        "patients": n_samples,
        "probes": rows,
        "missing_fraction": missing / (rows * n_samples),
        "value_min": lo if np.isfinite(lo) else np.nan,
        "value_max": hi if np.isfinite(hi) else np.nan,
        "checksum": "sha256:" + digest.hexdigest(),
    }


def patient_attributes(
    patients: list[str] | None, bound: ContributionBound | None, n_samples: int, source_file: str
) -> dict | None:
    """The ``/patient_ids`` array and the attributes that go with it (None without patient ids)."""
    if patients is None:
        return None
    if len(patients) != n_samples:
        raise IngestError(f"{len(patients)} patient ids for {n_samples} samples", path=source_file)
    counts = contributions(patients)
    most = int(counts.max())
    if bound is not None and (not isinstance(bound.bound, int) or bound.bound < 1):
        raise IngestError(f"the contribution bound must be a whole number >= 1, not {bound.bound!r}")
    return {
        "patient_ids": np.array([str(p) for p in patients], dtype=object),
        "has_patient_ids": True,
        "patient_count": int(counts.size),
        "max_samples_per_patient": most,
        "contribution_bound": bound.bound if bound is not None else 0,
        "bound_source": bound.source if bound is not None else "",
        "bound_epsilon": float(bound.epsilon) if bound is not None else 0.0,
    }


def _hash_block(digest: hashlib._Hash, encoded: np.ndarray, values: np.ndarray) -> None:
    digest.update(encoded.tobytes())
    digest.update(values)  # the array's bytes, without a copy


def _write_rows(beta: h5py.Dataset, start: int, values: np.ndarray) -> None:
    """Write the rows ``values`` (C-ordered float32) at row ``start`` of the already resized ``/beta``.

    Whole chunks go to the file as they are, with HDF5's direct chunk write: the layout is uncompressed
    row chunks, so a chunk's bytes are just its rows, and skipping the library's chunk cache makes
    the write several times cheaper. A last, partial chunk is padded with the fill value (NaN); a
    write that does not start on a chunk boundary takes the library's ordinary path.
    """
    if start % CHUNK_ROWS:
        beta[start : start + len(values)] = values
        return
    for offset in range(0, len(values), CHUNK_ROWS):
        rows = values[offset : offset + CHUNK_ROWS]
        if len(rows) < CHUNK_ROWS:
            rows = np.concatenate((rows, np.full((CHUNK_ROWS - len(rows), values.shape[1]), np.nan, "f4")))
        beta.id.write_direct_chunk((start + offset, 0), rows)

"""The file writers: probes x samples matrices as GEO series matrix or CSV, streamed block by block.

Values are written at 6 decimals (NaN: an empty cell) by a vectorised formatter, each file on its own
thread (formatting and gzip release the GIL) fed from a short queue, so that a producer can generate
the next block while the previous one is written. gzip output has ``mtime=0``: the same values give
the same bytes. A file appears only when complete (written under ``.staging/`` and renamed, see
:mod:`mbeacon.store.atomic`). :func:`geo_metadata` is the header of the simulated members' series
matrix.
"""

from __future__ import annotations

import gzip
import queue
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import publish
from .model import SimulationConfig, series_accession

__all__ = ["COMPRESS_LEVEL", "PLATFORM_ID", "geo_metadata", "write_csv_matrix", "write_geo_series_matrix"]

PLATFORM_ID = "GPL13534"  # Illumina HumanMethylation450 BeadChip
#: gzip level of the output: on beta-value text, level 1 is several times faster than the default for
#: files only slightly larger.
COMPRESS_LEVEL = 1


def _format_rows(probe_ids: Sequence[str], values: np.ndarray, *, sep: str, quote: bool) -> bytes:
    """Text rows ``id<sep>v1<sep>v2...\\n`` with values at 6 decimals and NaN as an empty cell.

    Values in [0, 1] (beta values) take a vectorised fixed-width path, in chunks of rows that stay in
    cache (much faster than ``%``-formatting each value); anything else falls back to Python.
    """
    values = np.asarray(values, dtype=np.float64)
    rows, cols = values.shape
    with np.errstate(invalid="ignore"):
        beta = cols > 0 and not np.any((values < 0) | (values > 1) | np.isinf(values))
    if not beta:
        lines = []
        for pid, row in zip(probe_ids, values, strict=True):
            cells = ["" if np.isnan(v) else f"{v:.6f}" for v in row]
            lines.append((f'"{pid}"' if quote else str(pid)) + "".join(sep + c for c in cells) + "\n")
        return "".join(lines).encode()
    return b"".join(
        _format_beta_rows(probe_ids[s : s + _FORMAT_ROWS], values[s : s + _FORMAT_ROWS], sep, quote)
        for s in range(0, rows, _FORMAT_ROWS)
    )


_FORMAT_ROWS = 512
#: "000" to "999": two table look-ups write the six decimals of a value.
_THREE_DIGITS = np.array([f"{k:03d}".encode() for k in range(1000)], dtype="S3")
#: One written cell: separator, units digit, ".", six decimals.
_CELL = np.dtype([("sep", "u1"), ("units", "u1"), ("dot", "u1"), ("high", "S3"), ("low", "S3")])


def _format_beta_rows(probe_ids: Sequence[str], values: np.ndarray, sep: str, quote: bool) -> bytes:
    rows, cols = values.shape
    missing = np.isnan(values)
    micro = np.rint(values * 1e6)
    micro[missing] = 0.0
    high, low = np.divmod(micro.astype(np.int32), 1000)
    units, high = np.divmod(high, 1000)
    cells = np.empty((rows, cols), dtype=_CELL)
    cells["sep"] = ord(sep)
    cells["units"] = units + 48
    cells["dot"] = ord(".")
    cells["high"] = np.take(_THREE_DIGITS, high)
    cells["low"] = np.take(_THREE_DIGITS, low)
    body = cells.view(np.uint8).reshape(rows, cols * 9)
    gaps = np.flatnonzero(missing.any(axis=1))
    keep = np.repeat(~missing[gaps], 9, axis=1)
    keep[:, ::9] = True  # a missing value keeps its separator: an empty cell
    lines = [line.tobytes() for line in body]
    for row, mask in zip(gaps, keep, strict=True):
        lines[row] = body[row][mask].tobytes()
    ids = [(f'"{p}"' if quote else str(p)).encode() for p in probe_ids]
    return b"".join(part for pid, line in zip(ids, lines, strict=True) for part in (pid, line, b"\n"))


class _MatrixWriter:
    """Writes a probes x samples matrix file on its own thread (formatting and gzip release the GIL),
    taking blocks of rows from a short queue: the producer can run one or two blocks ahead."""

    def __init__(
        self, path: Path, header: str, footer: str, *, sep: str, quote: bool, n_samples: int, compress: bool
    ) -> None:
        self.path = Path(path)
        self.rows = 0
        self._sep, self._quote, self._n_samples = sep, quote, n_samples
        self._queue: queue.Queue = queue.Queue(maxsize=2)
        self._error: BaseException | None = None
        raw = open(self.path, "wb")  # noqa: SIM115 - closed by the writer thread
        if compress:
            self._file: Any = gzip.GzipFile(
                filename="", mode="wb", fileobj=raw, compresslevel=COMPRESS_LEVEL, mtime=0
            )
        else:
            self._file = raw
        self._raw = raw
        self._file.write(header.encode())
        self._footer = footer.encode()
        self._thread = threading.Thread(target=self._run, name=f"write {self.path.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            if self._error is not None:
                continue
            try:
                ids, values = job
                self._file.write(_format_rows(ids, values, sep=self._sep, quote=self._quote))
            except BaseException as exc:  # handed to the producer thread
                self._error = exc

    def write(self, probe_ids: Sequence[str], values: np.ndarray) -> None:
        values = np.asarray(values)
        if values.ndim != 2 or values.shape != (len(probe_ids), self._n_samples):
            raise ValueError(
                f"a block of {len(probe_ids)} probes x {self._n_samples} samples was expected, "
                f"got shape {values.shape}"
            )
        if self._error is not None:
            raise self._error
        self._queue.put((probe_ids, values))
        self.rows += len(probe_ids)

    def close(self, *, ok: bool = True) -> None:
        self._queue.put(None)
        self._thread.join()
        try:
            if ok and self._error is None:
                self._file.write(self._footer)
        finally:
            self._file.close()
            self._raw.close()
        if ok and self._error is not None:
            raise self._error

    def __enter__(self) -> _MatrixWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(ok=exc_type is None)


def _quoted(values: Iterable[str]) -> str:
    return "\t".join(f'"{v}"' for v in values)


def _geo_header(sample_ids: Sequence[str], metadata: Mapping[str, Any]) -> str:
    """``!Series_*`` then ``!Sample_*`` lines in the order given; a value is one string, a list of one
    string per sample, or a list of such lists (repeated lines, like ``Sample_characteristics_ch1``).
    ``Series_sample_id`` and ``Sample_geo_accession`` come from ``sample_ids`` unless given."""
    lines: list[str] = []

    def emit(key: str, value: Any) -> None:
        if isinstance(value, str):
            lines.append(f'!{key}\t"{value}"')
            return
        items = list(value)
        if items and not isinstance(items[0], str):
            for item in items:
                emit(key, item)
            return
        if key.startswith("Sample_") and len(items) != len(sample_ids):
            raise ValueError(f"!{key} has {len(items)} values for {len(sample_ids)} samples")
        lines.append(f"!{key}\t{_quoted(items)}")

    series = [(k, v) for k, v in metadata.items() if k.startswith("Series_")]
    samples = [(k, v) for k, v in metadata.items() if not k.startswith("Series_")]
    for key, value in series:
        emit(key, value)
    if "Series_sample_id" not in metadata:
        emit("Series_sample_id", " ".join(sample_ids) + " ")
    lines.append("")
    accession_done = "Sample_geo_accession" in metadata
    for key, value in samples:
        emit(key, value)
        if key == "Sample_title" and not accession_done:
            emit("Sample_geo_accession", list(sample_ids))
            accession_done = True
    if not accession_done:
        emit("Sample_geo_accession", list(sample_ids))
    lines.append("!series_matrix_table_begin")
    lines.append(f'"ID_REF"\t{_quoted(sample_ids)}')
    return "\n".join(lines) + "\n"


def _write_matrix(writer: _MatrixWriter, probe_ids: Sequence[str], block_iter: Iterable[np.ndarray]) -> int:
    ids = list(probe_ids)
    for block in block_iter:
        block = np.asarray(block, dtype=np.float64)
        if block.ndim != 2:
            raise ValueError(f"blocks must be 2-d (probes x samples), got shape {block.shape}")
        if writer.rows + block.shape[0] > len(ids):
            raise ValueError(f"the blocks hold more rows than the {len(ids)} probe ids")
        writer.write(ids[writer.rows : writer.rows + block.shape[0]], block)
    if writer.rows != len(ids):
        raise ValueError(f"the blocks hold {writer.rows} rows for {len(ids)} probe ids")
    return writer.rows


def _geo_writer(
    path: Path, sample_ids: Sequence[str], metadata: Mapping[str, Any] | None, *, compress: bool
) -> _MatrixWriter:
    meta = dict(metadata or {})
    meta.setdefault("Series_platform_id", PLATFORM_ID)
    header = _geo_header(list(sample_ids), meta)
    return _MatrixWriter(
        path,
        header,
        "!series_matrix_table_end\n",
        sep="\t",
        quote=True,
        n_samples=len(sample_ids),
        compress=compress,
    )


def _csv_writer(path: Path, sample_ids: Sequence[str], *, compress: bool) -> _MatrixWriter:
    header = ",".join(["ID_REF", *sample_ids]) + "\n"
    return _MatrixWriter(path, header, "", sep=",", quote=False, n_samples=len(sample_ids), compress=compress)


def write_geo_series_matrix(
    path: str | Path,
    probe_ids: Sequence[str],
    sample_ids: Sequence[str],
    block_iter: Iterable[np.ndarray],
    metadata: Mapping[str, Any] | None = None,
) -> int:
    """Write a GEO series matrix (gzip when ``path`` ends in ``.gz``), streaming the values.

    ``block_iter`` yields probes x samples blocks of beta values, in the order of ``probe_ids`` (NaN:
    missing, written as an empty cell; values at 6 decimals). ``metadata``: ``Series_*`` / ``Sample_*``
    header fields without the ``!`` (see :func:`_geo_header`); ``Series_platform_id`` defaults to
    GPL13534. The file appears only when complete (written under ``.staging/`` and renamed). Returns
    the number of probe rows.
    """
    path = Path(path)
    with (
        publish(path.parent, path) as temp,
        _geo_writer(temp, sample_ids, metadata, compress=path.suffix == ".gz") as writer,
    ):
        return _write_matrix(writer, probe_ids, block_iter)


def write_csv_matrix(
    path: str | Path, probe_ids: Sequence[str], sample_ids: Sequence[str], block_iter: Iterable[np.ndarray]
) -> int:
    """Write a plain CSV matrix (``ID_REF`` then one column per sample; gzip for ``.gz``), streamed."""
    path = Path(path)
    with (
        publish(path.parent, path) as temp,
        _csv_writer(temp, sample_ids, compress=path.suffix == ".gz") as writer,
    ):
        return _write_matrix(writer, probe_ids, block_iter)


def geo_metadata(config: SimulationConfig, member_ids: Sequence[str]) -> dict[str, Any]:
    """Header fields of the members' series matrix, as GEO writes them for a 450K blood series."""
    n = len(member_ids)
    return {
        "Series_title": (
            f"Simulated whole-blood DNA methylation of {n} patients (mbeacon simulate, seed {config.seed})"
        ),
        "Series_geo_accession": series_accession(config),
        "Series_status": "Simulated data, not submitted to GEO",
        "Series_summary": (
            "Synthetic Illumina HumanMethylation450 beta values: real 450K population means and the "
            "sd-versus-mean relation of real whole blood (GSE41169), Beta marginals, a Gaussian copula "
            f"along the probes, {config.dmp_fraction:.1%} disease DMPs. Ground truth in truth.json."
        ),
        "Series_overall_design": "Cases only: the cohort of a methylation Beacon.",
        "Series_type": "Methylation profiling by genome tiling array",
        "Series_platform_id": PLATFORM_ID,
        "Series_platform_taxid": "9606",
        "Series_sample_taxid": "9606",
        "Sample_title": [f"patient {k}" for k in range(1, n + 1)],
        "Sample_status": ["Simulated"] * n,
        "Sample_type": ["genomic"] * n,
        "Sample_source_name_ch1": ["whole blood"] * n,
        "Sample_organism_ch1": ["Homo sapiens"] * n,
        "Sample_characteristics_ch1": [["tissue: whole blood"] * n, ["disease state: case"] * n],
        "Sample_molecule_ch1": ["genomic DNA"] * n,
        "Sample_data_processing": ["beta values simulated by mbeacon simulate; missing values left empty"]
        * n,
        "Sample_platform_id": [PLATFORM_ID] * n,
    }

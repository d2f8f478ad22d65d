"""Reading reference tables: plain probes x samples CSV/TSV files (gz ok), DataFrames and arrays.

Shared by the builders (:mod:`.build`) and the sd model (:mod:`.sd_model`), which both take a reference
table as input; :func:`_header` also serves the means-file import. Errors are :class:`DataError` with the
file, line and column of the offending cell.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mbeacon.store.errors import DataError

__all__ = ["iter_table_file"]

#: What reading a damaged file raises besides parse errors: a cut or corrupt gzip stream, bad UTF-8.
READ_ERRORS = (OSError, EOFError, zlib.error, UnicodeDecodeError)


def _open_text(path: Path):
    import gzip

    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def _header(path: Path) -> tuple[str, list[str]]:
    """The separator (tab or comma) and the header fields of a plain CSV/TSV table."""
    try:
        with _open_text(path) as handle:
            line = handle.readline()
    except FileNotFoundError:
        raise DataError("no such file", path=str(path)) from None
    except READ_ERRORS as exc:
        raise DataError(f"cannot read (corrupt or not UTF-8 text?): {exc}", path=str(path)) from None
    if not line.strip():
        raise DataError("empty file: expected a header line", path=str(path), line=1)
    sep = "\t" if "\t" in line else ","
    return sep, [field.strip().strip('"') for field in line.rstrip("\r\n").split(sep)]


def iter_table_file(path: Path, *, chunk_rows: int = 50_000) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Stream a plain probes x samples CSV/TSV (gz ok): blocks of (probe ids, float64 values).

    First column: probe ids; header: one name per sample. Missing values: empty, NA, NaN. A cell that
    is not a number raises :class:`DataError` with its line and column.
    """
    path = Path(path)
    sep, header = _header(path)
    if len(header) < 2:
        raise DataError("expected a probe id column and at least one sample column", path=str(path), line=1)
    line = 2
    try:
        reader = pd.read_csv(path, sep=sep, index_col=0, chunksize=chunk_rows)
        for chunk in reader:
            values = np.empty(chunk.shape, dtype=np.float64)
            for col in range(chunk.shape[1]):
                column = chunk.iloc[:, col]
                if column.dtype.kind in "fiu":
                    values[:, col] = column.to_numpy(dtype=np.float64)
                    continue
                numbers = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)
                bad = np.flatnonzero(np.isnan(numbers) & column.notna().to_numpy())
                if bad.size:
                    row = int(bad[0])
                    raise DataError(
                        f"not a number: {column.iat[row]!r}", path=str(path), line=line + row, column=col + 2
                    )
                values[:, col] = numbers
            yield chunk.index.to_numpy().astype(str), values
            line += len(chunk)
    except (pd.errors.ParserError, ValueError, *READ_ERRORS) as exc:
        raise DataError(f"cannot parse as a CSV/TSV matrix: {exc}", path=str(path)) from None


def _read_matrix_frame(table_or_path: Any) -> tuple[np.ndarray, np.ndarray, str]:
    """(probe ids, float64 matrix, description) of a DataFrame, an array or a CSV/TSV file."""
    if isinstance(table_or_path, pd.DataFrame):
        frame = table_or_path
        try:
            matrix = frame.to_numpy(dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise DataError(f"the reference table has non-numeric values: {exc}") from None
        return frame.index.to_numpy().astype(str), matrix, "a DataFrame"
    if isinstance(table_or_path, np.ndarray):
        matrix = np.asarray(table_or_path, dtype=np.float64)
        return np.array([f"row{i}" for i in range(matrix.shape[0])]), matrix, "an array"
    path = Path(table_or_path)
    parts = list(iter_table_file(path))
    ids = np.concatenate([p for p, _ in parts]) if parts else np.array([], dtype=str)
    matrix = np.concatenate([m for _, m in parts]) if parts else np.empty((0, 0))
    return ids, matrix, path.name

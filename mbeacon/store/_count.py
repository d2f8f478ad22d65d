"""The compiled count behind :meth:`mbeacon.store.cohorts.Cohort.count_in_range` (numba; no GIL).

A batch of queries asks for ``alpha``, the patients with a non-missing value in ``[lo, hi]``, at up to
thousands of probe rows. Gathering those rows out of the memory-mapped cohort with fancy indexing
copies every value of every row (4 MB for 1,000 rows x 1,000 patients) and then builds two boolean
blocks of the same shape before counting; this kernel reads each row where it lies in the map and
counts in one pass, copying nothing.

Exactness: the comparisons are the float32 ones numpy makes (values and bounds both float32; NaN, a
missing value, compares false with everything, so it is never counted), so the counts are the same
integers. It reads every value of every asked row whatever the answer, as the numpy count does, and
adds each comparison's result instead of branching on it, so its time does not vary with how many
values are in range (a branch would be mispredicted more or less often depending on the data).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _count_rows(
    flat: np.ndarray,
    chunk_starts: np.ndarray,
    chunk_rows: int,
    width: int,
    rows: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    out: np.ndarray,
) -> None:
    for i in range(rows.size):
        row = rows[i]
        start = chunk_starts[row // chunk_rows] + (row % chunk_rows) * width
        low = lo[i]
        high = hi[i]
        n = 0
        for j in range(start, start + width):
            v = flat[j]
            # no branch on the comparison: the time of a count must not depend on the count
            n += (v >= low) & (v <= high)
        out[i] = n


# A kernel of its own rather than _count_rows over every column index: the untruncated count, the
# common one, then keeps its contiguous reads with no index array to load beside each value.
@numba.njit(cache=True, nogil=True)
def _count_rows_in_columns(
    flat: np.ndarray,
    chunk_starts: np.ndarray,
    chunk_rows: int,
    width: int,
    rows: np.ndarray,
    columns: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    out: np.ndarray,
) -> None:
    for i in range(rows.size):
        row = rows[i]
        start = chunk_starts[row // chunk_rows] + (row % chunk_rows) * width
        low = lo[i]
        high = hi[i]
        n = 0
        for k in range(columns.size):
            v = flat[start + columns[k]]
            n += (v >= low) & (v <= high)  # no branch, as in _count_rows
        out[i] = n


def count_rows(
    flat: np.ndarray,
    chunk_starts: np.ndarray,
    chunk_rows: int,
    width: int,
    rows: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    columns: np.ndarray | None = None,
) -> np.ndarray:
    """Per query ``i``: the values of row ``rows[i]`` in ``[lo[i], hi[i]]`` (bounds inclusive, NaN never).

    ``flat`` is the cohort file as float32 words, ``chunk_starts`` the word offset of each chunk of
    ``chunk_rows`` rows of ``width`` values. ``columns`` (sorted sample indices) counts only those
    samples: a cohort truncated at its contribution bound. The caller checks ``rows`` against the row
    count and ``columns`` against the width; the bounds are compared as float32, as the numpy count
    compares them.
    """
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    lo32 = np.ascontiguousarray(np.broadcast_to(np.asarray(lo, dtype=np.float32).reshape(-1), rows.shape))
    hi32 = np.ascontiguousarray(np.broadcast_to(np.asarray(hi, dtype=np.float32).reshape(-1), rows.shape))
    out = np.empty(rows.size, dtype=np.int64)
    if columns is None:
        _count_rows(flat, chunk_starts, chunk_rows, width, rows, lo32, hi32, out)
    else:
        cols = np.ascontiguousarray(columns, dtype=np.int64)
        _count_rows_in_columns(flat, chunk_starts, chunk_rows, width, rows, cols, lo32, hi32, out)
    return out

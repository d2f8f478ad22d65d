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
def _row(flat: np.ndarray, chunk_starts: np.ndarray, chunk_rows: int, width: int, row: int) -> np.ndarray:
    """Row ``row`` of the mapped cohort, as a slice (no copy)."""
    start = chunk_starts[row // chunk_rows] + (row % chunk_rows) * width
    return flat[start : start + width]


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
    # Four rows at a time, read side by side: rows scattered over a large file each start with cache
    # misses, and four independent streams keep four of them in flight where one row at a time waits
    # for each in turn. Each row is a slice indexed from 0, which the compiler vectorises (an index
    # into the whole map carries a negative-index check that stops it).
    i = 0
    while i + 4 <= rows.size:
        a0 = _row(flat, chunk_starts, chunk_rows, width, rows[i])
        a1 = _row(flat, chunk_starts, chunk_rows, width, rows[i + 1])
        a2 = _row(flat, chunk_starts, chunk_rows, width, rows[i + 2])
        a3 = _row(flat, chunk_starts, chunk_rows, width, rows[i + 3])
        l0, l1, l2, l3 = lo[i], lo[i + 1], lo[i + 2], lo[i + 3]
        h0, h1, h2, h3 = hi[i], hi[i + 1], hi[i + 2], hi[i + 3]
        n0 = n1 = n2 = n3 = 0
        for j in range(width):
            v0, v1, v2, v3 = a0[j], a1[j], a2[j], a3[j]
            # no branch on the comparison: the time of a count must not depend on the count
            n0 += (v0 >= l0) & (v0 <= h0)
            n1 += (v1 >= l1) & (v1 <= h1)
            n2 += (v2 >= l2) & (v2 <= h2)
            n3 += (v3 >= l3) & (v3 <= h3)
        out[i], out[i + 1], out[i + 2], out[i + 3] = n0, n1, n2, n3
        i += 4
    while i < rows.size:
        values = _row(flat, chunk_starts, chunk_rows, width, rows[i])
        low, high = lo[i], hi[i]
        n = 0
        for j in range(width):
            v = values[j]
            n += (v >= low) & (v <= high)
        out[i] = n
        i += 1


# The truncated count reads every value of each row, as the untruncated one does, and counts only
# those of kept samples by a mask (``keep[j]``, 0 or 1, in the same branch-free sum). Reading the kept
# columns by their indices instead would read fewer values, but an indexed read is not vectorised:
# the contiguous masked pass is faster unless few samples are kept, and it costs about what the
# untruncated count does (benchmarks/bench_truncation.py). Four rows side by side as in _count_rows.
@numba.njit(cache=True, nogil=True)
def _count_rows_masked(
    flat: np.ndarray,
    chunk_starts: np.ndarray,
    chunk_rows: int,
    width: int,
    rows: np.ndarray,
    keep: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    out: np.ndarray,
) -> None:
    i = 0
    while i + 4 <= rows.size:
        a0 = _row(flat, chunk_starts, chunk_rows, width, rows[i])
        a1 = _row(flat, chunk_starts, chunk_rows, width, rows[i + 1])
        a2 = _row(flat, chunk_starts, chunk_rows, width, rows[i + 2])
        a3 = _row(flat, chunk_starts, chunk_rows, width, rows[i + 3])
        l0, l1, l2, l3 = lo[i], lo[i + 1], lo[i + 2], lo[i + 3]
        h0, h1, h2, h3 = hi[i], hi[i + 1], hi[i + 2], hi[i + 3]
        n0 = n1 = n2 = n3 = 0
        for j in range(width):
            k = keep[j]
            v0, v1, v2, v3 = a0[j], a1[j], a2[j], a3[j]
            n0 += k & (v0 >= l0) & (v0 <= h0)  # no branch, as in _count_rows
            n1 += k & (v1 >= l1) & (v1 <= h1)
            n2 += k & (v2 >= l2) & (v2 <= h2)
            n3 += k & (v3 >= l3) & (v3 <= h3)
        out[i], out[i + 1], out[i + 2], out[i + 3] = n0, n1, n2, n3
        i += 4
    while i < rows.size:
        values = _row(flat, chunk_starts, chunk_rows, width, rows[i])
        low, high = lo[i], hi[i]
        n = 0
        for j in range(width):
            v = values[j]
            n += keep[j] & (v >= low) & (v <= high)
        out[i] = n
        i += 1


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
        keep = np.zeros(width, dtype=np.bool_)
        keep[np.asarray(columns, dtype=np.int64)] = True
        _count_rows_masked(flat, chunk_starts, chunk_rows, width, rows, keep, lo32, hi32, out)
    return out

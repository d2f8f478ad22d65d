"""The four-row count kernel (mbeacon/store/_count.py) against the plain numpy count, on any width.

The kernel reads four rows side by side and a compiler vectorises its inner loop, so widths that are
not a multiple of the vector size, batches whose size is not a multiple of four, rows asked twice and
rows in any order must all give numpy's count exactly (float32 comparisons, bounds inclusive, NaN
never counted). The map here is built by hand: chunks of ``chunk_rows`` rows at scattered offsets, as
in a cohort file.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.store._count import count_rows


@st.composite
def _mapped(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, int, int, np.ndarray]:
    """``(flat, chunk_starts, chunk_rows, width, values)``: ``values`` (rows x width) laid out in
    chunks at shuffled, gapped offsets of ``flat``."""
    width = draw(st.integers(1, 70))
    chunk_rows = draw(st.integers(1, 5))
    n_rows = draw(st.integers(1, 23))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    values = (rng.integers(0, 11, size=(n_rows, width)) / 10).astype(np.float32)
    values[rng.random(values.shape) < 0.15] = np.nan
    n_chunks = -(-n_rows // chunk_rows)
    order = rng.permutation(n_chunks)
    gap = 3
    flat = np.full(n_chunks * (chunk_rows * width + gap) + gap, 0.5, dtype=np.float32)  # gaps in range
    starts = np.empty(n_chunks, dtype=np.int64)
    for place, chunk in enumerate(order):
        start = gap + place * (chunk_rows * width + gap)
        starts[chunk] = start
        block = values[chunk * chunk_rows : (chunk + 1) * chunk_rows].reshape(-1)
        flat[start : start + block.size] = block
    return flat, starts, chunk_rows, width, values


_bound = st.sampled_from([-0.1, 0.0, 0.1, 0.3, 0.5, 0.7, 1.0, 1.1, float("inf"), float("-inf")])


@settings(max_examples=400, deadline=None)
@given(mapped=_mapped(), data=st.data())
def test_the_kernel_counts_what_numpy_counts(mapped, data) -> None:
    flat, starts, chunk_rows, width, values = mapped
    asked = data.draw(st.lists(st.tuples(st.integers(0, len(values) - 1), _bound, _bound), max_size=30))
    rows = np.array([a[0] for a in asked], dtype=np.int64)
    lo = np.array([a[1] for a in asked], dtype=np.float64)
    hi = np.array([a[2] for a in asked], dtype=np.float64)
    got = count_rows(flat, starts, chunk_rows, width, rows, lo, hi)
    block = values[rows]
    lo32, hi32 = lo.astype(np.float32)[:, None], hi.astype(np.float32)[:, None]
    expected = np.count_nonzero((block >= lo32) & (block <= hi32), axis=1)
    assert got.tolist() == expected.tolist()

"""The compiled in-place count (mbeacon/store/_count.py) gives exactly the numpy count of the gathered
rows: NaN never counted, bounds inclusive, float32 comparisons, duplicate and unordered rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.store.cohorts import CHUNK_ROWS, CohortStore, Metadata

ROWS, COLS = 2 * CHUNK_ROWS + 37, 9  # three chunks, the last one partial


def _numpy_count(values: np.ndarray, rows: np.ndarray, lo, hi) -> list[int]:
    block = values[rows]
    lo32 = np.asarray(lo, dtype=np.float32).reshape(-1, 1)
    hi32 = np.asarray(hi, dtype=np.float32).reshape(-1, 1)
    return np.count_nonzero((block >= lo32) & (block <= hi32), axis=1).tolist()


@pytest.fixture(scope="module")
def cohort_and_values(tmp_path_factory: pytest.TempPathFactory):
    rng = np.random.default_rng(5)
    # values on a coarse grid so that bounds often hit them exactly; NaN for missing values
    values = (rng.integers(0, 21, size=(ROWS, COLS)) / 20).astype(np.float32)
    values[rng.random((ROWS, COLS)) < 0.2] = np.nan
    store = CohortStore(Path(tmp_path_factory.mktemp("count")) / "store", create=True)
    ids = [f"cg{i:08d}" for i in range(ROWS)]
    store.write("c", [f"GSM{i}" for i in range(COLS)], iter([(ids, values)]), metadata=Metadata(name="c"))
    cohort = store.open("c")
    assert cohort.n_probes == ROWS
    assert cohort._plain_map is not None  # the in-place path is the one under test
    return cohort, values


_bound = st.one_of(st.sampled_from([0.0, 0.05, 0.5, 0.95, 1.0]), st.floats(-0.1, 1.1, allow_nan=False))


@settings(max_examples=200, deadline=None)
@given(
    queries=st.lists(st.tuples(st.integers(0, ROWS - 1), _bound, _bound), min_size=1, max_size=40),
)
def test_the_in_place_count_equals_the_numpy_count(cohort_and_values, queries):
    cohort, values = cohort_and_values
    rows = np.array([q[0] for q in queries], dtype=np.int64)
    lo = np.array([q[1] for q in queries])
    hi = np.array([q[2] for q in queries])
    assert cohort.count_in_range(rows, lo, hi).tolist() == _numpy_count(values, rows, lo, hi)


def test_inclusive_bounds_nan_and_empty(cohort_and_values):
    cohort, values = cohort_and_values
    row = 300  # in the second chunk
    v = values[row][~np.isnan(values[row])][0]
    exact = cohort.count_in_range(np.array([row]), np.array([v]), np.array([v]))[0]
    assert exact == np.count_nonzero(values[row] == v) >= 1  # both bounds inclusive
    everything = cohort.count_in_range(np.array([row]), np.array([-np.inf]), np.array([np.inf]))[0]
    assert everything == np.count_nonzero(~np.isnan(values[row]))  # NaN is never in range
    assert cohort.count_in_range(np.array([], dtype=np.int64), np.array([]), np.array([])).tolist() == []


@pytest.mark.parametrize("row", [-1, ROWS])
def test_rows_out_of_range_are_refused(cohort_and_values, row):
    cohort, _ = cohort_and_values
    with pytest.raises(IndexError, match="out of range"):
        cohort.count_in_range(np.array([0, row]), np.array([0.0, 0.0]), np.array([1.0, 1.0]))


@settings(max_examples=100, deadline=None)
@given(
    queries=st.lists(st.tuples(st.integers(0, ROWS - 1), _bound, _bound), min_size=1, max_size=20),
    kept=st.sets(st.integers(0, COLS - 1)),
)
def test_a_count_over_some_samples_equals_the_numpy_count_of_those_samples(cohort_and_values, queries, kept):
    """A cohort truncated at its contribution bound counts only its kept samples, in place too."""
    cohort, values = cohort_and_values
    columns = np.array(sorted(kept), dtype=np.int64)
    rows = np.array([q[0] for q in queries], dtype=np.int64)
    lo = np.array([q[1] for q in queries])
    hi = np.array([q[2] for q in queries])
    in_place = cohort.count_in_range(rows, lo, hi, columns=columns).tolist()
    assert in_place == _numpy_count(values[:, columns], rows, lo, hi)


def test_sample_columns_out_of_range_are_refused(cohort_and_values):
    cohort, _ = cohort_and_values
    with pytest.raises(IndexError, match="sample column out of range"):
        cohort.count_in_range(np.array([0]), np.array([0.0]), np.array([1.0]), columns=np.array([0, COLS]))

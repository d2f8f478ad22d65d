"""Pre-faulting a served cohort (mbeacon/store/prefault.py): every page of the file is resident in the
serving process after open, the counts are the same, and a file too large for the memory is left alone."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from mbeacon.store import prefault
from mbeacon.store.cohorts import CohortStore, Metadata

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_POPULATE_READ is Linux's")


def _mapped_rss_kb(path: Path) -> int:
    """Resident KB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            first = line.split(maxsplit=1)[0]
            if "-" in first and not first.endswith(":"):
                inside = line.rstrip().endswith(str(path))
            elif inside and first == "Rss:":
                total += int(line.split()[1])
    return total


def _cohort(tmp_path: Path, populate: bool):
    store = CohortStore(tmp_path / "store", create=True)
    rows, cols = 3000, 100  # 1.2 MB of values: many pages
    values = np.random.default_rng(1).random((rows, cols), dtype=np.float32)  # noise-ok: test data
    ids = [f"cg{i:08d}" for i in range(rows)]
    store.write("d", [f"S{i}" for i in range(cols)], iter([(ids, values)]), metadata=Metadata(name="d"))
    cohort = store.open("d")
    cohort.populate = populate
    return cohort, values


def _supported() -> bool:
    return prefault.populate(np.zeros(prefault.PAGE // 4, dtype=np.float32))


def test_a_populated_cohort_is_resident_and_counts_the_same(tmp_path: Path) -> None:
    if not _supported():
        pytest.skip("this kernel has no MADV_POPULATE_READ")
    cohort, values = _cohort(tmp_path, populate=True)
    assert cohort.n_probes == 3000  # opens, and populates
    size_kb = cohort.path.stat().st_size // 1024
    assert _mapped_rss_kb(cohort.path) >= size_kb - 4  # every page of the file (last one partial)
    rows = np.array([0, 2999, 1500, 7])
    lo, hi = np.full(4, 0.25), np.full(4, 0.75)
    expected = np.count_nonzero((values[rows] >= 0.25) & (values[rows] <= 0.75), axis=1)
    assert cohort.count_in_range(rows, lo, hi).tolist() == expected.tolist()


def test_an_unpopulated_cohort_maps_pages_on_demand(tmp_path: Path) -> None:
    cohort, _ = _cohort(tmp_path, populate=False)
    assert cohort.n_probes == 3000
    assert _mapped_rss_kb(cohort.path) < cohort.path.stat().st_size // 1024 // 2


def test_a_file_too_large_for_the_memory_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefault, "MAX_FRACTION", 0.0)
    assert prefault.populate(np.zeros(1024, dtype=np.float32)) is False

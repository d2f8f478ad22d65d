"""The demo data set builds quickly, deterministically and only once."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from mbeacon.store.cohorts import CohortStore
from mbeacon.store.demo import DEMO_CONFIG, ensure_demo
from mbeacon.store.priors import list_priors, load_prior


def test_demo_builds_in_seconds_and_is_complete(tmp_path: Path):
    start = time.perf_counter()
    demo = ensure_demo(tmp_path / "a")
    elapsed = time.perf_counter() - start
    assert elapsed < 60, f"demo build took {elapsed:.1f} s"  # generous: 'seconds' on a loaded 2-core box
    store = CohortStore(demo.store)
    info = store.info(demo.dataset)
    assert (info.patients, info.probes) == (DEMO_CONFIG.patients, DEMO_CONFIG.probes)
    cohort = store.open(demo.dataset)
    prior = load_prior(demo.store, demo.prior)
    assert prior.n_reference == DEMO_CONFIG.reference
    assert np.all(prior.index(cohort.probe_ids) >= 0)  # the prior knows every probe the cohort has


def test_demo_is_deterministic_and_built_once(tmp_path: Path):
    first = ensure_demo(tmp_path / "a")
    second = ensure_demo(tmp_path / "b")
    checksum = CohortStore(first.store).info(first.dataset).checksum
    assert checksum == CohortStore(second.store).info(second.dataset).checksum
    np.testing.assert_array_equal(
        load_prior(first.store, first.prior).mean, load_prior(second.store, second.prior).mean
    )
    stamp = CohortStore(first.store).path_of(first.dataset).stat().st_mtime_ns
    again = ensure_demo(tmp_path / "a")
    assert CohortStore(again.store).path_of(again.dataset).stat().st_mtime_ns == stamp
    assert [p["version"] for p in list_priors(again.store)] == [1]  # no second prior version


def test_demo_data_command(tmp_path: Path):
    from click.testing import CliRunner

    from mbeacon.cli import main

    result = CliRunner().invoke(main, ["demo-data", "--data-dir", str(tmp_path / "demo")])
    assert result.exit_code == 0, result.output
    assert "demo-cohort" in result.output and (tmp_path / "demo" / "store" / "datasets").is_dir()

"""Two dataset files that hold the same samples are refused at start-up (issue 27, item 1): a series
ingested whole and again as a subset would give its patients two budgets. Generic sample ids that
name different people in unrelated files are not an overlap."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.beacon.overlap import MIN_COMPARED, shared_samples
from mbeacon.cli import main
from mbeacon.store.cohorts import CohortStore
from mbeacon.store.demo import DEMO_DATASET, ensure_demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return ensure_demo(tmp_path_factory.mktemp("demo"))


def _store(tmp_path: Path, demo) -> tuple[Path, CohortStore]:
    root = tmp_path / "store"
    shutil.copytree(demo.store, root)
    return root, CohortStore(root)


def _app(root: Path, tmp_path: Path):
    from mbeacon.api import create_app

    return create_app({"store": str(root), "database_url": f"sqlite:///{tmp_path}/ledger.sqlite3",
                       "defaults": {"mechanism": "cohort-pmw"}})  # fmt: skip


def test_a_subset_of_a_served_cohort_under_another_id_is_refused(tmp_path: Path, demo) -> None:
    root, cohorts = _store(tmp_path, demo)
    source = cohorts.open(DEMO_DATASET)
    rows = np.arange(0, source.n_probes, 3)  # another file: a third of the probes, 12 of the samples
    keep = np.arange(5, 17)
    cohorts.write("subset", source.sample_ids[keep].astype(str).tolist(),
                  [(source.probe_ids[rows].tolist(), source.rows(rows)[:, keep])])  # fmt: skip
    refused = "dataset 'subset' holds 12 of the samples of dataset 'demo-cohort'"
    config = tmp_path / "beacon.toml"
    config.write_text(f'store = "{root}"\ndatabase_url = "sqlite:///{tmp_path}/ledger.sqlite3"\n')
    check = CliRunner().invoke(main, ["config", "check", "--config", str(config)], prog_name="mbeacon",
                               env={"MBEACON_CONFIG": None, "MBEACON_DATABASE_URL": None})  # fmt: skip
    assert check.exit_code == 2 and refused in check.stderr
    assert not (tmp_path / "ledger.sqlite3").exists()
    app = _app(root, tmp_path)  # a worker serves the first, never the second
    engine = app.config["MBEACON"].engine
    assert engine.dataset_ids() == [DEMO_DATASET] and refused in engine.refused["subset"]
    app.config["MBEACON"].ledger.close()


def test_a_subset_ingested_while_serving_is_not_served(tmp_path: Path, demo) -> None:
    root, cohorts = _store(tmp_path, demo)
    app = _app(root, tmp_path)
    engine = app.config["MBEACON"].engine
    assert engine.dataset_ids() == [DEMO_DATASET]
    source = cohorts.open(DEMO_DATASET)
    rows = np.arange(100)
    samples = source.sample_ids[:30].astype(str).tolist()
    cohorts.write("later", samples, [(source.probe_ids[rows].tolist(), source.rows(rows)[:, :30])])
    assert engine.dataset_ids() == [DEMO_DATASET]
    assert "'later' holds 30 of the samples" in engine.refused["later"]
    app.config["MBEACON"].ledger.close()


def test_generic_sample_ids_with_other_values_are_not_an_overlap(tmp_path: Path, demo) -> None:
    root, cohorts = _store(tmp_path, demo)
    source = cohorts.open(DEMO_DATASET)
    rows = np.arange(200)
    other = np.clip(source.rows(rows)[:, ::-1] + np.float32(0.01), 0, 1)  # other people's values
    cohorts.write("other", source.sample_ids.astype(str).tolist(), [(source.probe_ids[rows].tolist(), other)])
    app = _app(root, tmp_path)
    assert set(app.config["MBEACON"].engine.dataset_ids()) == {DEMO_DATASET, "other"}
    app.config["MBEACON"].ledger.close()


class _Table:
    """A cohort as the overlap check reads it: sample ids, probe ids and rows of values."""

    def __init__(self, samples: list[str], probes: list[str], values: np.ndarray) -> None:
        self.sample_ids = np.array(samples)
        self.probe_ids = np.array(probes)
        self.values = values

    def probe_index(self, probes: np.ndarray) -> np.ndarray:
        where = {p: i for i, p in enumerate(self.probe_ids.tolist())}
        return np.array([where.get(p, -1) for p in probes.tolist()], dtype=np.int64)

    def rows(self, index: np.ndarray) -> np.ndarray:
        return self.values[index]


@settings(max_examples=60, deadline=None)
@given(
    n_probes=st.integers(MIN_COMPARED, 80),
    copied=st.sets(st.integers(0, 5), max_size=6),
    changed=st.sets(st.integers(0, 5), max_size=6),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_sample_is_shared_when_its_values_agree_whatever_the_order(n_probes, copied, changed, seed) -> None:
    """Samples named alike in both tables are shared exactly when their values were copied; the
    order of probes and samples in either table does not matter."""
    rng = np.random.default_rng(seed)
    probes = [f"cg{i:08d}" for i in range(n_probes)]
    a = rng.random((n_probes, 6), dtype=np.float32)
    b = rng.random((n_probes, 6), dtype=np.float32)  # other people under the same ids
    for j in copied - changed:
        b[:, j] = a[:, j]
    probe_order, sample_order = rng.permutation(n_probes), rng.permutation(6)
    names = [f"S{j}" for j in range(6)]
    first = _Table(names, probes, a)
    second = _Table([names[j] for j in sample_order], [probes[i] for i in probe_order],
                    b[probe_order][:, sample_order])  # fmt: skip
    assert shared_samples(first, second) == sorted(f"S{j}" for j in copied - changed)

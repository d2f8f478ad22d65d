"""Test configuration: slow statistical and load tests run only with ``--runslow`` (CI passes it);
the store and Flask app factory fixtures shared by the API test modules (which define ``POLICY``,
``DATASETS`` and ``EXTRA_PROBES``; a module's own ``store`` fixture takes precedence)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False, help="also run tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    skip_slow = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)


@pytest.fixture(scope="module")
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo store plus, for every other dataset in the module's ``DATASETS``, a cohort of the
    demo's first ``EXTRA_PROBES`` probes, so each policy has its own dataset. The k-th copy also holds
    the demo's next k probes, so that each is a cohort file of its own (the service refuses one file
    served under two ids with per-holder budgets), and its sample ids are its own: the copies stand for
    other patients (the service refuses two files that hold the same samples)."""
    import numpy as np

    from mbeacon.store.cohorts import CohortStore
    from mbeacon.store.demo import DEMO_DATASET, ensure_demo

    demo = ensure_demo(tmp_path_factory.getbasetemp() / "demo-store")
    root = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]) / "store"
    shutil.copytree(demo.store, root)
    cohorts = CohortStore(root)
    source = cohorts.open(DEMO_DATASET)
    extra = request.module.EXTRA_PROBES
    copies = [name for name in request.module.DATASETS if name != DEMO_DATASET]
    for k, name in enumerate(copies, start=1):
        rows = np.arange(extra + k)
        samples = [f"{name}-{sample}" for sample in source.sample_ids.astype(str).tolist()]
        cohorts.write(name, samples, [(source.probe_ids[rows].tolist(), source.rows(rows))])
    return root


@pytest.fixture
def make_app(request: pytest.FixtureRequest, store: Path, tmp_path: Path) -> Iterator[Callable[..., object]]:
    """Apps on the module's ``store`` fixture with the module's ``POLICY``/``DATASETS``, each with its
    own SQLite ledger; keyword arguments override the configuration."""
    from mbeacon.api import create_app

    apps: list = []

    def make(**overrides):
        config = {
            "store": str(store),
            "database_url": f"sqlite:///{tmp_path}/ledger-{len(apps)}/ledger.sqlite3",
            "defaults": request.module.POLICY,
            "datasets": request.module.DATASETS,
            **overrides,
        }
        app = create_app(config)
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.config["MBEACON"].ledger.close()


@pytest.fixture
def app(make_app):
    return make_app()

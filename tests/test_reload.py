"""Reloads never take the beacon down (issue 28, item 3), on a real gunicorn server.

* adding a second prior to the store and reloading keeps serving with the prior it had (gunicorn's
  own reload boots workers that find no chosen prior if the choice is ambiguous, then stops);
* ``mbeacon reload`` checks the configuration first: a bad one is refused with exit status 2 and no
  signal is sent;
* a plain ``kill -HUP`` with a bad configuration is refused by the master itself: the running workers
  keep serving, and the log says why in one line.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest
from servers import BeaconServer, write_config

from mbeacon.beacon.ledger import Ledger
from mbeacon.store.demo import DEMO_DATASET, ensure_demo
from mbeacon.store.priors import prior_from_means, save_prior

pytestmark = pytest.mark.slow


def _reload(config, pid: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mbeacon.cli", "reload", "--config", str(config), "--pid", str(pid)],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def _ask(server: BeaconServer, key: str) -> httpx.Response:
    return httpx.get(f"{server.url}/api/methylation", params={"probeId": "cg00231192", "minValue": 0.6},
                     headers={"Authorization": f"Bearer {key}"}, timeout=30)  # fmt: skip


def _wait_for_new_workers(server: BeaconServer, old: set[int], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        pids = set(server.worker_pids())
        if len(pids) == server.workers and not pids & old:
            return
        assert time.monotonic() < deadline, f"workers not replaced:\n{server.log()}"
        time.sleep(0.3)


def test_reloads_keep_serving_and_bad_ones_are_refused(tmp_path, tmp_path_factory) -> None:
    demo = ensure_demo(tmp_path_factory.mktemp("demo"))
    store = tmp_path / "store"
    shutil.copytree(demo.store, store)
    url = f"sqlite:///{tmp_path}/ledger.sqlite3"
    ledger = Ledger.open(url)
    key = ledger.add_user("alice")
    ledger.close()
    settings = {"store": str(store), "database_url": url}  # no default_prior: the store's only prior
    config = write_config(tmp_path / "beacon.toml", settings, {"c": 50, "epsilon": 5.0})
    with BeaconServer(config, tmp_path, workers=2) as server:
        assert _ask(server, key).status_code == 200

        # a second prior joins the only one, then `mbeacon reload`: new workers, same prior
        probes = np.array([f"cg{i:08d}" for i in range(10)])
        save_prior(store, prior_from_means(probes, np.full(10, 0.5), name="aaa-second"))
        old = set(server.worker_pids())
        done = _reload(config, server.process.pid)
        assert done.returncode == 0, done.stderr
        _wait_for_new_workers(server, old)
        answer = _ask(server, key)
        assert answer.status_code == 200, answer.text
        assert answer.json()["info"]["budgets"][DEMO_DATASET]["positivesTotal"] == 50

        # a misspelt table: `mbeacon reload` refuses and signals nothing
        config.write_text(config.read_text() + f"[datasets.{DEMO_DATASET}x]\nepsilon = 0.5\n")
        running = set(server.worker_pids())
        refused = _reload(config, server.process.pid)
        assert refused.returncode == 2
        (line,) = refused.stderr.strip().splitlines()
        assert line.startswith("error: reload refused, the running beacon is unchanged: ")
        assert f"did you mean [datasets.{DEMO_DATASET}]?" in line

        # a plain HUP with the same configuration: the master refuses it, the workers keep serving
        os.kill(server.process.pid, signal.SIGHUP)
        deadline = time.monotonic() + 60
        while "reload refused" not in server.log():
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.3)
        time.sleep(1.0)
        assert server.process.poll() is None, server.log()
        assert set(server.worker_pids()) == running
        assert _ask(server, key).status_code == 200
        refusals = [line for line in server.log().splitlines() if "reload refused" in line]
        assert len(refusals) == 1 and f"[datasets.{DEMO_DATASET}x]" in refusals[0]


def test_reload_refuses_a_process_that_is_not_a_beacon(tmp_path) -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        done = _reload(tmp_path / "absent.toml", sleeper.pid)
        assert done.returncode == 2 and "is not a beacon" in done.stderr
        assert sleeper.poll() is None  # not signalled: SIGHUP would have ended it
    finally:
        sleeper.kill()

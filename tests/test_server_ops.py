"""Operations against real servers: the README's demo command, metrics summed over workers, the
Redis rate limit shared by workers, JSON logs without secrets."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import httpx
import pytest
from servers import BeaconServer, write_config

from mbeacon.beacon.ledger import Ledger
from mbeacon.store.demo import ensure_demo

pytestmark = pytest.mark.slow

REDIS_URL = os.environ.get("MBEACON_TEST_REDIS", "redis://127.0.0.1:6379/0")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return ensure_demo(tmp_path_factory.mktemp("demo"))


def test_demo_command_prints_url_and_key_that_answer_a_query(tmp_path):
    """`mbeacon demo` (the README's first command) serves, and its printed key answers a query."""
    process = subprocess.Popen(
        [sys.executable, "-m", "mbeacon.cli", "demo", "--port", "0", "--data-dir", str(tmp_path / "demo")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        url = process.stdout.readline().strip()
        key = process.stdout.readline().strip()
        assert url.startswith("url: http://127.0.0.1:"), url
        assert key.startswith("key: mbk_"), key
        base, key = url.removeprefix("url: "), key.removeprefix("key: ")
        deadline = time.monotonic() + 60
        while True:
            try:
                response = httpx.get(f"{base}/methylation", params={"probeId": "cg00231192", "minValue": 0.6},
                                     headers={"Authorization": f"Bearer {key}"}, timeout=5)  # fmt: skip
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "demo server did not come up"
                time.sleep(0.3)
        assert response.status_code == 200, response.text
        (result_set,) = response.json()["response"]["resultSets"] or [None]
        body = response.json()
        assert body["meta"]["returnedGranularity"] == "boolean"
        assert isinstance(body["responseSummary"]["exists"], bool)
        assert result_set is None or result_set["info"]["answeredFrom"] in ("prior", "data")
        assert body["info"]["budgets"]["demo-cohort"]["positivesTotal"] == 5
    finally:
        process.terminate()
        process.wait(timeout=30)


def _server(tmp_path, demo, **settings) -> tuple[BeaconServer, str, str]:
    url = f"sqlite:///{tmp_path}/ledger.sqlite3"
    ledger = Ledger.open(url)
    key, admin = ledger.add_user("alice"), ledger.add_user("ops", role="admin")
    config = write_config(
        tmp_path / "beacon.toml",
        {"store": str(demo.store), "database_url": url, "default_prior": demo.prior, **settings},
        {"c": 1000, "epsilon": 5.0},
    )
    return BeaconServer(config, tmp_path, workers=4), key, admin


def _metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_metrics_are_summed_over_workers_and_logs_hold_no_secrets(tmp_path, demo):
    server, key, admin = _server(tmp_path, demo, rate_limit_per_minute=0)
    with server:
        assert len(server.wait_for_workers()) == 4
        n = 120
        for i in range(n):  # new connections: spread over the workers by the kernel
            response = httpx.get(f"{server.url}/api/methylation",
                                 params={"probeId": "cg00042144", "minValue": round(0.001 * i, 3)},
                                 headers={"Authorization": f"Bearer {key}"})  # fmt: skip
            assert response.status_code == 200
        assert httpx.get(f"{server.url}/metrics").status_code == 401
        text = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {admin}"}).text
        served = _metric(text, "mbeacon_http_requests_total", endpoint="/api/methylation", status="200")
        answers = _metric(text, "mbeacon_answers_total", dataset="demo-cohort")
        log = server.log()
    assert served == n, f"metrics saw {served} of {n} requests: not summed over workers?"
    assert answers == n
    access = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert sum(entry.get("path") == "/api/methylation" for entry in access) == n
    assert len({entry["time"] for entry in access}) > 1
    assert key not in log and admin not in log
    assert not re.search(r"mbk_[0-9a-f]{12}_", log), "an API key reached the log"


def test_redis_rate_limit_holds_across_workers(tmp_path, demo):
    redis = pytest.importorskip("redis")
    try:
        redis.Redis.from_url(REDIS_URL).ping()
    except redis.RedisError as error:
        pytest.fail(f"Redis at {REDIS_URL} is required for this test: {error}")
    limit = 30
    server, key, _ = _server(tmp_path, demo, rate_limit_per_minute=limit, redis_url=REDIS_URL)
    with server:
        for attempt in range(3):
            # Start in a fresh window with time to spare: a retry in the window where the last attempt
            # spilled over would find that attempt's requests already counted.
            time.sleep(60 - time.time() % 60 + 0.05 if time.time() % 60 > 45 or attempt else 0)
            minute = int(time.time() // 60)
            statuses = [
                httpx.get(f"{server.url}/api/info", headers={"Authorization": f"Bearer {key}"}).status_code
                for _ in range(limit + 10)
            ]
            if int(time.time() // 60) == minute:  # all in one window: the count is exact
                break
        other = Ledger.open(f"sqlite:///{tmp_path}/ledger.sqlite3").add_user("bob")
        other_status = httpx.get(f"{server.url}/api/info", headers={"Authorization": f"Bearer {other}"})
    assert statuses.count(200) == limit, statuses
    assert statuses.count(429) == 10
    assert other_status.status_code == 200, "the limit is per key"

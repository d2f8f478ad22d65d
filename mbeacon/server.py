"""Running the app under gunicorn: settings, per-worker hooks, and the in-process master.

This module lives outside :mod:`mbeacon.api` on purpose: importing the app imports
prometheus_client, which decides at import time whether to use multiprocess mode, so the metrics
directory must be set before anything imports the app.

``mbeacon serve`` and ``deploy/gunicorn.conf.py`` both use these settings. What happens where:

* **Master** (``on_starting``): prepares an empty directory for prometheus_client's multiprocess
  metrics (before any worker exists) and validates the configuration, store, priors and ledger
  once (``mbeacon serve`` does it before starting gunicorn, so a bad config is one clear error, not
  a crash loop of workers).
* **Worker** (``post_fork``): the app is built in the worker (``preload_app`` off), so HDF5 files,
  memory maps, database connections and pools, and the Redis client are all opened after the fork,
  lazily, per process id. Noise needs nothing: it is read from the OS CSPRNG on every draw, with no
  generator state that a fork could duplicate (docs/noise.md; a test checks it on a real server).
  Prior evaluation runs single-threaded per worker (workers already use the cores).
* **Worker ready** (``post_worker_init``): what start-up built is frozen out of the garbage
  collector's full collections.
* **Exit** (``child_exit``): a dead worker's metric files are marked so gauges stay correct.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

METRICS_ENV = "PROMETHEUS_MULTIPROC_DIR"


def prepare_metrics_dir() -> str:
    """Set ``PROMETHEUS_MULTIPROC_DIR`` (if unset) to a fresh directory and empty it.

    Must run before prometheus_client is imported in this process, so it runs at import time of
    this module and again (idempotently) in the master's ``on_starting``.
    """
    directory = os.environ.get(METRICS_ENV)
    if not directory:
        directory = tempfile.mkdtemp(prefix="mbeacon-metrics-")
        os.environ[METRICS_ENV] = directory
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    for item in path.glob("*.db"):
        item.unlink()
    return directory


def default_workers() -> int:
    return max(2, min(8, 2 * (os.cpu_count() or 1)))


def on_starting(server: Any) -> None:
    prepare_metrics_dir()


def post_fork(server: Any, worker: Any) -> None:
    from mbeacon.store.priors import model

    model.THREADS = 1


def post_worker_init(worker: Any) -> None:
    """The objects of start-up (modules, the app, the prior's arrays) leave the garbage collector's
    view, so that a full collection, which the allocations of large batches trigger every so often,
    does not walk the many long-lived objects that can never be garbage."""
    import gc

    gc.collect()
    gc.freeze()


def child_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def settings(bind: str = "127.0.0.1:8000", workers: int | None = None, threads: int = 2) -> dict[str, Any]:
    """gunicorn settings (see the module docstring for why each hook exists)."""
    from gunicorn.config import Config

    extra = {}
    if "control_socket_disable" in Config().settings:
        # gunicorn >= 25.1 opens a management socket at one fixed path per user: several beacons on
        # a host would fight over it, and runtime worker management is not something we expose.
        extra["control_socket_disable"] = True
    return {
        **extra,
        "bind": [bind],
        "workers": workers or default_workers(),
        "worker_class": "gthread",
        "threads": threads,
        "timeout": 30,
        "graceful_timeout": 30,
        "keepalive": 5,
        "max_requests": 0,
        "preload_app": False,
        "accesslog": None,  # the app writes its own JSON access log, without credentials
        "errorlog": "-",
        "loglevel": "info",
        "limit_request_line": 8190,
        "limit_request_fields": 100,
        "limit_request_field_size": 8190,
        "on_starting": on_starting,
        "post_fork": post_fork,
        "post_worker_init": post_worker_init,
        "child_exit": child_exit,
    }


def run(
    config_path: str | None,
    options: dict[str, Any],
    app_factory: Callable[[str | None], Any] | None = None,
) -> None:
    """Run the gunicorn master in this process until it is stopped (SIGTERM/SIGINT).

    Each worker builds its app with ``app_factory(config_path)``, :func:`mbeacon.api.create_app` by
    default (the benchmarks serve the same app with one extra route this way).
    """
    from gunicorn.app.base import BaseApplication

    class MBeaconApplication(BaseApplication):
        def load_config(self) -> None:
            for key, value in options.items():
                self.cfg.set(key, value)

        def load(self):
            if app_factory is not None:
                return app_factory(config_path)
            from mbeacon.api import create_app

            return create_app(config_path)

    MBeaconApplication().run()

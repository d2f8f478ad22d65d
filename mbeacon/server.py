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

The workers are :class:`BeaconWorker`, gunicorn's threaded worker with one change: a request that
gunicorn refuses before the app sees it (a request line or headers over the limits, a malformed
request line or header) is answered with the Beacon error body, as JSON, instead of gunicorn's HTML
page, so that a client parses every refusal the same way; and a keep-alive connection whose unread
body turns out malformed after the app has answered is closed, not answered a second time.
"""

from __future__ import annotations

import logging
import os
import ssl
import subprocess
import sys
import tempfile
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path
from typing import Any

from gunicorn import util
from gunicorn.http import errors
from gunicorn.workers.gthread import ThreadWorker

METRICS_ENV = "PROMETHEUS_MULTIPROC_DIR"
WORKER_CLASS = "mbeacon.server.BeaconWorker"
#: The message of a request the server failed on (the same words as the app's own 500).
INTERNAL_ERROR = "internal error; the request was not answered"

log = logging.getLogger("mbeacon.server")


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


def refusal(exc: BaseException, cfg: Any) -> tuple[int, str] | None:
    """The status and message for a request gunicorn could not parse, or None if it is not the
    client's fault.

    The statuses are gunicorn's own. The messages are ours, never gunicorn's text: that quotes what
    it could not parse (a request line, a header line), which may hold an API key.
    """
    from mbeacon.api.bodies import MALFORMED_CHUNKED

    if isinstance(exc, errors.InvalidResponseHeader | errors.InvalidResponseHeaderName):
        return None  # the app's response, not the client's request
    if isinstance(exc, errors.LimitRequestLine):
        return 414, f"request line is longer than {cfg.limit_request_line} bytes (shorten the query string)"
    if isinstance(exc, errors.LimitRequestHeaders):
        if exc.msg == "limit request headers fields":
            return 431, f"too many header fields (at most {cfg.limit_request_fields})"
        return 431, f"a header field is longer than {cfg.limit_request_field_size} bytes"
    if isinstance(exc, errors.InvalidRequestLine | errors.InvalidRequestMethod | errors.InvalidHTTPVersion):
        return 400, "malformed request line: expected 'METHOD /path HTTP/1.1', lines ending in CRLF"
    if isinstance(exc, errors.InvalidHeader | errors.InvalidHeaderName | errors.ObsoleteFolding):
        return 400, "malformed header field: expected 'Name: value', lines ending in CRLF"
    chunked = (errors.InvalidChunkSize, errors.ChunkMissingTerminator, errors.InvalidChunkExtension)
    if isinstance(exc, chunked):  # found while draining a body the app did not read
        return 400, MALFORMED_CHUNKED
    if isinstance(exc, errors.UnsupportedTransferCoding):
        return 501, "unsupported Transfer-Encoding (send the body with Content-Length or chunked)"
    if isinstance(exc, errors.ExpectationFailed):
        return 417, "unsupported Expect header (only 100-continue is)"
    if isinstance(exc, errors.ForbiddenProxyRequest):
        return 403, "request forbidden"
    if isinstance(exc, ssl.SSLError):
        return 403, "TLS error"
    if isinstance(exc, errors.ConfigurationProblem):
        return None
    if isinstance(exc, errors.ParseException):
        return 400, "malformed request"
    return None


def error_page(app: Any, status: int, message: str) -> bytes:
    """A whole HTTP response holding the Beacon error body, as the app's ``responses.error`` builds
    it (the app gives the beacon id and the JSON encoder). The connection is closed after it: where
    the next request would start on it is unknown."""
    from mbeacon.api import responses

    with app.app_context():
        response = responses.error(status, message)
    body = response.get_data()
    head = (
        f"HTTP/1.1 {response.status}\r\nConnection: close\r\nContent-Type: {response.content_type}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


class BeaconWorker(ThreadWorker):
    """gunicorn's threaded worker, answering the requests it refuses itself with the Beacon error
    body instead of an HTML page (see the module docstring)."""

    def handle_request(self, req: Any, conn: Any) -> bool:
        keepalive = super().handle_request(req, conn)
        req.mbeacon_answered = True  # see handle_error
        return keepalive

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        answer = refusal(exc, self.cfg)
        if getattr(req, "mbeacon_answered", False):
            # The app has answered; what failed is reading the rest of a body it did not read (to
            # keep the connection alive). A second response on the connection would be taken as
            # the answer to the client's next request: the connection just closes.
            log.warning("body left unread was malformed; connection closed",
                        extra={"status": answer[0] if answer else 500})  # fmt: skip
            return
        if answer is None:
            # gunicorn's own path logs the traceback; only its page is replaced
            self.log.exception("Error handling request")
            status, message = 500, INTERNAL_ERROR
        else:
            status, message = answer
            # not str(exc): gunicorn's text quotes the unparsed line, which may hold a key
            client_ip = addr[0] if isinstance(addr, tuple) and addr else ""
            log.warning("request refused by the server",
                        extra={"status": status, "error": message, "client": client_ip})  # fmt: skip
        try:
            page = error_page(self.wsgi, status, message)
        except Exception:  # no app to word it (it failed to load): gunicorn's page, with our words
            self.log.exception("cannot build the Beacon error body")
            page = None
        try:
            if page is None:
                util.write_error(client, status, HTTPStatus(status).phrase, message)
            else:
                util.write_nonblock(client, page)
        except Exception:
            self.log.debug("Failed to send error message.")


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
        "worker_class": WORKER_CLASS,
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


def reload_refusal(config_path: str | None) -> str | None:
    """Why the configuration and store a reload would load cannot be served (the last line of
    ``mbeacon config check``), or None when they can. Checked in a child process: the master keeps no
    store, prior or ledger open, and what it imported at start-up is not what the workers will load."""
    command = [sys.executable, "-m", "mbeacon.cli", "config", "check"]
    if config_path:
        command += ["--config", config_path]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=RELOAD_CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"the configuration check did not finish in {RELOAD_CHECK_TIMEOUT_S} s"
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return lines[-1].removeprefix("error: ") if lines else f"the check exited with status {done.returncode}"


#: How long a reload may spend checking the new configuration before it is refused.
RELOAD_CHECK_TIMEOUT_S = 120


def _guarded_arbiter(config_path: str | None) -> type:
    """gunicorn's arbiter, reloading (SIGHUP) only a configuration that passes ``mbeacon config check``:
    gunicorn's own reload starts new workers that fail to boot on a bad configuration, and then stops
    the master, taking the running workers with it."""
    from gunicorn.arbiter import Arbiter

    class GuardedArbiter(Arbiter):
        def handle_hup(self) -> None:
            refusal = reload_refusal(config_path)
            if refusal is not None:
                self.log.error("reload refused, the running workers keep serving: %s", refusal)
                return
            super().handle_hup()

    return GuardedArbiter


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

        def run(self) -> None:
            try:
                _guarded_arbiter(config_path)(self).run()
            except RuntimeError as error:  # gunicorn's own handling of a master that cannot start
                print(f"\nError: {error}\n", file=sys.stderr)
                sys.stderr.flush()
                sys.exit(1)

    MBeaconApplication().run()

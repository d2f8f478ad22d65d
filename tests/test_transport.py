"""Garbage at the HTTP transport level, sent over raw sockets to a real gunicorn server.

Broken chunked framing (a bad chunk size, a missing chunk terminator, a body cut short), a chunked
body over ``max_body_bytes``, and the requests gunicorn refuses before the app sees them (a request
line over the limit, too many headers, a huge header, a malformed request line or header, bare LF
line endings) must each get the Beacon error body: JSON, ``application/json``, valid against the
official ``beaconErrorResponse`` schema, with the right status and a message that says what is
wrong. Sent to the researcher route and to an admin route, none of them may spend, store or write
anything in the ledger, echo a key, log a key or a traceback, or take the server down.

An HTTP client library cannot send most of these (it frames requests correctly), hence raw sockets.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from beacon_schemas import validate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servers import BeaconServer, free_port, write_config

from mbeacon.api.bodies import MALFORMED_CHUNKED, TRUNCATED, too_large
from mbeacon.beacon.ledger import Ledger
from mbeacon.store.demo import ensure_demo

LIMIT = 4096  # max_body_bytes: small, so that bodies over it are cheap to send
PROBE = "cg00042144"  # a probe of the demo cohort
ERROR_SCHEMA = "responses/beaconErrorResponse.json"
RESEARCHER = "/api/methylation"
ADMIN = "/api/admin/users"


# --- the server and raw HTTP ----------------------------------------------------------------------


class Served:
    """The running server, its keys and its ledger file."""

    def __init__(self, server: BeaconServer, key: str, admin: str, ledger: Path) -> None:
        self.server, self.key, self.admin, self.ledger = server, key, admin, ledger

    def key_for(self, path: str) -> str:
        return self.admin if path.startswith("/api/admin/") else self.key


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``mbeacon serve`` (gunicorn, 2 workers x 2 threads) on the demo store with a small body limit."""
    tmp = tmp_path_factory.mktemp("transport")
    demo = ensure_demo(tmp_path_factory.getbasetemp() / "demo-store")
    path = tmp / "ledger.sqlite3"
    ledger = Ledger.open(f"sqlite:///{path}")
    key, admin = ledger.add_user("alice"), ledger.add_user("ops", role="admin")
    ledger.close()
    settings_ = {"store": str(demo.store), "database_url": f"sqlite:///{path}", "default_prior": demo.prior,
                 "rate_limit_per_minute": 0, "max_body_bytes": LIMIT}  # fmt: skip
    config = write_config(tmp / "beacon.toml", settings_, {"c": 1000, "epsilon": 5.0})
    with BeaconServer(config, tmp, workers=2, threads=2) as server:
        yield Served(server, key, admin, path)


def exchange(port: int, data: bytes, *, half_close: bool = False, timeout: float = 10.0) -> bytes:
    """Send ``data`` on a new connection and read until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        if half_close:  # the client is done sending, and still reads the answer
            sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


class Reply:
    """One HTTP/1.1 response parsed from raw bytes; ``rest`` is anything the server sent after it."""

    def __init__(self, raw: bytes) -> None:
        head, sep, after = raw.partition(b"\r\n\r\n")
        assert sep, f"no complete response head in {raw[:300]!r}"
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split(" ")[1])
        self.headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        length = int(self.headers["content-length"])
        self.body, self.rest = after[:length], after[length:]

    def json(self) -> Any:
        return json.loads(self.body)


def chunked_post(path: str, key: str, body: bytes, *, keep_alive: bool = False) -> bytes:
    """A POST with ``Transfer-Encoding: chunked`` whose body is ``body`` verbatim (framing included)."""
    connection = "keep-alive" if keep_alive else "close"
    head = (f"POST {path} HTTP/1.1\r\nHost: beacon\r\nAuthorization: Bearer {key}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            f"Connection: {connection}\r\n\r\n")  # fmt: skip
    return head.encode() + body


def chunks(payload: bytes, size: int = 1000) -> bytes:
    """``payload`` framed correctly as chunks of ``size`` bytes and the last chunk."""
    parts = [payload[i : i + size] for i in range(0, len(payload), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def query(min_value: float = 0.5) -> bytes:
    body = {"meta": {"apiVersion": "v2.0.0"},
            "query": {"requestParameters": {"probeId": PROBE, "minValue": min_value}}}  # fmt: skip
    return json.dumps(body).encode()


def assert_beacon_error(reply: Reply, status: int, message: str, secrets: tuple[str, ...]) -> dict:
    """The Beacon error body: JSON, valid, the status as its code, ``message`` (a regex) and no secret."""
    assert reply.status == status, reply.body[:500]
    assert reply.headers["content-type"] == "application/json"
    data = reply.json()
    validate(data, ERROR_SCHEMA)
    assert data["error"]["errorCode"] == status
    assert re.search(message, data["error"]["errorMessage"]), data["error"]["errorMessage"]
    for secret in secrets:
        assert secret not in reply.body.decode("utf-8"), "a key was echoed"
    return data


def ledger_rows(path: Path) -> dict[str, list[tuple]]:
    """Every row of every table of the SQLite ledger: anything spent, stored or written shows here."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: sorted(map(repr, db.execute(f'SELECT * FROM "{t}"'))) for t in tables}


@pytest.fixture
def unchanged(served: Served) -> Iterator[None]:
    """The test leaves the ledger exactly as it was, the workers alive and the log clean."""
    before, workers = ledger_rows(served.ledger), sorted(served.server.worker_pids())
    yield
    assert httpx.get(served.server.url + "/readyz", timeout=5).status_code == 200
    assert sorted(served.server.worker_pids()) == workers, "a worker died"
    assert ledger_rows(served.ledger) == before
    log = served.server.log()
    assert "Traceback" not in log
    assert served.key not in log and served.admin not in log, "a key reached the log"


# --- chunked bodies the app reads ------------------------------------------------------------------

#: Broken chunked framings: (what, raw body, half-close after sending).
BROKEN_CHUNKED = [
    ("chunk size not hex", b"zz\r\n{}\r\n0\r\n\r\n", False),
    ("chunk size negative", b"-2\r\n{}\r\n0\r\n\r\n", False),
    ("chunk size with spaces inside", b"1 0\r\n{}\r\n0\r\n\r\n", False),
    ("chunk data longer than its size", b"2\r\n{}XX\r\n0\r\n\r\n", False),
    ("chunk terminator missing", b"2\r\n{}0\r\n\r\n", False),
    ("bare LF after chunk size", b"2\n{}\r\n0\r\n\r\n", False),
    ("bad chunk extension", b"2;\x01=x\r\n{}\r\n0\r\n\r\n", False),
]


@pytest.mark.parametrize("path", [RESEARCHER, ADMIN])
@pytest.mark.parametrize(("what", "body", "half_close"), BROKEN_CHUNKED, ids=[c[0] for c in BROKEN_CHUNKED])
def test_broken_chunked_framing_is_a_400(served: Served, unchanged, path: str, what: str, body: bytes,
                                         half_close: bool) -> None:  # fmt: skip
    raw = exchange(served.server.port, chunked_post(path, served.key_for(path), body), half_close=half_close)
    reply = Reply(raw)
    assert_beacon_error(reply, 400, re.escape(MALFORMED_CHUNKED), (served.key, served.admin))
    assert reply.rest == b"", "one request, one response"


@pytest.mark.parametrize("body", [b"10\r\n{}", b"ffffffffffffffffffffff\r\n{}", b"2\r\n{}\r\n"])
@pytest.mark.parametrize("path", [RESEARCHER, ADMIN])
def test_body_cut_short_is_a_400(served: Served, unchanged, path: str, body: bytes) -> None:
    """The client announces more than it sends (or no last chunk) and stops sending: the body
    ended, and the answer says so rather than calling it invalid JSON."""
    raw = exchange(served.server.port, chunked_post(path, served.key_for(path), body), half_close=True)
    assert_beacon_error(Reply(raw), 400, re.escape(TRUNCATED), (served.key, served.admin))


@pytest.mark.parametrize("path", [RESEARCHER, ADMIN])
def test_chunked_body_over_the_limit_is_a_413_worded_like_content_length(served: Served, unchanged,
                                                                          path: str) -> None:  # fmt: skip
    key = served.key_for(path)
    payload = query() + b" " * LIMIT  # valid JSON, over the limit only by its padding
    refusals = []
    for size in (1000, LIMIT, len(payload)):  # the limit falling inside a chunk and on its edge
        reply = Reply(exchange(served.server.port, chunked_post(path, key, chunks(payload, size))))
        refusals.append(assert_beacon_error(reply, 413, re.escape(too_large(LIMIT)), (key,)))
    head = (f"POST {path} HTTP/1.1\r\nHost: beacon\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
            "Connection: close\r\n\r\n")  # fmt: skip
    declared = Reply(exchange(served.server.port, head.encode() + payload))
    refusals.append(assert_beacon_error(declared, 413, re.escape(too_large(LIMIT)), (key,)))
    assert len({r["error"]["errorMessage"] for r in refusals}) == 1


def test_chunked_body_at_the_limit_is_read_whole(served: Served) -> None:
    """Exactly ``max_body_bytes`` is allowed, as with Content-Length: the query is answered."""
    payload = query(0.25)
    payload += b" " * (LIMIT - len(payload))
    assert len(payload) == LIMIT
    reply = Reply(exchange(served.server.port, chunked_post(RESEARCHER, served.key, chunks(payload, 700))))
    assert reply.status == 200, reply.body[:500]
    assert reply.json()["responseSummary"]["exists"] in (True, False)
    over = Reply(exchange(served.server.port, chunked_post(RESEARCHER, served.key, chunks(payload + b" "))))
    assert over.status == 413


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(excess=st.integers(-3, 3), chunk=st.integers(1, 2 * LIMIT), path=st.sampled_from([RESEARCHER, ADMIN]))
def test_the_limit_holds_exactly_whatever_the_chunking(served: Served, unchanged, excess: int, chunk: int,
                                                       path: str) -> None:  # fmt: skip
    """A chunked body is refused 413 exactly when it is longer than ``max_body_bytes``, wherever
    the chunk boundaries fall; at or under the limit it is read whole (and refused as a request
    that names nothing valid, so nothing is spent)."""
    payload = b'{"name": 5, "query": 5}'
    payload += b" " * (LIMIT + excess - len(payload))
    reply = Reply(
        exchange(served.server.port, chunked_post(path, served.key_for(path), chunks(payload, chunk)))
    )
    if excess > 0:
        assert_beacon_error(reply, 413, re.escape(too_large(LIMIT)), (served.key, served.admin))
    else:
        data = assert_beacon_error(reply, 400, ".", (served.key, served.admin))
        assert "JSON" not in data["error"]["errorMessage"], "the body was cut"


def test_unread_broken_body_closes_the_connection_after_one_answer(served: Served, unchanged) -> None:
    """A route that does not read the body answers; the broken rest, found while gunicorn drains it
    to keep the connection alive, must not add a second response that the client would take as the
    answer to its next request."""
    raw = exchange(served.server.port, chunked_post("/api/info", served.key, b"zz\r\n{}\r\n0\r\n\r\n",
                                                    keep_alive=True))  # fmt: skip
    reply = Reply(raw)
    assert reply.status == 405
    assert reply.headers["content-type"] == "application/json"
    assert reply.rest == b""


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    size=st.one_of(
        st.binary(max_size=12), st.text("0123456789abcdefABCDEF; =\t-x", max_size=12).map(str.encode)
    ),
    data=st.binary(max_size=40),
    end=st.sampled_from([b"\r\n", b"\n", b"", b"\r", b"xx"]),
    tail=st.sampled_from([b"0\r\n\r\n", b"0\r\n", b"", b"0\r\nX-Trailer: 1\r\n\r\n"]),
    path=st.sampled_from([RESEARCHER, ADMIN]),
)
def test_any_chunked_framing_gets_a_beacon_answer(served: Served, unchanged, size: bytes, data: bytes,
                                                   end: bytes, tail: bytes, path: str) -> None:  # fmt: skip
    """Whatever the framing, a 4xx Beacon error (never a 5xx, never HTML), and nothing spent."""
    body = size + b"\r\n" + data + end + tail
    raw = exchange(served.server.port, chunked_post(path, served.key_for(path), body), half_close=True)
    reply = Reply(raw)
    assert 400 <= reply.status < 500, reply.body[:500]
    assert_beacon_error(reply, reply.status, ".", (served.key, served.admin))


# --- what gunicorn refuses before the app ---------------------------------------------------------


def _get(target: str, headers: str = "", end: str = "\r\n") -> bytes:
    return f"GET {target} HTTP/1.1{end}Host: beacon{end}{headers}{end}".encode()


_MANY = "".join(f"X-Header-{i}: {i}\r\n" for i in range(150))
#: Requests gunicorn refuses before the app: (what, raw request with KEY for the key, status, message).
REFUSED_BY_SERVER = [
    ("request line too long", _get(f"{RESEARCHER}?probeId={'a' * 9000}"), 414,
     r"request line is longer than 8190"),
    ("too many headers", _get(RESEARCHER, _MANY), 431, r"too many header fields \(at most 100\)"),
    ("huge header", _get(RESEARCHER, f"X-Big: {'a' * 9000}\r\n"), 431, r"header field is longer than 8190"),
    ("huge Authorization header", _get(RESEARCHER, f"Authorization: Bearer KEY{'A' * 9000}\r\n"), 431,
     r"header field is longer"),
    ("request line garbage", b"GARBAGE\r\n\r\n", 400, r"malformed request line"),
    ("request line without version", f"GET {RESEARCHER}\r\n\r\n".encode(), 400, r"malformed request line"),
    ("bad method", f"G@T {RESEARCHER} HTTP/1.1\r\nHost: beacon\r\n\r\n".encode(), 400,
     r"malformed request line"),
    ("bad HTTP version", f"GET {RESEARCHER} HTTP/9.9\r\nHost: beacon\r\n\r\n".encode(), 400,
     r"malformed request line"),
    ("bare LF line endings", _get(RESEARCHER, end="\n"), 400, r"malformed request line.*CRLF"),
    ("header without colon", _get(RESEARCHER, "Bearer KEY\r\n"), 400, r"malformed header field"),
    ("control character in Authorization", _get(RESEARCHER, "Authorization: Bearer KEY\x01\r\n"), 400,
     r"malformed header field"),
    ("obsolete line folding", _get(RESEARCHER, "Authorization: Bearer\r\n KEY\r\n"), 400,
     r"malformed header field"),
    ("admin route, request line too long", _get(f"{ADMIN}?x={'a' * 9000}"), 414, r"request line is longer"),
    ("admin route, header without colon", _get(ADMIN, "Bearer KEY\r\n"), 400, r"malformed header field"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "raw", "status", "message"), REFUSED_BY_SERVER,
                         ids=[c[0] for c in REFUSED_BY_SERVER])  # fmt: skip
def test_server_refusals_are_beacon_errors(served: Served, unchanged, what: str, raw: bytes, status: int,
                                           message: str) -> None:  # fmt: skip
    key = served.admin if ADMIN.encode() in raw else served.key
    reply = Reply(exchange(served.server.port, raw.replace(b"KEY", key.encode())))
    assert_beacon_error(reply, status, message, (served.key, served.admin))
    assert reply.headers["connection"].lower() == "close"
    assert reply.rest == b""


def test_valid_chunked_request_is_answered(served: Served) -> None:
    """The control: correct chunked framing under the limit is an ordinary query (and the ledger
    check of the other tests sees what it records)."""
    before = ledger_rows(served.ledger)
    reply = Reply(exchange(served.server.port, chunked_post(RESEARCHER, served.key, chunks(query(0.75), 7))))
    assert reply.status == 200, reply.body[:500]
    assert reply.headers["content-type"] == "application/json"
    validate(reply.json(), "responses/beaconResultsetsResponse.json")
    assert ledger_rows(served.ledger) != before


# --- the worker class, wherever gunicorn is started from --------------------------------------------

#: gunicorn's parse errors built with a text that holds a key, as a hostile header line would.
_SECRET = "mbk_0123456789ab_" + "S" * 43


def _parse_errors() -> list[BaseException]:
    from gunicorn.http import errors

    return [
        errors.InvalidRequestLine(_SECRET), errors.InvalidRequestMethod(_SECRET),
        errors.InvalidHTTPVersion(_SECRET), errors.InvalidHeader(_SECRET), errors.InvalidHeaderName(_SECRET),
        errors.ObsoleteFolding(_SECRET), errors.LimitRequestLine(len(_SECRET), 10),
        errors.LimitRequestHeaders("limit request headers fields"),
        errors.LimitRequestHeaders("limit request headers fields size"), errors.InvalidChunkSize(_SECRET),
        errors.ChunkMissingTerminator(_SECRET), errors.InvalidChunkExtension(_SECRET),
        errors.UnsupportedTransferCoding(_SECRET), errors.ExpectationFailed(_SECRET),
        errors.InvalidProxyLine(_SECRET), errors.ForbiddenProxyRequest(_SECRET),
        errors.InvalidSchemeHeaders(), errors.InvalidH2CPreface(_SECRET),
    ]  # fmt: skip


@pytest.mark.parametrize("exc", _parse_errors(), ids=lambda e: type(e).__name__)
def test_every_client_error_gets_its_own_words_and_a_4xx_or_501(exc: BaseException) -> None:
    """gunicorn's text quotes what it could not parse; the refusal never does, whatever it holds."""
    from gunicorn.config import Config

    from mbeacon.server import refusal

    answer = refusal(exc, Config())
    assert answer is not None
    status, message = answer
    assert 400 <= status < 500 or status == 501
    assert message and _SECRET not in message and "S" * 10 not in message


def test_server_faults_are_not_called_the_clients() -> None:
    from gunicorn.config import Config
    from gunicorn.http import errors

    from mbeacon.server import refusal

    for exc in (RuntimeError("boom"), errors.InvalidResponseHeader("x"), errors.ConfigurationProblem("x")):
        assert refusal(exc, Config()) is None


def test_serve_demo_and_the_deploy_config_use_the_beacon_worker(tmp_path: Path) -> None:
    """``mbeacon serve`` and ``mbeacon demo`` take ``server.settings``; the deploy config copies it."""
    from gunicorn.config import Config

    from mbeacon import server

    config = Config()
    config.set("worker_class", server.settings()["worker_class"])
    assert config.worker_class is server.BeaconWorker
    deploy = Path(__file__).resolve().parents[1] / "deploy" / "gunicorn.conf.py"
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}  # the config prepares it: not ours
    script = f"import runpy; print(runpy.run_path({str(deploy)!r})['worker_class'])"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == server.WORKER_CLASS


@pytest.mark.slow
def test_deploy_config_answers_refusals_with_beacon_errors(tmp_path: Path, tmp_path_factory) -> None:
    """``gunicorn -c deploy/gunicorn.conf.py``, started as an operator would, answers a request
    line over the limit with the Beacon error body too."""
    demo = ensure_demo(tmp_path_factory.getbasetemp() / "demo-store")
    settings_ = {"store": str(demo.store), "database_url": f"sqlite:///{tmp_path}/ledger.sqlite3",
                 "default_prior": demo.prior}  # fmt: skip
    config = write_config(tmp_path / "beacon.toml", settings_, {"c": 5, "epsilon": 1.0})
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    env.update(MBEACON_CONFIG=str(config), MBEACON_BIND=f"127.0.0.1:{port}", MBEACON_WORKERS="1")
    deploy = Path(__file__).resolve().parents[1] / "deploy" / "gunicorn.conf.py"
    with open(tmp_path / "gunicorn.log", "w") as log:
        command = [sys.executable, "-m", "gunicorn", "-c", str(deploy), "mbeacon.api:create_app()"]
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 60
            while True:
                assert process.poll() is None, (tmp_path / "gunicorn.log").read_text()
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, (tmp_path / "gunicorn.log").read_text()
                time.sleep(0.2)
            reply = Reply(exchange(port, _get(f"{RESEARCHER}?probeId={'a' * 9000}")))
            assert_beacon_error(reply, 414, r"request line is longer than 8190", ())
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
    assert "Using worker: mbeacon.server.BeaconWorker" in (tmp_path / "gunicorn.log").read_text()

"""Real beacon servers for end-to-end tests: ``mbeacon serve`` (gunicorn) in a subprocess.

``BeaconServer`` writes a TOML config, starts the server on a free loopback port, waits for
``/readyz`` and stops it (SIGTERM, then SIGKILL) however the test ends. The server's stderr goes to
a file that is printed when start-up fails.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_config(path: Path, settings: dict[str, Any], defaults: dict[str, Any]) -> Path:
    """A service config with ``defaults`` as its ``[defaults]`` table. The real-server tests check
    per-holder budgets (c positives per user) unless they name a mechanism, so a table without one
    is served by ``svt2`` here (the service's own default is ``cohort-pmw``)."""
    lines = [f"{k} = {toml_value(v)}" for k, v in settings.items()]
    lines.append("[defaults]")
    lines += [f"{k} = {toml_value(v)}" for k, v in {"mechanism": "svt2", **defaults}.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


class BeaconServer:
    """One ``mbeacon serve`` process (a gunicorn master and its workers)."""

    def __init__(self, config: Path, workdir: Path, *, workers: int = 4, threads: int = 2,
                 env: dict[str, str] | None = None) -> None:  # fmt: skip
        self.config = config
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"server-{self.port}.log"
        self.workers = workers
        self.threads = threads
        self.env = env or {}
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> BeaconServer:
        env = {**os.environ, **self.env}
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # each server makes its own
        command = [sys.executable, "-m", "mbeacon.cli", "serve", "--config", str(self.config),
                   "--bind", f"127.0.0.1:{self.port}", "--workers", str(self.workers),
                   "--threads", str(self.threads)]  # fmt: skip
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1.0).status_code == 200:
                    self.wait_for_workers(max(1.0, deadline - time.monotonic()))
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"server not ready within {timeout} s:\n{self.log()}")

    def wait_for_workers(self, timeout: float = 60.0) -> list[int]:
        """The worker pids once all of them have booted (/readyz answers as soon as one has)."""
        deadline = time.monotonic() + timeout
        while len(pids := self.worker_pids()) < self.workers:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(pids)} of {self.workers} workers booted:\n{self.log()}")
            time.sleep(0.2)
        return pids

    def worker_pids(self) -> list[int]:
        assert self.process is not None
        out = subprocess.run(["pgrep", "-P", str(self.process.pid)], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._log.close()
        self.process = None

    def __enter__(self) -> BeaconServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

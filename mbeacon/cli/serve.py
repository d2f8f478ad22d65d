"""``mbeacon serve`` and ``mbeacon demo``: the beacon under gunicorn, on a configured or a demo store."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import click

from mbeacon.cli._service import config_option, load_service_config, open_ledger
from mbeacon.cli._ui import fail
from mbeacon.cli.lazy_group import HELP_OPTIONS


def _validate_for_serving(config_path: Path | None) -> None:
    """The checks of `mbeacon config check` (creating nothing), then the ledger created or migrated and
    written to once in the master: a bad config, store or ledger is one clear error, not a crash loop
    of workers. The store is checked once here; each worker checks it again as it builds its app."""
    from mbeacon.beacon.ledger import Ledger, LedgerUnavailable
    from mbeacon.cli.config import NotServable, check_service

    try:
        config = check_service(config_path).config
        ledger = Ledger.open(config.database_url, sqlite_sync=config.sqlite_sync)
        try:
            ledger.db.ping()  # and writable: a read-only or full ledger could answer nothing
        finally:
            ledger.close()
    except (NotServable, LedgerUnavailable, RuntimeError, ValueError, OSError) as err:
        fail(f"cannot serve: {err}")  # RuntimeError: a ledger newer than this MBeacon


@click.command(context_settings=HELP_OPTIONS)
@config_option
@click.option(
    "--bind", default=None, help="HOST:PORT to listen on. [default: $MBEACON_BIND or 127.0.0.1:8000]"
)
@click.option("--workers", type=click.IntRange(min=1), default=None, help="gunicorn worker processes.")
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Threads per worker (1 lets a silent client stall a worker; more compete for the GIL).",
)
def serve(config_path: Path | None, bind: str | None, workers: int | None, threads: int) -> None:
    """Serve the beacon under gunicorn (the master runs in this process; stop with Ctrl-C/SIGTERM)."""
    from mbeacon import server

    bind = bind or os.environ.get("MBEACON_BIND", "127.0.0.1:8000")
    _check_bind_free(bind)
    server.prepare_metrics_dir()
    if config_path:
        os.environ["MBEACON_CONFIG"] = str(config_path.resolve())
    _validate_for_serving(config_path)
    workers = workers or (int(os.environ["MBEACON_WORKERS"]) if os.environ.get("MBEACON_WORKERS") else None)
    server.run(str(config_path.resolve()) if config_path else None, server.settings(bind, workers, threads))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _bind_error(host: str, port: int) -> OSError | None:
    """Why ``host:port`` cannot be bound now as gunicorn will bind it (``SO_REUSEADDR``, so a port left
    in TIME_WAIT by a stopped server counts as free), or None when it can."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except OSError as error:
        return error
    with socket.socket(family) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as error:
            return error
    return None


def _check_bind_free(bind: str) -> None:
    """A one-line error when ``--bind`` names a TCP address that is taken (a second ``serve``), before
    gunicorn starts: gunicorn would log five errors and retry for seconds before giving up."""
    from gunicorn.util import parse_address

    try:
        address = parse_address(bind)
    except RuntimeError as error:
        fail(f"--bind {bind}: {error}")
    if not isinstance(address, tuple):  # a unix socket or file descriptor: gunicorn's own checks
        return
    host, port = address
    error = _bind_error(host.strip("[]") or "0.0.0.0", port)
    if error is not None:
        fail(
            f"cannot serve on {bind}: {error.strerror or error} "
            "(is a beacon already running there? stop it, or pass another --bind HOST:PORT)"
        )


def _check_port_free(port: int) -> None:
    """A one-line error unless 127.0.0.1:``port`` can be bound now. Checked before the demo touches
    its ledger: giving the user ``demo`` a new key for a server that then cannot start would break the
    demo already running on that port."""
    error = _bind_error("127.0.0.1", port)
    if error is not None:
        fail(
            f"cannot serve the demo on 127.0.0.1:{port}: {error.strerror or error} "
            "(is a demo already running there? stop it, or pick another --port; 0 takes any free one)"
        )


DEMO_CONFIG = """\
# Written by `mbeacon demo`: the demo beacon's configuration (edit freely; it is kept).
beacon_id = "org.mbeacon.demo"
beacon_name = "MBeacon demo"
environment = "dev"
store = "{store}"
database_url = "sqlite:///{ledger}"
default_prior = "{prior}"
anonymous = "refuse"
rate_limit_per_minute = 6000

[defaults]
# one privacy budget for the cohort's patients, whoever asks: 10 positives in all, 5 per user at most
mechanism = "cohort-pmw"
epsilon = 1.0
c = 10
quota = 5
threshold = 1
scope = "user"
on_exhausted = "prior"
tier = "REGISTERED"
"""


@click.command(context_settings=HELP_OPTIONS)
@click.option("--port", type=click.IntRange(min=0, max=65535), default=5050, show_default=True,
              help="Port on 127.0.0.1 (0: any free port).")  # fmt: skip
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("data/demo"),
    show_default=True,
    help="Where the demo store, prior, config and ledger live (built on first use).",
)
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True)
def demo(port: int, data_dir: Path, workers: int) -> None:
    """Serve a demo beacon on a simulated cohort, with a demo user; prints its url and key.

    Builds the demo store and prior if absent (a few seconds), writes DATA_DIR/mbeacon.toml if
    absent, gives the user `demo` a fresh key, and serves on 127.0.0.1 with the SQLite ledger.
    """
    from mbeacon import server
    from mbeacon.beacon.errors import AlreadyExists
    from mbeacon.store.demo import ensure_demo

    port = port or _free_port()
    _check_port_free(port)
    server.prepare_metrics_dir()
    data_dir = data_dir.resolve()
    click.echo(f"preparing the demo data in {data_dir} ...", err=True)
    built = ensure_demo(data_dir)
    config_path = data_dir / "mbeacon.toml"
    if not config_path.exists():
        config_path.write_text(
            DEMO_CONFIG.format(store=built.store, ledger=data_dir / "ledger.sqlite3", prior=built.prior)
        )
    os.environ["MBEACON_CONFIG"] = str(config_path)
    config = load_service_config(config_path)
    ledger = open_ledger(config)
    try:
        key = ledger.add_user("demo", tier="REGISTERED", actor="mbeacon demo")
    except AlreadyExists:
        key = ledger.rotate_key("demo", actor="mbeacon demo")
    ledger.close()
    _validate_for_serving(config_path)
    base = f"http://127.0.0.1:{port}/api"
    probe = "cg00231192"  # a probe of the demo cohort, methylated around 0.6
    click.echo(f"url: {base}")
    click.echo(f"key: {key}")
    query = f"{base}/methylation?probeId={probe}&minValue=0.6&includeResultsetResponses=ALL"
    click.echo(f"try:  curl -H 'Authorization: Bearer {key}' '{query}'", err=True)
    click.echo(f"docs: {base}/docs   (config: {config_path}; stop with Ctrl-C)", err=True)
    sys.stdout.flush()
    server.run(str(config_path), server.settings(f"127.0.0.1:{port}", workers))


@click.command(context_settings=HELP_OPTIONS)
@config_option
@click.option("--pid", "pid", type=click.IntRange(min=1), default=None,
              help="The process id of the beacon's master (systemd: $MAINPID).")  # fmt: skip
@click.option("--pidfile", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="A file holding that process id (gunicorn's --pid).")  # fmt: skip
def reload(config_path: Path | None, pid: int | None, pidfile: Path | None) -> None:
    """Reload a running beacon's configuration and priors, after checking that they can be served.

    Runs `mbeacon config check` on the configuration; only when it passes is the master sent SIGHUP
    (new workers start, the old ones finish their requests). When it fails, nothing is signalled, the
    running workers keep serving, and the exit status is 2 with the reason. The master runs the same
    check again when it gets the signal, so a plain `kill -HUP` is guarded too.
    """
    import signal

    from mbeacon.cli.config import NotServable, check_service

    if (pid is None) == (pidfile is None):
        fail("name the beacon's master: --pid PID or --pidfile FILE")
    if pidfile is not None:
        try:
            pid = int(pidfile.read_text().strip())
        except ValueError:
            fail(f"{pidfile}: does not hold a process id")
    assert pid is not None
    _check_is_beacon(pid)
    try:
        checked = check_service(config_path)
    except NotServable as error:
        fail(f"reload refused, the running beacon is unchanged: {error}")
    try:
        os.kill(pid, signal.SIGHUP)
    except ProcessLookupError:
        fail(f"no process {pid}: is the beacon running?")
    except PermissionError:
        fail(f"not allowed to signal process {pid} (run as the beacon's user)")
    count = len(checked.plans)
    click.echo(f"reload requested: {count} dataset{'' if count == 1 else 's'} will be served (pid {pid})")


def _check_is_beacon(pid: int) -> None:
    """Refuse to signal a process that is not a beacon's master (a stale pid file names anything)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except FileNotFoundError:
        fail(f"no process {pid}: is the beacon running?")
    except OSError:
        return  # no /proc to read: the signal's own errors will say
    if "mbeacon" not in command and "gunicorn" not in command:
        fail(f"process {pid} is not a beacon ({command.strip()[:80]!r}): check --pid / --pidfile")

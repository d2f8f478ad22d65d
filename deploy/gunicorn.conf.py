"""gunicorn configuration for MBeacon, e.g.

    gunicorn -c deploy/gunicorn.conf.py 'mbeacon.api:create_app()'

Equivalent to ``mbeacon serve`` (which uses the same settings from ``mbeacon.server``). The app
reads its own configuration from ``$MBEACON_CONFIG`` and ``MBEACON_*``; override the server settings
with ``MBEACON_BIND``, ``MBEACON_WORKERS`` and ``MBEACON_THREADS``. Why each hook exists (metrics
across workers, opening HDF5, database pools and Redis after the fork, the noise source) is
explained in ``mbeacon/server.py``.
"""

import os

from mbeacon import server

server.prepare_metrics_dir()  # before any worker imports prometheus_client

_settings = server.settings(
    bind=os.environ.get("MBEACON_BIND", "127.0.0.1:8000"),
    workers=int(os.environ["MBEACON_WORKERS"]) if os.environ.get("MBEACON_WORKERS") else None,
    threads=int(os.environ.get("MBEACON_THREADS", "2")),
)
bind = _settings["bind"]
workers = _settings["workers"]
worker_class = _settings["worker_class"]
threads = _settings["threads"]
timeout = _settings["timeout"]
graceful_timeout = _settings["graceful_timeout"]
keepalive = _settings["keepalive"]
preload_app = _settings["preload_app"]
accesslog = _settings["accesslog"]
errorlog = _settings["errorlog"]
loglevel = _settings["loglevel"]
limit_request_line = _settings["limit_request_line"]
limit_request_fields = _settings["limit_request_fields"]
limit_request_field_size = _settings["limit_request_field_size"]
if "control_socket_disable" in _settings:
    control_socket_disable = True
on_starting = server.on_starting
post_fork = server.post_fork
child_exit = server.child_exit

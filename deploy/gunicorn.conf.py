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

# gunicorn reads its settings as this module's globals: the same settings and hooks as `mbeacon serve`.
globals().update(
    server.settings(
        bind=os.environ.get("MBEACON_BIND", "127.0.0.1:8000"),
        workers=int(os.environ["MBEACON_WORKERS"]) if os.environ.get("MBEACON_WORKERS") else None,
        threads=int(os.environ.get("MBEACON_THREADS", "2")),
    )
)

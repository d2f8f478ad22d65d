# MBeacon service image: gunicorn serving the Beacon v2 API on port 8000.
#
#   docker build -t mbeacon .
#   docker run --rm -p 127.0.0.1:8000:8000 -v /srv/mbeacon/store:/data/store:ro -v mbeacon-ledger:/var/lib/mbeacon mbeacon
#   docker run --rm -v mbeacon-ledger:/var/lib/mbeacon mbeacon users add alice --tier REGISTERED
#   (any subcommand works the same way: ingest, prior, db, audit, ...)
#
# deploy/compose.yaml runs it with PostgreSQL and Redis; deploy/README.md is the deployment guide.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN groupadd --gid 10001 mbeacon \
    && useradd --create-home --uid 10001 --gid 10001 --shell /usr/sbin/nologin mbeacon \
    && mkdir -p /data/store /var/lib/mbeacon \
    && chown mbeacon:mbeacon /data/store /var/lib/mbeacon \
    && chmod 0750 /var/lib/mbeacon

WORKDIR /app
COPY pyproject.toml README.md ./
COPY mbeacon ./mbeacon
COPY deploy/gunicorn.conf.py ./deploy/
# The extras a deployment uses: a PostgreSQL ledger and a Redis rate limit (compose.yaml runs both).
RUN pip install '.[postgres,redis]' && rm -rf /root/.cache

# /data/store: the HDF5 store, mounted read-only by the server (written only by `mbeacon ingest` / `prior`).
# /var/lib/mbeacon: the SQLite ledger of privacy budgets. It must outlive the container and be backed
# up: a lost ledger resets every budget. Not used when MBEACON_DATABASE_URL points at PostgreSQL.
VOLUME ["/data/store", "/var/lib/mbeacon"]

# The numba kernels are compiled with cache=True; site-packages is not writable by the service user,
# so the cache goes under /tmp (a tmpfs when the container runs with a read-only root file system).
# PROMETHEUS_MULTIPROC_DIR is left unset: the gunicorn configuration creates a fresh one under /tmp.
ENV MBEACON_STORE=/data/store \
    MBEACON_DATABASE_URL=sqlite:////var/lib/mbeacon/ledger.sqlite3 \
    MBEACON_BIND=0.0.0.0:8000 \
    NUMBA_CACHE_DIR=/tmp/numba-cache

USER 10001:10001
EXPOSE 8000

# Liveness only (the process answers); readiness (store and ledger reachable) is GET /readyz.
# urllib, because the slim image has no curl; the empty ProxyHandler ignores any *_proxy variables.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as u; port = os.environ.get('MBEACON_BIND', '0.0.0.0:8000').rsplit(':', 1)[-1]; u.build_opener(u.ProxyHandler({})).open(f'http://127.0.0.1:{port}/livez', timeout=4)"]

ENTRYPOINT ["mbeacon"]
CMD ["serve"]

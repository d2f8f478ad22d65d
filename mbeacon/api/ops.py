"""Operations endpoints: liveness, readiness and Prometheus metrics (outside the Beacon API)."""

from __future__ import annotations

import logging

from flask import Blueprint, Response, jsonify

from mbeacon.api import metrics
from mbeacon.api.auth import require_admin
from mbeacon.api.runtime import runtime

bp = Blueprint("ops", __name__)
log = logging.getLogger("mbeacon.ops")


@bp.get("/livez")
def livez():
    return jsonify({"status": "ok"})


@bp.get("/readyz")
def readyz():
    """200 when the store and the ledger answer; 503 (with the failing part named) otherwise."""
    rt = runtime()
    checks = {}
    try:
        rt.engine.dataset_ids()
        checks["store"] = "ok"
    except Exception as error:  # any failure means not ready; the reason goes to the log
        log.warning("readiness: store unavailable", extra={"error": str(error)})
        checks["store"] = "unavailable"
    try:
        rt.ledger.db.ping()
        checks["ledger"] = "ok"
    except Exception as error:
        log.warning("readiness: ledger unavailable", extra={"error": str(error)})
        checks["ledger"] = "unavailable"
    ready = all(v == "ok" for v in checks.values())
    response = jsonify({"status": "ready" if ready else "not ready", "checks": checks})
    response.status_code = 200 if ready else 503
    return response


@bp.get("/metrics")
def prometheus():
    if not runtime().config.metrics_public:
        require_admin()
    body, content_type = metrics.exposition()
    return Response(body, content_type=content_type)

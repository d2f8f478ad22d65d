"""Operations endpoints: liveness, readiness and Prometheus metrics (outside the Beacon API)."""

from __future__ import annotations

import logging

from flask import Blueprint, Response, jsonify

from mbeacon.api import metrics
from mbeacon.api.auth import authenticated_user, require_admin
from mbeacon.api.runtime import runtime

bp = Blueprint("ops", __name__)
log = logging.getLogger("mbeacon.ops")


@bp.get("/livez")
def livez():
    return jsonify({"status": "ok"})


@bp.get("/readyz")
def readyz():
    """200 when the store and the ledger answer and the ledger can take writes (an SQLite ledger's file
    system is neither read-only nor full); 503, with the failing part named, otherwise."""
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
    """Prometheus text, for admin keys; with ``metrics_public``, for anyone, but then without the
    series of datasets above the PUBLIC tier (their ids are not public)."""
    rt = runtime()
    if not rt.config.metrics_public:
        require_admin()
        hidden: frozenset[str] = frozenset()
    else:
        user = authenticated_user()
        admin = user is not None and user.role == "admin"
        hidden = frozenset(
            () if admin else (d for d in rt.engine.dataset_ids() if rt.config.policy(d).tier != "PUBLIC")
        )
    body, content_type = metrics.exposition(hidden)
    return Response(body, content_type=content_type)

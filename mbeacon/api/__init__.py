"""The Flask application: ``create_app(config=None)`` builds the Beacon v2 service.

``config`` may be a :class:`~mbeacon.beacon.config.ServiceConfig`, a mapping of overrides, a path to
a TOML file, or None (``$MBEACON_CONFIG`` and the ``MBEACON_*`` environment). Everything that holds a
file handle, a connection or a socket is opened lazily in the process that uses it, so the app can be
created before gunicorn forks its workers.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flask import Flask, g, request
from gunicorn.http.errors import ParseException
from werkzeug.exceptions import HTTPException
from werkzeug.middleware.proxy_fix import ProxyFix

from mbeacon.api import admin, docs, framework, logs, methylation, metrics, ops, responses
from mbeacon.api.auth import AuthError, authenticated_user
from mbeacon.api.bodies import MALFORMED_CHUNKED
from mbeacon.api.jsonprovider import OrjsonProvider
from mbeacon.api.oidc import Verifier
from mbeacon.api.ratelimit import RateLimiter
from mbeacon.api.runtime import Runtime
from mbeacon.beacon.answers import BudgetExhausted, DatasetUnavailable
from mbeacon.beacon.config import ServiceConfig, load_config
from mbeacon.beacon.engine import AnswerEngine
from mbeacon.beacon.errors import AlreadyExists, InvalidRequest, OperationError, UnknownTarget
from mbeacon.beacon.ledger import Ledger, LedgerUnavailable
from mbeacon.beacon.preflight import store_problems
from mbeacon.beacon.query import QueryError
from mbeacon.beacon.sanitisers import sanitiser_of

log = logging.getLogger("mbeacon.api")
access_log = logging.getLogger("mbeacon.access")


def _resolve(config: ServiceConfig | Mapping[str, Any] | str | Path | None) -> ServiceConfig:
    if isinstance(config, ServiceConfig):
        return config
    if isinstance(config, str | Path):
        return load_config(config)
    return load_config(None, overrides=config)


def create_app(config: ServiceConfig | Mapping[str, Any] | str | Path | None = None) -> Flask:
    settings = _resolve(config)
    logs.configure()
    # the store is checked before the ledger is created or migrated: a configuration that cannot
    # serve leaves nothing behind (no ledger file, no directory)
    ledger = Ledger.open(settings.database_url, sqlite_sync=settings.sqlite_sync, migrate=False)
    engine = AnswerEngine(settings, ledger)
    try:
        engine.check()
        ledger.migrate()
    except BaseException:
        ledger.close()
        raise
    for problem in store_problems(engine):  # refused by `mbeacon serve` and `reload`; a worker serves on
        log.error("configuration problem: %s", problem)
    for dataset in engine.dataset_ids():
        if not sanitiser_of(settings.policy(dataset)).spends_budget:
            log.warning(
                "dataset %s is served UNPROTECTED (mechanism = none): raw answers, no privacy budget. "
                "Use only for evaluations.",
                dataset,
            )
    app = Flask(__name__, static_folder=None)  # no static files: no route that serves the package folder
    limiter = RateLimiter(settings.rate_limit_per_minute, settings.redis_url)
    verifier = Verifier(settings.oidc) if settings.oidc is not None else None
    app.config["MBEACON"] = Runtime(settings, ledger, engine, limiter, verifier)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.json = OrjsonProvider(app)  # responses encoded by orjson; request bodies still by json.loads
    app.json.sort_keys = False
    if settings.trusted_proxies:
        hops = settings.trusted_proxies  # ProxyFix reads X-Forwarded-For from the right: no spoofing
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops, x_host=hops)
    app.register_blueprint(framework.bp, url_prefix="/api")
    app.register_blueprint(methylation.bp, url_prefix="/api")
    app.register_blueprint(docs.bp, url_prefix="/api")
    app.register_blueprint(docs.icon_bp)
    app.register_blueprint(admin.bp, url_prefix="/api/admin")
    app.register_blueprint(ops.bp)
    _install_hooks(app)
    _install_error_handlers(app)
    return app


def _rate_identity() -> str:
    """Count a valid key's requests per key; everything else (no key, a bad key) per client IP.

    A key id is not secret, so counting unverified keys by id would let anyone use up another
    user's allowance with a wrong secret.
    """
    try:
        user = authenticated_user()
    except AuthError:
        user = None
    return f"user:{user.name}" if user is not None else f"ip:{request.remote_addr}"


def _install_hooks(app: Flask) -> None:
    @app.before_request
    def start() -> Any:
        g.started = time.perf_counter()
        g.request_id = request.headers.get("X-Request-ID", "")[:64] or uuid.uuid4().hex
        limiter = app.config["MBEACON"].limiter
        if request.path.startswith("/api/") and limiter.per_minute > 0:
            allowed, retry_after = limiter.hit(_rate_identity())
            if not allowed:
                metrics.REFUSALS.labels("rate_limit").inc()
                return responses.error(
                    429, "rate limit exceeded; retry later", headers={"Retry-After": str(retry_after)}
                )
        return None

    @app.after_request
    def finish(response):
        endpoint = request.url_rule.rule if request.url_rule is not None else "unmatched"
        elapsed = time.perf_counter() - g.get("started", time.perf_counter())
        metrics.REQUESTS.labels(request.method, endpoint, str(response.status_code)).inc()
        metrics.LATENCY.labels(endpoint).observe(elapsed)
        response.headers["X-Request-ID"] = g.get("request_id", "")
        user = g.get("mbeacon_user")
        access_log.info(
            "request",
            extra={
                "method": request.method,
                "path": request.path,
                "status": response.status_code,
                "duration_ms": round(elapsed * 1000, 3),
                "user": user.name if user else None,
                "client": request.remote_addr,
                "request_id": g.get("request_id"),
            },
        )
        return response


#: The HTTP status of each kind of failed operator request.
OPERATION_STATUS: dict[type[OperationError], int] = {
    InvalidRequest: 400,
    UnknownTarget: 404,
    AlreadyExists: 409,
}


def _install_error_handlers(app: Flask) -> None:
    @app.errorhandler(AuthError)
    def auth_error(error: AuthError):
        metrics.REFUSALS.labels("unauthorized" if error.status == 401 else "forbidden").inc()
        headers = {"WWW-Authenticate": 'Bearer realm="mbeacon"'} if error.status == 401 else None
        return responses.error(error.status, error.message, headers=headers)

    @app.errorhandler(QueryError)
    def query_error(error: QueryError):
        status = 403 if isinstance(error, DatasetUnavailable) else 400
        return responses.error(status, str(error))

    @app.errorhandler(BudgetExhausted)
    def exhausted(error: BudgetExhausted):
        metrics.REFUSALS.labels("budget_exhausted").inc()
        return responses.error(429, str(error), info={"dataset": error.dataset, **error.budget})

    @app.errorhandler(LedgerUnavailable)
    def ledger_down(error: LedgerUnavailable):
        log.error("ledger unavailable; request refused", extra={"error": str(error)})
        metrics.REFUSALS.labels("ledger_unavailable").inc()
        return responses.error(
            503, "the privacy ledger is unavailable; retry later", headers={"Retry-After": "5"}
        )

    @app.errorhandler(OperationError)
    def operation_error(error: OperationError):
        return responses.error(OPERATION_STATUS.get(type(error), 400), str(error))

    @app.errorhandler(ParseException)
    def malformed_body(error: ParseException):
        # gunicorn parses a chunked body only as the app reads it: broken framing is the client's
        # fault wherever it is read (bodies.read_json_body words it the same way)
        return responses.error(400, MALFORMED_CHUNKED)

    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException):
        kept = {k: v for k, v in error.get_headers() if k.lower() not in ("content-type", "content-length")}
        return responses.error(error.code or 500, error.description or error.name, headers=kept)

    @app.errorhandler(Exception)
    def unexpected(error: Exception):
        log.exception("unhandled error", extra={"request_id": g.get("request_id")})
        return responses.error(500, "internal error; the request was not answered")

"""What one app instance holds: configuration, ledger, answer engine, rate limiter and the verifier
of OIDC tokens (when the configuration names issuers)."""

from __future__ import annotations

from dataclasses import dataclass

from flask import current_app

from mbeacon.api.oidc import Verifier
from mbeacon.api.ratelimit import RateLimiter
from mbeacon.beacon.config import ServiceConfig
from mbeacon.beacon.engine import AnswerEngine
from mbeacon.beacon.ledger import Ledger


@dataclass
class Runtime:
    config: ServiceConfig
    ledger: Ledger
    engine: AnswerEngine
    limiter: RateLimiter
    oidc: Verifier | None = None


def runtime() -> Runtime:
    return current_app.config["MBEACON"]

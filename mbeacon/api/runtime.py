"""What one app instance holds: configuration, ledger, answer engine and rate limiter."""

from __future__ import annotations

from dataclasses import dataclass

from flask import current_app

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


def runtime() -> Runtime:
    return current_app.config["MBEACON"]

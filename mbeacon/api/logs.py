"""JSON logs: one object per line on stderr, for log shippers.

Secrets never reach a log: request logs carry the user name, never the Authorization header or a
key, and nothing here formats SVT² state (``SVT2State.__repr__`` hides the thresholds anyway). As a
last line of defence the formatter also masks anything shaped like an API key's secret or a
password in a database URL, wherever it occurs in a record (an exception text, a library's message).

Each line carries ``pid``, the worker process that wrote it: with several gunicorn workers that is
how an operator (or a test) tells which worker served a request.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}
# mbk_<key id>_<secret>: the key id is not secret and stays readable; the 43-character secret goes
_API_KEY = re.compile(r"(mbk_[0-9a-f]{12}_)[A-Za-z0-9_-]{43}")
_URL_PASSWORD = re.compile(r"(://[^/\s:@\"']+:)[^@\s\"']+@")


def redact(text: str) -> str:
    """``text`` with API key secrets and URL passwords replaced by ``<redacted>``."""
    if "mbk_" in text:
        text = _API_KEY.sub(r"\1<redacted>", text)
    if "://" in text:
        text = _URL_PASSWORD.sub(r"\1<redacted>@", text)
    return text


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        entry.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return redact(json.dumps(entry, default=str))


def configure(level: str = "INFO") -> None:
    """Send the ``mbeacon`` loggers to stderr as JSON (idempotent)."""
    logger = logging.getLogger("mbeacon")
    if any(getattr(h, "_mbeacon_json", False) for h in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler._mbeacon_json = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False

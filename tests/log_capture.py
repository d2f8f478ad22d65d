"""Capture the service's JSON log lines in a test (the ``mbeacon`` loggers do not propagate, so
pytest's caplog cannot see them)."""

from __future__ import annotations

import io
import logging

from mbeacon.api.logs import JsonFormatter


def capture_logs() -> logging.StreamHandler:
    """Attach a JSON handler writing to a StringIO (``handler.stream``); remove it when done."""
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(JsonFormatter())
    handler.setLevel(logging.DEBUG)
    logging.getLogger("mbeacon").addHandler(handler)
    return handler

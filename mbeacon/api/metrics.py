"""Prometheus metrics, correct across gunicorn workers.

With several workers each process keeps its own counters; prometheus_client's multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR``, set by ``mbeacon serve``/the gunicorn config before any worker
starts) writes them to memory-mapped files that ``/metrics`` sums. Without it (tests, a single
process) the default registry is used.
"""

from __future__ import annotations

import os

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

REQUESTS = Counter("mbeacon_http_requests", "HTTP requests answered", ["method", "endpoint", "status"])
LATENCY = Histogram(
    "mbeacon_http_request_duration_seconds",
    "Time to answer an HTTP request",
    ["endpoint"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
)
ANSWERS = Counter("mbeacon_answers", "Query answers released", ["dataset", "answered_from"])
POSITIVES = Counter("mbeacon_positives_spent", "SVT² positives (data answers) spent", ["dataset"])
REFUSALS = Counter("mbeacon_refusals", "Requests refused", ["reason"])


def exposition() -> tuple[bytes, str]:
    """The metrics page: summed over worker processes in multiprocess mode."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST

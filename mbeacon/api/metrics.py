"""Prometheus metrics, correct across gunicorn workers.

With several workers each process keeps its own counters; prometheus_client's multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR``, set by ``mbeacon serve``/the gunicorn config before any worker
starts) writes them to memory-mapped files that ``/metrics`` sums. Without it (tests, a single
process) the default registry is used.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

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


@functools.cache
def answers(dataset: str, answered_from: str) -> Any:
    """:data:`ANSWERS` of one dataset and source, kept: ``labels()`` takes a lock and rebuilds the
    label tuple on every call, a visible part of a single query's cost (the series are few: datasets
    x three sources)."""
    return ANSWERS.labels(dataset, answered_from)


@functools.cache
def positives(dataset: str) -> Any:
    """:data:`POSITIVES` of one dataset, kept (as :func:`answers`)."""
    return POSITIVES.labels(dataset)


class _WithoutDatasets:
    """A registry view that leaves out the samples labelled with one of ``hidden`` datasets."""

    def __init__(self, registry: Any, hidden: frozenset[str]) -> None:
        self.registry = registry
        self.hidden = hidden

    def collect(self) -> Iterator[Any]:
        for metric in self.registry.collect():  # fresh objects on every call: safe to trim
            metric.samples = [s for s in metric.samples if s.labels.get("dataset") not in self.hidden]
            yield metric


def exposition(hidden_datasets: frozenset[str] = frozenset()) -> tuple[bytes, str]:
    """The metrics page: summed over worker processes in multiprocess mode, without the series of
    ``hidden_datasets`` (a page served to anyone must not name a dataset above the PUBLIC tier)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    view = _WithoutDatasets(registry, hidden_datasets) if hidden_datasets else registry
    return generate_latest(view), CONTENT_TYPE_LATEST

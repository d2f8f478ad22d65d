"""pydantic's validation errors as the one-line ``field: message`` texts every interface shows.

Requests, admin bodies, service configurations, evaluation configurations and CLI options are all
validated by pydantic models; each interface words its refusal the same way, naming the offending field
by the path the caller wrote, so the rule lives here once.
"""

from __future__ import annotations

from pydantic import ValidationError


def problems(
    error: ValidationError, *, prefix: str = "", whole: str = "", limit: int | None = None
) -> list[str]:
    """``path: message`` for each of the first ``limit`` errors.

    ``prefix`` is put before every path (``query.requestParameters``); ``whole`` names an error that
    concerns the whole object (no field path). pydantic's "Value error, " preamble is left out: it says
    nothing to the reader.
    """
    texts = []
    for item in error.errors()[:limit]:
        path = ".".join(str(part) for part in item["loc"])
        where = f"{prefix}.{path}" if prefix and path else (prefix or path or whole)
        message = item["msg"].removeprefix("Value error, ")
        texts.append(f"{where}: {message}" if where else message)
    return texts


def describe(error: ValidationError, *, prefix: str = "", whole: str = "", limit: int | None = 5) -> str:
    """The errors of :func:`problems` joined on one line (``; ``)."""
    return "; ".join(problems(error, prefix=prefix, whole=whole, limit=limit))

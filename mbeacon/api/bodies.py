"""Reading a request's JSON body, with the refusals every route words the same way.

A body that is not sent as JSON, is not valid JSON or is nested deeper than the decoder's stack is a
``QueryError`` (400, its message safe to show); so is a chunked body whose framing is broken (a bad
chunk size, a missing terminator, a body cut short), which the WSGI server only notices while the
app reads it. A body over ``max_body_bytes`` is a 413 that says the limit (werkzeug's own text does
not), whether it came with a ``Content-Length`` or chunked.
"""

from __future__ import annotations

from typing import Any

from flask import request
from gunicorn.http.errors import ParseException
from werkzeug.exceptions import BadRequest, ClientDisconnected, RequestEntityTooLarge

from mbeacon.beacon.query import QueryError

_REFUSED = object()

#: The refusal of a body whose chunked framing is broken (also used by the server for a body it
#: finds broken itself, so both places word it the same way).
MALFORMED_CHUNKED = "request body is malformed: its chunked transfer encoding is invalid"
#: The refusal of a body that ended before its declared length or final chunk.
TRUNCATED = "request body ended before it was complete"


def too_large(limit: int | None) -> str:
    """The refusal of a body over ``max_body_bytes``."""
    return f"request body is larger than {limit} bytes (max_body_bytes)"


def _body() -> bytes:
    """The whole body, refusing a chunked one over the limit.

    werkzeug stops reading a body without ``Content-Length`` at ``max_content_length`` and hands
    back the first ``limit`` bytes as if that were all, so one byte more is read from the server's
    stream: if there is one, the body was over the limit, not merely cut.
    """
    data = request.get_data(cache=True)
    limit = request.max_content_length
    unbounded = limit is not None and request.content_length is None and len(data) >= limit
    if unbounded and request.environ["wsgi.input"].read(1):
        raise RequestEntityTooLarge()
    return data


def read_json_body(what: str = "the body", *, empty: Any = _REFUSED) -> Any:
    """The request's body, decoded from JSON (any JSON value, ``null`` included).

    ``what`` names the body in the refusal of one not sent as JSON. ``empty`` is what an empty body
    stands for, whatever its content type (a route whose body is optional); by default an empty body
    is refused like any other that is not JSON.
    """
    try:
        if empty is not _REFUSED and not _body():
            return empty
        if not request.is_json:
            raise QueryError(f"send {what} as JSON (Content-Type: application/json)")
        _body()
        return request.get_json()
    except RequestEntityTooLarge:
        raise RequestEntityTooLarge(too_large(request.max_content_length)) from None
    except ParseException:  # gunicorn's chunked-body errors, raised from the stream as it is read
        raise QueryError(MALFORMED_CHUNKED) from None
    except ClientDisconnected:
        raise QueryError(TRUNCATED) from None
    except BadRequest:
        raise QueryError("request body is not valid JSON") from None
    except RecursionError:  # the JSON decoder's stack, not a server fault
        raise QueryError("request body is nested too deeply") from None

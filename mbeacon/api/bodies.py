"""Reading a request's JSON body, with the refusals every route words the same way.

A body that is not sent as JSON, is not valid JSON or is nested deeper than the decoder's stack is a
``QueryError`` (400, its message safe to show); a body over ``max_body_bytes`` is a 413 that says the
limit (werkzeug's own text does not).
"""

from __future__ import annotations

from typing import Any

from flask import request
from werkzeug.exceptions import BadRequest, RequestEntityTooLarge

from mbeacon.beacon.query import QueryError

_REFUSED = object()


def read_json_body(what: str = "the body", *, empty: Any = _REFUSED) -> Any:
    """The request's body, decoded from JSON (any JSON value, ``null`` included).

    ``what`` names the body in the refusal of one not sent as JSON. ``empty`` is what an empty body
    stands for, whatever its content type (a route whose body is optional); by default an empty body
    is refused like any other that is not JSON.
    """
    try:
        if empty is not _REFUSED and not request.get_data():
            return empty
        if not request.is_json:
            raise QueryError(f"send {what} as JSON (Content-Type: application/json)")
        return request.get_json()
    except RequestEntityTooLarge:
        limit = request.max_content_length
        raise RequestEntityTooLarge(f"request body is larger than {limit} bytes (max_body_bytes)") from None
    except BadRequest:
        raise QueryError("request body is not valid JSON") from None
    except RecursionError:  # the JSON decoder's stack, not a server fault
        raise QueryError("request body is nested too deeply") from None

"""Cross-origin access for browser clients (Beacon Network UIs): the ``cors_origins`` setting.

A few lines on the response instead of flask-cors: the policy is small and fixed (the origins of one
setting, no credentials, the researcher API only), and a dependency would bring options that could
widen it by accident. With no origins configured (the default) no CORS header is ever sent, so
browsers keep other sites' pages from reading answers.

* Only ``/api/`` outside ``/api/admin/``: admin keys are never meant to be used from a web page.
* No ``Access-Control-Allow-Credentials``: callers authenticate with a bearer key their own script
  sends (listed in ``Access-Control-Allow-Headers``), never with cookies, so another site's page
  cannot borrow a key the browser holds.
* A preflight (``OPTIONS`` with ``Access-Control-Request-Method``) is answered by Flask's automatic
  ``OPTIONS`` response, to which the allowed methods, headers and a cache lifetime are added.
"""

from __future__ import annotations

from flask import request
from flask.wrappers import Response

from mbeacon.api.runtime import runtime

#: Request headers a browser client may send.
ALLOWED_HEADERS = "Authorization, Content-Type, X-Request-ID"
#: Response headers a browser client may read besides the CORS-safelisted ones.
EXPOSED_HEADERS = "X-Request-ID, Retry-After, WWW-Authenticate"
#: How long a browser may reuse a preflight's answer, in seconds.
PREFLIGHT_MAX_AGE = "600"


def _applies(path: str) -> bool:
    return path.startswith("/api/") and not path.startswith("/api/admin/")


def add_cors_headers(response: Response) -> Response:
    """The CORS headers of ``response`` for the request's ``Origin``, when that origin is allowed."""
    allowed = runtime().config.cors_origins
    origin = request.headers.get("Origin")
    if not allowed or origin is None or not _applies(request.path):
        return response
    if "*" in allowed:
        response.headers["Access-Control-Allow-Origin"] = "*"
    elif origin.lower() in allowed:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.vary.add("Origin")  # the answer depends on the origin: caches must keep them apart
    else:
        response.vary.add("Origin")
        return response
    if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
        response.headers["Access-Control-Allow-Methods"] = response.headers.get("Allow", "GET, POST")
        response.headers["Access-Control-Allow-Headers"] = ALLOWED_HEADERS
        response.headers["Access-Control-Max-Age"] = PREFLIGHT_MAX_AGE
    else:
        response.headers["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
    return response

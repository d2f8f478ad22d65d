"""``read_json_body``: each way a JSON request body can be unreadable is refused with its own message,
and a route whose body is optional reads an empty one as its ``empty`` value."""

from __future__ import annotations

import pytest
from flask import Flask, jsonify

from mbeacon.api.bodies import read_json_body
from mbeacon.beacon.query import QueryError

LIMIT = 512 * 1024  # the 100,000-deep body fits under it


@pytest.fixture(scope="module")
def client():
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = LIMIT

    @app.post("/required")
    def required():
        return jsonify({"body": read_json_body("the Beacon request body")})

    @app.post("/optional")
    def optional():
        return jsonify({"body": read_json_body(empty={})})

    @app.errorhandler(QueryError)
    def refused(error: QueryError):
        return jsonify({"error": str(error)}), 400

    return app.test_client()


def _json(text: str) -> dict:
    return {"data": text, "content_type": "application/json"}


@pytest.mark.parametrize(
    ("path", "request_args", "status", "answer"),
    [
        ("/required", _json('{"a": [1, null]}'), 200, {"body": {"a": [1, None]}}),
        ("/required", _json("null"), 200, {"body": None}),
        ("/optional", {}, 200, {"body": {}}),
        ("/optional", {"data": "", "content_type": "text/plain"}, 200, {"body": {}}),
        ("/optional", _json('{"confirm": true}'), 200, {"body": {"confirm": True}}),
        (
            "/required",
            {"data": "{}", "content_type": "text/plain"},
            400,
            {"error": "send the Beacon request body as JSON (Content-Type: application/json)"},
        ),
        (
            "/optional",
            {"data": "{}", "content_type": "text/plain"},
            400,
            {"error": "send the body as JSON (Content-Type: application/json)"},
        ),
        (
            "/required",
            {},
            400,
            {"error": "send the Beacon request body as JSON (Content-Type: application/json)"},
        ),
        ("/required", _json(""), 400, {"error": "request body is not valid JSON"}),
        ("/optional", _json("{name"), 400, {"error": "request body is not valid JSON"}),
        (
            "/required",
            _json("[" * 100_000 + "]" * 100_000),
            400,
            {"error": "request body is nested too deeply"},
        ),
    ],
)
def test_bodies_are_read_or_refused_clearly(client, path, request_args, status, answer) -> None:
    response = client.post(path, **request_args)
    assert response.status_code == status
    assert response.get_json() == answer


@pytest.mark.parametrize("path", ["/required", "/optional"])
def test_a_body_over_the_limit_says_the_limit(client, path) -> None:
    response = client.post(path, **_json("[" + "0," * LIMIT + "0]"))
    assert response.status_code == 413
    assert f"larger than {LIMIT} bytes (max_body_bytes)" in response.get_data(as_text=True)

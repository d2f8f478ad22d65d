"""The app's JSON provider (``mbeacon.api.jsonprovider``): orjson's output means what ``json``'s meant.

Responses are encoded by orjson; these tests hold it to the standard library: the same values, types
and key order once parsed back, the same bytes as Flask's default provider wherever orjson declines,
the Beacon error body when nothing can encode a value, and request bodies still decoded by ``json``.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import json
import math
import uuid
from typing import Any

import numpy as np
import pytest
from flask import Flask, jsonify
from flask.json.provider import DefaultJSONProvider
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mbeacon.api.jsonprovider import OrjsonProvider
from mbeacon.store.demo import DEMO_DATASET

EXTRA_PROBES = 20
POLICY = {"c": 5, "epsilon": 1.0}
DATASETS = {DEMO_DATASET: {**POLICY}}

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


_APP = Flask(__name__)  # providers keep a weak reference to their app: this one lives with the module


def providers() -> tuple[OrjsonProvider, DefaultJSONProvider]:
    """Ours and Flask's default, configured as the app configures its provider (no key sorting)."""
    ours, default = OrjsonProvider(_APP), DefaultJSONProvider(_APP)
    ours.sort_keys = default.sort_keys = False
    return ours, default


@pytest.fixture
def pair() -> tuple[OrjsonProvider, DefaultJSONProvider]:
    return providers()


def typed(value: Any) -> Any:
    """``value`` with every float as its repr and every container tagged with its type and, for
    dicts, its keys in order: equal only if the JSON means exactly the same (``1 != 1.0``, ``-0.0 !=
    0.0``, ``{"a", "b"}`` in another order is another document)."""
    if isinstance(value, dict):
        return ("dict", [(k, typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [typed(v) for v in value])
    if isinstance(value, float):
        return ("float", repr(value))
    return (type(value).__name__, value)


texts = st.text(max_size=12) | st.sampled_from(
    ["é", "日本語", "😀", "a\u2028b", "\x00\x1f\x7f", '"\\/', "\U0010ffff"]
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
documents = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(texts, children, max_size=5),
    max_leaves=40,
)


@FAST
@given(documents)
def test_output_parses_back_to_what_json_dumps_gives(value) -> None:
    ours, default = providers()
    text = ours.dumps(value)
    assert typed(json.loads(text)) == typed(json.loads(default.dumps(value))) == typed(value)
    body = ours.response(value).get_data()
    assert body.endswith(b"\n")
    assert typed(json.loads(body.decode("utf-8"))) == typed(value)


@FAST
@given(st.lists(st.tuples(texts, scalars), max_size=12, unique_by=lambda kv: kv[0]))
def test_key_order_is_the_insertion_order(items) -> None:
    ours, _ = providers()
    value = dict(items)
    assert list(json.loads(ours.dumps(value))) == list(value)
    assert list(json.loads(ours.response(value).get_data())) == list(value)


def test_sort_keys_is_honoured(pair) -> None:
    ours, default = pair
    ours.sort_keys = default.sort_keys = True
    value = {"b": 1, "a": {"d": 2, "c": 3}}
    assert ours.dumps(value) == default.dumps(value, separators=(",", ":")) == '{"a":{"c":3,"d":2},"b":1}'


def test_compact_utf8_with_a_final_newline(pair) -> None:
    ours, default = pair
    value = {
        "errorMessage": "not a dataset id: 'café-😀'",
        "range": [0.25, 1.0],
        "n": 3,
        "ok": True,
        "x": None,
    }
    response = ours.response(value)
    assert response.mimetype == "application/json"
    assert (
        response.get_data()
        == (
            '{"errorMessage":"not a dataset id: \'café-😀\'","range":[0.25,1.0],"n":3,"ok":true,"x":null}\n'
        ).encode()
    )
    assert response.content_length == len(response.get_data())
    assert json.loads(response.get_data()) == json.loads(default.response(value).get_data())


def test_indented_in_debug_mode_as_flask_does(pair) -> None:
    ours, _ = pair
    ours.compact = False
    assert ours.response({"a": [1]}).get_data() == b'{\n  "a": [\n    1\n  ]\n}\n'


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, np.float64("nan")])
def test_non_finite_floats_are_written_as_null(pair, value: float) -> None:
    """json.dumps would write NaN/Infinity, which is not JSON; no response carries one (bounds and
    budget parameters are validated finite), but if one did, the document would stay valid JSON."""
    ours, _ = pair
    assert ours.dumps({"x": value}) == '{"x":null}'
    assert ours.response([value]).get_data() == b"[null]\n"


@pytest.mark.parametrize(
    "value",
    [
        {1: "int key", None: "null key", 2.5: "float key"},
        {True: "bool key"},
        {"big": 2**64, "small": -(2**63) - 1},
        {"lone surrogate": "cg\ud800"},
        {"deep": json.loads("[" * 300 + "]" * 300)},
        {
            "when": datetime.datetime(2026, 11, 21, 12, 0, tzinfo=datetime.UTC),
            "day": datetime.date(2026, 1, 2),
        },
        {"id": uuid.UUID(int=7), "amount": decimal.Decimal("1.10")},
        {"tuple": (1, "a"), "numpy float": np.float64(0.125), "float subclass": type("F", (float,), {})(0.5)},
    ],
    ids=[
        "non-string keys",
        "bool key",
        "integers beyond 64 bits",
        "lone surrogate",
        "deep",
        "dates",
        "uuid",
        "subclasses",
    ],
)
def test_what_orjson_declines_or_formats_otherwise_is_written_as_flask_wrote_it(pair, value) -> None:
    ours, default = pair
    assert json.loads(ours.dumps(value)) == json.loads(default.dumps(value))
    assert json.loads(ours.response(value).get_data()) == json.loads(default.response(value).get_data())


def test_dataclasses_go_through_flasks_default(pair) -> None:
    @dataclasses.dataclass
    class Point:
        x: int
        label: str

    ours, default = pair
    assert ours.dumps({"p": Point(1, "é")}) == '{"p":{"x":1,"label":"é"}}'
    assert json.loads(default.dumps({"p": Point(1, "é")})) == {"p": {"x": 1, "label": "é"}}


def test_keyword_arguments_are_json_dumps_arguments(pair) -> None:
    ours, default = pair
    value = {"b": [1, 2], "é": 1}
    assert ours.dumps(value, indent=1) == default.dumps(value, indent=1)
    assert ours.dumps(value, ensure_ascii=True) == default.dumps(value, ensure_ascii=True)


@pytest.mark.parametrize("value", [{1, 2}, {"x": object()}, {"x": [b"bytes"]}, {("a", "b"): 1}])
def test_what_nothing_encodes_is_a_type_error(pair, value) -> None:
    ours, _ = pair
    with pytest.raises(TypeError):
        ours.dumps(value)
    with pytest.raises(TypeError):
        ours.response(value)


def test_loads_is_the_standard_librarys(pair) -> None:
    """orjson's decoder refuses NaN, Infinity and 1e999 and reads big integers as floats; ours does not."""
    ours, _ = pair
    assert math.isnan(ours.loads('{"v": NaN}')["v"])
    assert ours.loads(b'{"v": [Infinity, -Infinity, 1e999]}')["v"] == [math.inf, -math.inf, math.inf]
    assert ours.loads("18446744073709551616") == 2**64
    assert ours.loads('{"a": 1}'.encode("utf-16")) == {"a": 1}
    with pytest.raises(RecursionError):
        ours.loads("[" * 100_000 + "]" * 100_000)


# --- in the app ----------------------------------------------------------------------------------


def test_the_app_uses_the_provider_without_sorting(app) -> None:
    assert isinstance(app.json, OrjsonProvider)
    assert app.json.sort_keys is False


def test_responses_keep_their_key_order_and_non_ascii_text(app) -> None:
    ledger = app.config["MBEACON"].ledger
    key = ledger.add_user("alice", tier="REGISTERED")
    probe = app.config["MBEACON"].engine.cohort(DEMO_DATASET).probe_ids[0]
    client = app.test_client()
    response = client.post(
        "/api/methylation",
        json={"query": {"requestParameters": [{"probeId": str(probe), "datasetIds": ["dé"]}]}},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 400
    document = json.loads(response.get_data().decode("utf-8"))
    assert list(document) == ["meta", "error"]
    assert (
        document["error"]["errorMessage"] == "query.requestParameters[0].datasetIds: not a dataset id: 'dé'"
    )
    response = client.post(
        "/api/methylation",
        json={
            "query": {
                "requestParameters": [{"probeId": str(probe), "minValue": 0.25}, {"probeId": str(probe)}],
                "includeResultsetResponses": "ALL",
            }
        },
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 200, response.get_data()
    document = json.loads(response.get_data())
    assert list(document) == ["meta", "responseSummary", "response", "info"]
    first = document["response"]["resultSets"][0]
    assert list(first) == ["id", "setType", "exists", "resultsCount", "countPrecision", "results", "info"]
    assert list(first["info"])[:4] == ["answeredFrom", "cached", "probeId", "range"]
    assert list(first["info"])[-1] == "queryIndex"
    assert first["info"]["range"] == [0.25, 1.0]


def test_a_value_nothing_can_encode_is_the_beacon_error_body(make_app) -> None:
    app = make_app()
    app.add_url_rule("/api/unencodable", "unencodable", lambda: jsonify({"x": {1, 2}}))
    response = app.test_client().get("/api/unencodable")
    assert response.status_code == 500
    document = response.get_json()
    assert document["error"] == {
        "errorCode": 500,
        "errorMessage": "internal error; the request was not answered",
    }
    assert list(document) == ["meta", "error"]

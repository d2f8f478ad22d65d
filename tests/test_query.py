"""Property tests of the methylation query parsers (``mbeacon.beacon.query``).

Whatever a caller sends, the parsers either return validated queries or raise ``QueryError`` (a 400
with a message that is safe to show): never another exception, which would be a 500.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mbeacon.beacon.query import (
    PROBE_PATTERN,
    QueryError,
    RequestParameters,
    canonical_bound,
    parse_args,
    parse_body,
)

FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GET_NAMES = set(RequestParameters.model_fields) | {
    "requestedGranularity",
    "includeResultsetResponses",
    "apiVersion",
    "testMode",
}

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=30,
)
# values that look like what a caller would send, so that the parser's inner layers are reached
field_names = st.sampled_from([*sorted(GET_NAMES), "datasetIds", "start", "filters", "meta", "query"])
plausible = (
    json_values
    | st.floats(min_value=-0.5, max_value=1.5)
    | st.from_regex(PROBE_PATTERN, fullmatch=True)
    | st.sampled_from(["chr1", "X", "chrM", "boolean", "count", "record", "HIT", "NONE", "v2.0.0", "a,b,,c"])
    | st.lists(st.integers(min_value=-5, max_value=2**32), max_size=3)
)
parameters = st.dictionaries(field_names, plausible, max_size=6)
bodies = st.fixed_dictionaries(
    {},
    optional={
        "meta": st.dictionaries(
            st.sampled_from(["apiVersion", "requestedSchemas", "x"]), plausible, max_size=3
        )
        | json_values,
        "query": st.fixed_dictionaries(
            {},
            optional={
                "requestParameters": parameters | st.lists(parameters, max_size=4) | json_values,
                "requestedGranularity": plausible,
                "includeResultsetResponses": plausible,
                "testMode": plausible,
            },
        )
        | json_values,
    },
)
probes = st.from_regex(PROBE_PATTERN, fullmatch=True)
unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


def body(params) -> dict:
    return {"meta": {"apiVersion": "v2.0.0"}, "query": {"requestParameters": params}}


@FAST
@given(json_values)
def test_any_json_value_parses_or_raises_query_error(value) -> None:
    try:
        parse_body(value, max_batch=10)
    except QueryError as error:
        assert str(error)


@FAST
@given(bodies)
def test_any_body_shaped_value_parses_or_raises_query_error(value) -> None:
    try:
        parsed = parse_body(value, max_batch=3)
    except QueryError as error:
        assert str(error)
        return
    assert 1 <= len(parsed.queries) <= 3
    for q in parsed.queries:
        assert 0.0 <= q.lo <= q.hi <= 1.0
        assert math.isfinite(q.lo) and math.isfinite(q.hi)
        assert (q.probe is None) != (q.chromosome is None)


def test_deeply_nested_body_is_a_query_error() -> None:
    deep: object = {}
    for _ in range(5000):
        deep = [deep]
    for value in (deep, {"query": {"requestParameters": deep}}, {"query": {"requestParameters": [deep]}}):
        with pytest.raises(QueryError):
            parse_body(value, max_batch=10)


@FAST
@given(probe=probes, lo=st.none() | unit, hi=st.none() | unit)
def test_valid_parameters_round_trip(probe: str, lo: float | None, hi: float | None) -> None:
    params = {"probeId": probe}
    if lo is not None:
        params["minValue"] = lo
    if hi is not None:
        params["maxValue"] = hi
    if lo is not None and hi is not None and canonical_bound(lo) > canonical_bound(hi):
        with pytest.raises(QueryError, match="greater than maxValue"):
            parse_body(body(params), max_batch=1)
        return
    (q,) = parse_body(body(params), max_batch=1).queries
    assert q.probe == probe and q.chromosome is None and q.datasets is None
    assert q.lo == (0.0 if lo is None else canonical_bound(lo))  # maxValue only: [0, v]
    assert q.hi == (1.0 if hi is None else canonical_bound(hi))  # minValue only: [v, 1]
    # GET: the same names, values as text
    (from_get,) = parse_args({k: repr(v) if isinstance(v, float) else v for k, v in params.items()}).queries
    assert from_get == q
    # the description of a query parses back to the same query
    (again,) = parse_body(body(q.describe()), max_batch=1).queries
    assert (again.probe, again.lo, again.hi) == (q.probe, q.lo, q.hi)


@settings(FAST, max_examples=40)
@given(
    st.lists(st.tuples(probes, unit, unit), min_size=1, max_size=8),
    st.sampled_from(["ALL", "HIT", "MISS", "NONE"]),
    st.sampled_from(["boolean", "count", "record"]),
)
def test_batches_keep_their_order(items, include: str, granularity: str) -> None:
    params = [{"probeId": p, "minValue": min(a, b), "maxValue": max(a, b)} for p, a, b in items]
    value = body(params)
    value["query"].update(includeResultsetResponses=include, requestedGranularity=granularity)
    parsed = parse_body(value, max_batch=8)
    assert parsed.batch and (parsed.include, parsed.granularity) == (include, granularity)
    assert [(q.probe, q.lo, q.hi) for q in parsed.queries] == [
        (p["probeId"], canonical_bound(p["minValue"]), canonical_bound(p["maxValue"])) for p in params
    ]
    if len(params) > 1:
        with pytest.raises(QueryError, match="at most"):
            parse_body(value, max_batch=len(params) - 1)


@FAST
@given(st.lists(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True), min_size=1, max_size=5))
def test_dataset_ids_from_get_and_post_agree(ids: list[str]) -> None:
    from_post = parse_body(body({"probeId": "cg00000029", "datasetIds": ids}), max_batch=1).queries[0]
    from_get = parse_args({"probeId": "cg00000029", "datasetIds": ",".join(ids)}).queries[0]
    assert from_post.datasets == from_get.datasets == tuple(sorted(set(ids)))


@FAST
@given(st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=6))
def test_any_get_arguments_parse_or_raise_query_error(args: dict[str, str]) -> None:
    try:
        parse_args(args)
    except QueryError as error:
        assert str(error)


@FAST
@given(name=st.text(min_size=1, max_size=20).filter(lambda n: n not in GET_NAMES), value=st.text(max_size=10))
def test_get_refuses_unknown_names(name: str, value: str) -> None:
    with pytest.raises(QueryError, match="unknown query parameter"):
        parse_args({"probeId": "cg00000029", "minValue": "0.5", name: value})


@pytest.mark.parametrize("text", ["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e999", "-1e999"])
@pytest.mark.parametrize("name", ["minValue", "maxValue"])
def test_get_refuses_non_finite_numbers(name: str, text: str) -> None:
    with pytest.raises(QueryError, match=name):
        parse_args({"probeId": "cg00000029", name: text})


@FAST
@given(name=st.sampled_from(["minValue", "maxValue"]), value=st.floats(allow_nan=True, allow_infinity=True))
def test_post_refuses_non_finite_and_out_of_range_numbers(name: str, value: float) -> None:
    if math.isfinite(value) and 0.0 <= value <= 1.0:
        parse_body(body({"probeId": "cg00000029", name: value}), max_batch=1)
        return
    with pytest.raises(QueryError, match=name):
        parse_body(body({"probeId": "cg00000029", name: value}), max_batch=1)


def test_position_queries() -> None:
    (q,) = parse_args({"referenceName": "chr7", "start": "1234", "maxValue": "0.25"}).queries
    assert (q.probe, q.chromosome, q.start, q.lo, q.hi) == (None, "chr7", 1234, 0.0, 0.25)
    (q,) = parse_body(body({"referenceName": "X", "start": [99]}), max_batch=1).queries
    assert (q.chromosome, q.start) == ("X", 99)
    for bad in (
        {"referenceName": "chr7"},
        {"start": 5},
        {"probeId": "cg00000029", "referenceName": "chr1", "start": 5},
        {"referenceName": "chr1", "start": [1, 2]},
        {"referenceName": "chr1", "start": -1},
        {"referenceName": "chr99x", "start": 1},
        {},
    ):
        with pytest.raises(QueryError):
            parse_body(body(bad), max_batch=1)

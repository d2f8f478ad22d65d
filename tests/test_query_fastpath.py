"""The batch items' fast path (``query._plain``) agrees with the pydantic model it stands in for.

``parse_body`` takes each item through ``_plain`` first and through ``RequestParameters`` only when
``_plain`` declines. So ``_plain`` must accept nothing the model refuses, must return for what it
accepts exactly the query the model's path returns, and every refusal (its message, the item's index
in it) must stay the model's.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from mbeacon.beacon import query as query_module
from mbeacon.beacon.query import (
    MethylationQuery,
    QueryError,
    RequestParameters,
    parse_args,
    parse_body,
)
from mbeacon.beacon.wire import DATASET_PATTERN, MAX_DATASET_IDS, MAX_START, PROBE_PATTERN, REFERENCE_PATTERN

FAST = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])

valid_probes = st.from_regex(PROBE_PATTERN, fullmatch=True)
valid_datasets = st.from_regex(DATASET_PATTERN, fullmatch=True)
valid_chromosomes = st.from_regex(REFERENCE_PATTERN, fullmatch=True)
valid_starts = st.integers(0, MAX_START)


def _insert(parts: tuple[str, str, int]) -> str:
    text, char, at = parts
    return text[:at] + char + text[at:]


def near_misses(valid: st.SearchStrategy[str], samples: list[str]) -> st.SearchStrategy[str]:
    """Texts one step from the pattern: a newline or a space added, a character changed, hand-picked
    ones; Python's ``re`` and pydantic's regex engine differ on a final newline (``$``)."""
    return st.one_of(
        st.sampled_from(samples),
        valid.map(lambda s: s + "\n"),
        valid.map(lambda s: "\n" + s),
        valid.map(lambda s: s + " "),
        st.tuples(valid, st.characters(), st.integers(0, 70)).map(_insert),
        st.text(max_size=8),
    )


probe_misses = near_misses(
    valid_probes, ["", "cg 1", "-cg1", "_x", "cg1\x00", "c" * 64, "c" * 65, "١٢٣", "ｃｇ1", "cg\ud800", "é"]
)
chromosome_misses = near_misses(
    valid_chromosomes, ["chr", "chr100", "chr123", "CHR1", "chrx", "chrMTT", "chrXY", "000", "٣", "chr0\n"]
)
dataset_misses = near_misses(valid_datasets, ["", "-a", ".a", "a b", "a" * 64, "a" * 65, "a/b", "é"])
numbers = st.one_of(
    st.floats(min_value=0.0, max_value=1.0),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 2, -1, 0.0, -0.0, 1.0, 1.0000000000000002, 5e-324, -5e-324, 10**400, True, False]),
)
FIELD_MISSES = {
    "probeId": probe_misses | valid_chromosomes | st.integers(0, 5) | st.just(["cg1"]),
    "referenceName": chromosome_misses | valid_probes | st.integers(0, 5) | st.just(["chr1"]),
    "start": st.one_of(
        st.integers(min_value=-3, max_value=MAX_START + 4),
        st.sampled_from([MAX_START, MAX_START + 1, -1, True, False, 1.0, "12", 2**64]),
        st.lists(st.integers(min_value=-2, max_value=MAX_START + 1) | st.booleans(), max_size=3),
    ),
    "minValue": numbers,
    "maxValue": numbers,
    "datasetIds": st.one_of(
        st.lists(valid_datasets | dataset_misses | st.integers(0, 3) | st.none(), min_size=1, max_size=4),
        st.sampled_from(
            [
                [],
                ["a"] * MAX_DATASET_IDS,
                ["a"] * (MAX_DATASET_IDS + 1),
                ["b", "a", "b"],
                "abc",
                ("a",),
                {"a": 1},
            ]
        ),
    ),
}


@st.composite
def items(draw) -> object:
    """Valid queries, half of them with a field or two changed to a near miss; dicts of the model's
    fields with wrong values and unknown keys; or no dict at all."""
    kind = draw(st.integers(0, 20))
    if kind == 0:
        return draw(st.sampled_from([None, [], "cg00000029", 3, [{"probeId": "cg00000029"}]]))
    if kind <= 15:
        lo, hi = sorted(draw(st.lists(st.floats(0.0, 1.0), min_size=2, max_size=2)))
        item: dict = (
            {"probeId": draw(valid_probes)}
            if draw(st.booleans())
            else {"referenceName": draw(valid_chromosomes),
                  "start": draw(valid_starts | st.lists(valid_starts, min_size=1, max_size=1))}
        )  # fmt: skip
        optional = {"minValue": lo, "maxValue": hi, "datasetIds": draw(st.lists(valid_datasets, max_size=3))}
        for name in draw(st.lists(st.sampled_from(list(optional)), unique=True)):
            item[name] = optional[name]
        if draw(st.booleans()):  # one field changed, most often one the query has
            name = draw(st.sampled_from([*item, *item, *FIELD_MISSES, "extra"]))
            item[name] = draw(st.none() | FIELD_MISSES.get(name, st.integers()))
        return item
    names = draw(st.lists(st.sampled_from([*FIELD_MISSES, "extra", "filters"]), unique=True, max_size=6))
    return {name: None if draw(st.integers(0, 8)) == 0 else draw(FIELD_MISSES.get(name, st.integers()))
            for name in names}  # fmt: skip


def by_model(raw: object) -> MethylationQuery | None:
    try:
        return MethylationQuery.from_parameters(RequestParameters.model_validate(raw))
    except ValidationError:
        return None


def same_query(a: MethylationQuery, b: MethylationQuery) -> bool:
    """Equal field by field, with the floats' signs and types too (``-0.0 == 0.0`` is not enough)."""
    return typed(a) == typed(b)


def typed(q: MethylationQuery) -> list[tuple[type, str]]:
    return [(type(v), repr(v)) for v in dataclasses.astuple(q)]


@settings(FAST, max_examples=2500)  # cheap examples; near misses of one field are a small share of them
@given(items())
def test_fast_path_accepts_only_what_the_model_accepts_and_returns_the_same(raw: object) -> None:
    fast = query_module._plain(raw)
    if fast is None:
        return
    model = by_model(raw)
    assert model is not None, f"the fast path accepted what the model refuses: {raw!r}"
    assert same_query(fast, model)


@pytest.mark.parametrize(
    "raw",
    [
        {"probeId": "cg1\n"},
        {"probeId": "\ncg1"},
        {"probeId": "c" * 65},
        {"probeId": "١٢٣"},
        {"probeId": "cg1", "start": None, "referenceName": "chr1"},
        {"referenceName": "chr1\n", "start": 1},
        {"referenceName": "chr100", "start": 1},
        {"referenceName": "chrx", "start": 1},
        {"referenceName": "chr1", "start": MAX_START + 1},
        {"referenceName": "chr1", "start": True},
        {"referenceName": "chr1", "start": [1, 2]},
        {"referenceName": "chr1", "start": [True]},
        {"referenceName": "chr1", "start": 1.0},
        {"probeId": "cg1", "datasetIds": ["a\n"]},
        {"probeId": "cg1", "datasetIds": ["-a"]},
        {"probeId": "cg1", "datasetIds": [""]},
        {"probeId": "cg1", "datasetIds": ["a" * 65]},
        {"probeId": "cg1", "datasetIds": ["a"] * (MAX_DATASET_IDS + 1)},
        {"probeId": "cg1", "datasetIds": "a"},
        {"probeId": "cg1", "minValue": True},
        {"probeId": "cg1", "minValue": math.nan},
        {"probeId": "cg1", "maxValue": math.inf},
        {"probeId": "cg1", "minValue": -5e-324},
        {"probeId": "cg1", "maxValue": 1.0000000000000002},
        {"probeId": "cg1", "maxValue": 10**400},
        {"probeId": "cg1", "minValue": 0.5, "maxValue": 0.25},
        {"probeId": "cg1", "filters": []},
    ],
)
def test_near_misses_are_left_to_the_model(raw: dict) -> None:
    assert query_module._plain(raw) is None
    assert by_model(raw) is None


@pytest.mark.parametrize(
    "raw",
    [
        {"probeId": "cg00000029"},
        {"probeId": "cg00000029", "minValue": 0.6, "maxValue": 0.8},
        {"probeId": "cg00000029", "minValue": 0, "maxValue": 1},
        {"probeId": "cg00000029", "maxValue": 0.25, "datasetIds": ["demo-cohort", "b", "demo-cohort"]},
        {"probeId": "cg00000029", "minValue": None, "maxValue": 0.5, "datasetIds": []},
        {"referenceName": "chr7", "start": 1234, "minValue": 0.1},
        {"referenceName": "X", "start": [99]},
    ],
)
def test_the_shapes_callers_send_take_the_fast_path(raw: dict) -> None:
    fast = query_module._plain(raw)
    assert fast is not None  # else batches silently cost what they did before the fast path
    assert same_query(fast, by_model(raw))


def test_fast_path_builds_a_complete_frozen_query() -> None:
    fast = query_module._plain({"probeId": "cg1", "minValue": 0.5, "datasetIds": ["b", "a", "b"]})
    normal = MethylationQuery("cg1", None, None, 0.5, 1.0, ("a", "b"))
    assert type(fast) is MethylationQuery
    assert list(vars(fast)) == [f.name for f in dataclasses.fields(MethylationQuery)]  # every field, no other
    assert fast == normal and hash(fast) == hash(normal) and repr(fast) == repr(normal)
    assert {fast: 1}[normal] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.lo = 0.0  # type: ignore[misc]


def outcome(call) -> tuple[str, object]:
    try:
        parsed = call()
    except QueryError as error:
        return "error", str(error)
    return "ok", [typed(q) for q in parsed.queries]


@FAST
@given(st.lists(items(), min_size=1, max_size=6), st.integers(0, 7))
def test_batches_parse_and_fail_as_through_the_model_alone(batch: list, max_batch: int) -> None:
    """The same queries, or the same message (index of the first bad item included), as without the
    fast path."""
    value = {"meta": {"apiVersion": "v2.0.0"}, "query": {"requestParameters": batch}}
    with_fast = outcome(lambda: parse_body(value, max_batch=max_batch))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(query_module, "_plain", lambda raw: None)
        without = outcome(lambda: parse_body(value, max_batch=max_batch))
        single = outcome(lambda: parse_body({"query": {"requestParameters": batch[0]}}, max_batch=1))
    assert with_fast == without
    assert outcome(lambda: parse_body({"query": {"requestParameters": batch[0]}}, max_batch=1)) == single


def test_a_bad_item_is_named_by_its_index_after_good_ones() -> None:
    batch = [{"probeId": "cg00000029", "minValue": 0.1}] * 3 + [{"probeId": "cg1", "minValue": math.nan}]
    with pytest.raises(QueryError) as caught:
        parse_body({"query": {"requestParameters": batch}}, max_batch=10)
    assert str(caught.value) == "query.requestParameters[3].minValue: Input should be a finite number"
    batch[3] = {"probeId": "cg1", "minValue": 0.9, "maxValue": 0.1}
    with pytest.raises(QueryError) as caught:
        parse_body({"query": {"requestParameters": batch}}, max_batch=10)
    assert str(caught.value) == "query.requestParameters[3]: minValue 0.9 is greater than maxValue 0.1"


@FAST
@given(
    st.dictionaries(
        st.sampled_from(["probeId", "referenceName", "start", "minValue", "maxValue", "datasetIds"]),
        st.sampled_from(
            ["cg00000029", "chr1", "chr1\n", "12", "007", "0.5", "1e-3", "a,b", "a,,b", "", "x y"]
        ),
    )
)
def test_get_parses_and_fails_as_through_the_model_alone(args: dict[str, str]) -> None:
    with_fast = outcome(lambda: parse_args(args))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(query_module, "_plain", lambda raw: None)
        assert outcome(lambda: parse_args(args)) == with_fast

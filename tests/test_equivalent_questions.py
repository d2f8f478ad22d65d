"""Every spelling of one question is one question: one canonical query, one cache key, one answer.

The answer cache is what stops averaging (a repeated question must get the identical answer), and
counts compare float32 values, so two bounds with the same float32 ask the same thing. Spellings that
must meet: GET and POST; a bound as text ``0.6``, ``6e-1``, ``0.60``; an int or a float; ``-0`` and
``0``; float64 values with the same float32; omitted bounds and the explicit defaults; ``datasetIds``
in any order, repeated, or omitted when that names the same datasets.

Property tests of the parsers and the cache key; then a real ``mbeacon serve`` (gunicorn) asked one
question in every spelling: one answer, one ledger entry per dataset, and after the budget is spent
every spelling still gets that cached answer (never a 429).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from beacon_schemas import validate
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from questions import DEMO, SECOND, Store, add_user, build_store, get, ledger_state, post, running_server

from mbeacon.beacon.query import MethylationQuery, canonical_bound, parse_args, parse_body
from mbeacon.beacon.release import query_key

FAST = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
RESULTSETS = "responses/beaconResultsetsResponse.json"
unit = st.floats(0.0, 1.0)


def f32(value: float) -> np.float32:
    return np.float32(value)


def same_float32(value: float) -> st.SearchStrategy[float]:
    """float64 values in [0, 1] that round to the float32 of ``value`` (its neighbours, both sides)."""
    single = f32(value)
    below = np.nextafter(single, np.float32(-1)).astype(np.float64)
    above = np.nextafter(single, np.float32(2)).astype(np.float64)
    # the float64 interval that rounds to ``single``: strictly inside the midpoints to its neighbours
    lo = max(0.0, float(np.nextafter((below + float(single)) / 2, 2.0)))
    hi = min(1.0, float(np.nextafter((above + float(single)) / 2, -1.0)))
    return st.floats(lo, hi).filter(lambda v: f32(v) == single)


def text_forms(value: float) -> list[str]:
    """Ways to write ``value`` (or a float64 with its float32) in a GET query string."""
    forms = [repr(value), f"{value:.17g}", f"{value:.25e}", f"{value:.20f}", f"0{value!r}"]
    if "e" not in repr(value) and "." in repr(value):
        forms.append(repr(value) + "00")
    if value == int(value):
        forms += [str(int(value)), f"{int(value)}e0", "-0" if value == 0 else f"{int(value)}.0"]
    if value == 0:
        forms += ["-0.0", "0e-5", "-0e0"]
    return [form for form in forms if f32(float(form)) == f32(value)]  # fixed digits may lose a tiny one


# --- the canonical bound ----------------------------------------------------------------------


@FAST
@given(unit)
@example(0.6)
@example(0.6 + 1e-11)
@example(-0.0)
@example(5e-324)
@example(2**-149)
@example(1 - 1e-9)
def test_the_canonical_bound_is_the_float32_question(value: float) -> None:
    canonical = canonical_bound(value)
    assert f32(canonical) == f32(value)  # the count sees the same bound
    assert canonical_bound(canonical) == canonical  # idempotent: a canonical query parses to itself
    assert math.copysign(1.0, canonical) == 1.0  # never -0
    assert type(canonical) is float
    # the shortest decimal of the float32 (numpy's), unless that decimal reads back elsewhere
    shortest = float(str(f32(value))) + 0.0
    assert canonical == (shortest if f32(shortest) == f32(value) else float(f32(value)))


@FAST
@given(unit.flatmap(lambda v: st.tuples(st.just(v), same_float32(v))))
def test_bounds_with_one_float32_are_one_bound(pair: tuple[float, float]) -> None:
    a, b = pair
    assert canonical_bound(a) == canonical_bound(b)
    assert repr(canonical_bound(a)) == repr(canonical_bound(b))  # the cache key's text


@pytest.mark.parametrize(
    "spellings",
    [
        [0, 0.0, -0.0, 1e-46, -0],
        [1, 1.0, 1 - 1e-9],
        [0.6, 0.6 + 1e-11, 0.6000000238418579, 0.59999999999],
        [0.1, 0.1000000001, 0.09999999999],
    ],
)
def test_known_spellings_of_a_bound_meet(spellings: list[float]) -> None:
    assert len({repr(canonical_bound(v)) for v in spellings}) == 1


# --- parsed queries and cache keys ------------------------------------------------------------


def canonical_key(query: MethylationQuery) -> str:
    return query_key("v", query.probe, query, "boolean")


def posted(params: dict) -> MethylationQuery:
    (query,) = parse_body({"query": {"requestParameters": params}}, max_batch=1).queries
    (in_batch,) = parse_body({"query": {"requestParameters": [params]}}, max_batch=1).queries
    assert in_batch == query  # the batch's fast path and the single query's model path agree
    return query


def got(params: dict[str, str]) -> MethylationQuery:
    (query,) = parse_args(params).queries
    return query


@settings(FAST, max_examples=150)
@given(st.data(), unit, unit)
def test_every_spelling_parses_to_one_query_and_one_cache_key(data, a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    lo2 = data.draw(same_float32(lo), "lo2")
    hi2 = data.draw(same_float32(hi), "hi2")
    base = {"probeId": "cg00042144", "datasetIds": ["b-set", "a-set"]}
    reference = posted({**base, "minValue": lo, "maxValue": hi})
    spellings: list[MethylationQuery] = [
        posted({**base, "minValue": lo2, "maxValue": hi2}),
        posted({**base, "minValue": lo, "maxValue": hi2, "datasetIds": ["a-set", "b-set", "a-set"]}),
    ]
    for lo_text in data.draw(st.lists(st.sampled_from(text_forms(lo)), min_size=1, max_size=3), "lo_text"):
        hi_text = data.draw(st.sampled_from(text_forms(hi)), "hi_text")
        ids = data.draw(st.sampled_from(["b-set,a-set", "a-set,b-set", "a-set,,b-set,a-set"]), "ids")
        spellings.append(
            got({"probeId": "cg00042144", "minValue": lo_text, "maxValue": hi_text, "datasetIds": ids})
        )
    for query in spellings:
        assert query == reference
        assert canonical_key(query) == canonical_key(reference)
        assert query.describe() == reference.describe()  # what the echo and the audit log show


@pytest.mark.parametrize(
    "get_params, post_params",
    [
        ({"probeId": "cg1"}, {"probeId": "cg1", "minValue": 0, "maxValue": 1}),
        ({"probeId": "cg1", "minValue": "-0"}, {"probeId": "cg1", "minValue": 0.0, "maxValue": 1.0}),
        ({"probeId": "cg1", "minValue": "0.00", "maxValue": "1e0"}, {"probeId": "cg1", "maxValue": 1}),
        ({"probeId": "cg1", "minValue": "6e-1"}, {"probeId": "cg1", "minValue": 0.6 + 1e-11,
                                                  "maxValue": None}),
        ({"probeId": "cg1", "minValue": "0.60", "maxValue": "0.8"}, {"probeId": "cg1", "minValue": 0.6,
                                                                    "maxValue": 0.8000000000001}),
        ({"probeId": "cg1", "datasetIds": ""}, {"probeId": "cg1", "datasetIds": []}),
        ({"probeId": "cg1", "datasetIds": "x,y,x"}, {"probeId": "cg1", "datasetIds": ["y", "x"]}),
        ({"referenceName": "chr1", "start": "5"}, {"referenceName": "chr1", "start": [5], "minValue": -0.0}),
    ],
)  # fmt: skip
def test_get_and_post_spellings_meet(get_params: dict, post_params: dict) -> None:
    assert got(get_params) == posted(post_params)


def test_bounds_that_meet_in_float32_are_not_reversed() -> None:
    """minValue above maxValue in float64 but equal in float32 is the one-point range, not an error."""
    query = posted({"probeId": "cg1", "minValue": 0.6 + 1e-11, "maxValue": 0.6})
    assert (query.lo, query.hi) == (0.6, 0.6)


# --- one question, one answer, over HTTP ------------------------------------------------------


#: two fresh questions below: neither can find the budget spent
POLICY = {"mechanism": "svt2", "c": 2, "epsilon": 1.0}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return build_store(tmp_path_factory.getbasetemp(), tmp_path_factory.mktemp("equivalent") / "store")


def spellings_of(probe: str) -> list[tuple[str, dict | str]]:
    """One question (``probe`` in [0.6, 1] on the demo and the second cohort), spelled every way."""
    both = {"datasetIds": [DEMO, SECOND]}
    return [
        ("post", {"probeId": probe, "minValue": 0.6, **both}),
        ("post", {"probeId": probe, "minValue": 0.6 + 1e-11, "maxValue": 1,
                  "datasetIds": [SECOND, DEMO, SECOND]}),
        ("post", {"probeId": probe, "minValue": 0.6000000238418579, "maxValue": 1.0, **both}),
        ("post", [{"probeId": probe, "minValue": 0.6, **both}]),  # a batch of one: the fast path
        ("get", f"probeId={probe}&minValue=6e-1&datasetIds={SECOND},{DEMO}"),
        ("get", f"probeId={probe}&minValue=0.60&maxValue=1&datasetIds={DEMO},{SECOND},{DEMO}"),
        ("get", f"probeId={probe}&minValue=0.6000000000001&maxValue=1.0&datasetIds={DEMO},{SECOND}"),
    ]  # fmt: skip


def spellings_of_everything(probe: str) -> list[tuple[str, dict | str]]:
    """[0, 1] on every dataset holding ``probe``: omitted bounds and datasets, -0, ints."""
    return [
        ("get", f"probeId={probe}"),
        ("get", f"probeId={probe}&minValue=-0&maxValue=1"),
        ("post", {"probeId": probe, "minValue": -0.0}),
        ("post", {"probeId": probe, "minValue": 0, "maxValue": 1, "datasetIds": []}),
    ]


def ask(server, key: str, spelling: tuple[str, dict | str]) -> list[dict]:
    method, params = spelling
    response = get(server, key, params) if method == "get" else post(server, key, params)  # type: ignore[arg-type]
    assert response.status_code == 200, (spelling, response.text)
    data = response.json()
    validate(data, RESULTSETS)
    return data["response"]["resultSets"]


def the_answer(result_sets: list[dict]) -> list[tuple]:
    """What a caller learns from an answer, per dataset (``cached``, budgets and index aside)."""
    return sorted((rs["id"], rs["exists"], rs["info"]["answeredFrom"], rs["info"]["probeId"],
                   tuple(rs["info"]["range"])) for rs in result_sets)  # fmt: skip


def spend_everything(server, key: str, probes: list[str], dataset: str) -> None:
    """Fresh questions on ``dataset`` until its budget is spent (a 429 or every positive used)."""
    fresh = [{"probeId": p, "minValue": round(0.9 + k / 1000, 3), "datasetIds": [dataset]}
             for k in range(100) for p in probes]  # fmt: skip
    for start in range(0, len(fresh), 250):
        response = post(server, key, fresh[start : start + 250])
        if response.status_code == 429:
            return
        assert response.status_code == 200, response.text
        budget = response.json()["info"]["budgets"][dataset]
        if budget["positivesUsed"] == budget["positivesTotal"]:
            return
    pytest.fail(f"the budget on {dataset} was not spent by {len(fresh)} fresh questions")


def test_one_question_in_every_spelling_gets_one_answer_from_a_real_server(
    store: Store, tmp_path: Path
) -> None:
    probe = store.shared[3]
    with running_server(store, tmp_path, POLICY) as (server, url):
        key = add_user(url, "alice")
        holder = "user:alice"
        first = None
        for spelling in spellings_of(probe):
            sets = ask(server, key, spelling)
            if first is None:
                first = the_answer(sets)
                assert [rs["info"]["cached"] for rs in sets] == [False, False]
                assert [tuple(rs["info"]["range"]) for rs in sets] == [(0.6, 1.0)] * 2  # the canonical echo
                after_first = ledger_state(url)[0]
            else:
                assert the_answer(sets) == first, spelling
                assert all(rs["info"]["cached"] for rs in sets), spelling
        accounts, audit = ledger_state(url)
        assert accounts == after_first, "a second spelling of the question spent or cached something"
        assert [(p, d, answers) for p, d, answers, *_ in accounts] == [(holder, DEMO, 1), (holder, SECOND, 1)]
        queries = [entry["query"] for entry in audit if entry["event"] == "query"]
        assert len(set(queries)) == 1, "the audit log shows one canonical question"

        # every dataset, the whole range: omitted datasetIds are the same datasets as listed ones
        everything = None
        for spelling in spellings_of_everything(probe):
            answer = the_answer(ask(server, key, spelling))
            everything = everything or answer
            assert answer == everything, spelling
        assert len(everything) == 3  # the demo, the second and the positioned cohort all have the probe

        # spend every budget; every spelling of each answered question is still answered from the cache
        for dataset in sorted({d for d, *_ in everything}):
            spend_everything(server, key, store.shared, dataset)
        fresh = post(server, key, {"probeId": store.demo_only[0], "minValue": 0.123, "datasetIds": [DEMO]})
        assert fresh.status_code == 429, fresh.text  # the budget really is spent
        spent = ledger_state(url)[0]
        for spelling in spellings_of(probe):
            sets = ask(server, key, spelling)
            assert the_answer(sets) == first and all(rs["info"]["cached"] for rs in sets), spelling
        for spelling in spellings_of_everything(probe):
            assert the_answer(ask(server, key, spelling)) == everything, spelling
        assert ledger_state(url)[0] == spent, "a cached answer spent something"

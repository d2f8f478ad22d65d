"""Prior id lookups with ids of any length: ``Prior.index`` and ``probability_one`` find exactly the
known CpGs (suffixed spellings included) whatever the length of the other ids asked with them, and an
id longer than every known id never matches a known one it starts with."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.store.priors import Prior, beta_moments
from mbeacon.store.probe_ids import locus
from mbeacon.store.sorted_search import search

KNOWN = ["ch.1.5", "cg00000029", "cg00000165", "cg12345678", "rs1"]


def _prior() -> Prior:
    ids = np.array(sorted(KNOWN))
    n = len(ids)
    mean = np.linspace(0.2, 0.8, n)
    sd = np.full(n, 0.05)
    a, b = beta_moments(mean, sd)
    q = np.sort(np.random.default_rng(0).random((n, 11)), axis=1)  # noise-ok: test data
    return Prior("lookup", None, ids, mean, sd, a, b, q, 0, "test", "")


PRIOR = _prior()
_asked = st.one_of(
    st.sampled_from(KNOWN),
    st.sampled_from(KNOWN).map(lambda s: s + "_TC21"),  # an EPIC v2 spelling of a known CpG
    st.sampled_from(KNOWN).flatmap(lambda s: st.text("0123456789abc", min_size=1, max_size=8).map(s.__add__)),
    st.text("cgh0123456789._", max_size=20),
)


def _expected(probe: str) -> int:
    base = locus(probe)  # the suffix rule has its own tests (test_probe_ids.py)
    ordered = sorted(KNOWN)
    return ordered.index(base) if base in ordered else -1


@settings(max_examples=300, deadline=None)
@given(asked=st.lists(_asked, min_size=1, max_size=12))
def test_index_finds_exactly_the_known_ids(asked: list[str]) -> None:
    expected = [_expected(p) for p in asked]
    assert PRIOR.index(np.array(asked)).tolist() == expected
    for probe, row in zip(asked, expected, strict=True):
        one = PRIOR.probability_one(probe, 0.1, 0.9)
        if row < 0:
            assert math.isnan(one)
        else:
            assert one == float(PRIOR.probability(np.array([row]), 0.1, 0.9)[0])


def test_a_longer_id_never_matches_its_known_prefix() -> None:
    asked = np.array(["cg000000291", "cg00000029", "cg000001650000000000"])
    assert PRIOR.index(asked).tolist() == [-1, sorted(KNOWN).index("cg00000029"), -1]
    assert math.isnan(PRIOR.probability_one("cg000000291", 0.0, 1.0))


@settings(max_examples=200, deadline=None)
@given(
    haystack=st.lists(st.text("abc", max_size=4), unique=True).map(sorted),
    needles=st.lists(st.text("abc", max_size=5), max_size=200),
)
def test_the_sorted_search_is_numpys_searchsorted(haystack: list[str], needles: list[str]) -> None:
    hay = np.array(haystack, dtype="U5")
    wanted = np.array(needles, dtype="U5")
    assert search(hay, wanted).tolist() == np.searchsorted(hay, wanted).tolist()


def test_lookups_keep_the_shape_of_what_is_asked() -> None:
    asked = np.array([["cg00000029", "nope"], ["rs1", "cg12345678_BC11"]] * 40)  # enough to be sorted
    expected = [[_expected(p) for p in row] for row in asked.tolist()]
    assert PRIOR.index(asked).tolist() == expected

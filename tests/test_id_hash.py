"""The hash index of ids (mbeacon/store/id_hash.py) finds exactly what an exact search finds: the
position of each needle in the ids, -1 where it is absent, for bytes and str ids of any width."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.store.id_hash import IdHash

_ascii = st.text(st.sampled_from("cg0123_TCB9x."), max_size=12)
_unicode = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8)


def _exact(ids: list, needles: list) -> list[int]:
    first: dict = {}
    for i, v in enumerate(ids):
        first.setdefault(v, i)
    return [first.get(n, -1) for n in needles]


@settings(max_examples=300, deadline=None)
@given(ids=st.lists(_ascii, max_size=60, unique=True), extra=st.lists(_ascii, max_size=20), data=st.data())
def test_bytes_ids_are_found_where_they_are(ids, extra, data):
    haystack = np.array([i.encode() for i in ids], dtype=f"S{max([len(i) for i in ids] + [1])}")
    needles = data.draw(st.permutations(ids + extra)) if ids or extra else []
    found = IdHash(haystack).find(np.array([n.encode() for n in needles], dtype="S"))
    assert found.tolist() == _exact(ids, needles)


@settings(max_examples=300, deadline=None)
@given(
    ids=st.lists(_unicode, max_size=60, unique=True), extra=st.lists(_unicode, max_size=20), data=st.data()
)
def test_str_ids_are_found_where_they_are(ids, extra, data):
    haystack = np.array(ids, dtype=f"U{max([len(i) for i in ids] + [1])}")
    needles = data.draw(st.permutations(ids + extra)) if ids or extra else []
    found = IdHash(haystack).find(np.array(needles, dtype="U") if needles else np.array([], dtype="U1"))
    assert found.tolist() == _exact(ids, needles)


def test_a_needle_longer_than_every_id_is_never_found():
    """Cast to the ids' width, ``cg000000290`` would be cut to ``cg00000029``: it must not match."""
    index = IdHash(np.array([b"cg00000029", b"cg00000030"]))
    assert index.find(np.array([b"cg000000290", b"cg00000029", b"cg0000003"])).tolist() == [-1, 0, -1]
    text = IdHash(np.array(["cg00000029"]))
    assert text.find(np.array(["cg000000290", "cg00000029"])).tolist() == [-1, 0]


def test_repeated_ids_keep_their_first_position_and_shapes_are_kept():
    index = IdHash(np.array([b"b", b"a", b"b", b""]))
    assert index.find(np.array([[b"b", b"a"], [b"", b"c"]])).tolist() == [[0, 1], [3, -1]]
    assert index.find(np.array([], dtype="S1")).shape == (0,)


def test_ids_colliding_in_many_slots_are_all_found():
    """A million-scale index is mostly single probes; this one forces long probe sequences."""
    ids = np.array([f"cg{i:08d}_TC21" for i in range(0, 200_000, 7)])
    index = IdHash(ids)
    rng = np.random.default_rng(3)
    asked = np.concatenate(
        [ids[rng.integers(0, ids.size, 5_000)], np.array([f"cg{i:08d}_TC21" for i in range(1, 50)])]
    )
    expected = np.searchsorted(ids, asked)
    expected = np.where(ids[np.minimum(expected, ids.size - 1)] == asked, expected, -1)
    assert (index.find(asked) == expected).all()


def test_only_string_arrays_are_indexed():
    with pytest.raises(TypeError):
        IdHash(np.arange(3))

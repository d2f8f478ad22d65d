"""Illumina probe ids and the CpG (locus) each one measures, so that every array's ids meet.

The 450K and EPIC (v1) arrays name a probe by its locus: ``cg00000029`` (a CpG), ``ch.1.1099029F``
(a non-CpG cytosine), ``rs1019916`` (a SNP probe). EPIC v2 appends a probe-design suffix to the same
name, ``_`` + strand (``T`` top, ``B`` bottom) + ``C``/``O`` (converted, opposite) + Infinium design
(``1``, ``2``) + a replicate digit: ``cg00000029_TC21``. A few EPIC v2 loci carry several probes, the
same name with different suffixes (*replicates*, e.g. ``_TC11`` and ``_TC12``). EPIC v2's variant
probes (``nv-GRCh38-chr17-...-G-A_TC11``) follow the same rule; control probes (``ctl...``) carry no
suffix and are their own locus.

The rule, applied the same way to stored ids and to the ids in questions and priors:

* the **locus** of an id is the id with one trailing ``_[TB][CO][12][0-9]`` removed (an id without
  one is its own locus); the id must keep at least one character before the suffix;
* ids are **case-sensitive**, as Illumina writes them: ``cg00000029_tc21`` has no suffix (it is its
  own, unknown, locus) and ``CG00000029`` is not ``cg00000029``;
* two ids name the same CpG exactly when their loci are equal;
* among the probes of one locus, the **representative** is the smallest id in byte (ASCII) order: a bare
  id before any suffixed one, then ``_BC..`` before ``_BO..``, ``_TC..``, ``_TO..``, and a lower
  design/replicate digit first. The rule reads only the probe list, which is public, never the values:
  picking the replicate by its data (the least missing, the most variable) would make which row answers
  depend on the patients, and so leak.

Everything here is plain string work: :func:`locus` for one id (the per-request path), :func:`loci` and
:func:`suffix_mask` vectorised over numpy string arrays (``S`` or ``U``) for 936k-probe lookups, and
:func:`representatives` for the one row per locus.
"""

from __future__ import annotations

import re

import numpy as np

__all__ = ["SUFFIX", "case_hint", "loci", "locus", "representatives", "split", "suffix_mask"]

SUFFIX = re.compile(r"_[TB][CO][12][0-9]$")
"""An EPIC v2 probe-design suffix at the end of an id."""

SUFFIX_LENGTH = 5
_STRANDS, _CONVERSIONS, _DESIGNS = frozenset("TB"), frozenset("CO"), frozenset("12")
_DIGITS = frozenset("0123456789")
# the characters allowed at each of the suffix's five places (for the array path: a table per place)
_PLACES = (b"_", b"TB", b"CO", b"12", b"0123456789")


def _table(allowed: bytes) -> np.ndarray:
    table = np.zeros(256, dtype=bool)
    table[list(allowed)] = True
    return table


_TABLES = tuple(_table(allowed) for allowed in _PLACES)


def split(probe_id: str) -> tuple[str, str | None]:
    """``(locus, suffix)`` of one id: ``("cg00000029", "TC21")`` for ``cg00000029_TC21``;
    ``(probe_id, None)`` when the id has no EPIC v2 suffix."""
    name = locus(probe_id)
    return (name, None) if name is probe_id else (name, probe_id[-4:])


def locus(probe_id: str) -> str:
    """The locus an id measures (the module docstring has the rule); the id itself when it has no
    suffix. Plain character tests, no regex: the service calls this once per question."""
    if (
        len(probe_id) > SUFFIX_LENGTH
        and probe_id[-5] == "_"
        and probe_id[-4] in _STRANDS
        and probe_id[-3] in _CONVERSIONS
        and probe_id[-2] in _DESIGNS
        and probe_id[-1] in _DIGITS
    ):
        return probe_id[:-SUFFIX_LENGTH]
    return probe_id


def _codes(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ids as a (n, width) matrix of code points (bytes for ``S``, UCS-4 for ``U``) and their
    lengths; numpy pads fixed-width strings with zeros, so a zero ends an id."""
    unit = np.uint32 if ids.dtype.kind == "U" else np.uint8
    width = ids.dtype.itemsize // np.dtype(unit).itemsize
    codes = np.ascontiguousarray(ids).reshape(-1).view(unit).reshape(ids.size, width)
    lengths = np.char.str_len(ids.reshape(-1)).astype(np.int64)
    return codes, lengths


def _as_strings(ids: np.ndarray | list[str] | tuple[str, ...]) -> np.ndarray:
    arr = np.asarray(ids)
    if arr.dtype.kind not in "SU":
        arr = arr.astype(str)
    return arr


def suffix_mask(ids: np.ndarray | list[str] | tuple[str, ...]) -> np.ndarray:
    """Which ids carry an EPIC v2 suffix (boolean array of the ids' shape), vectorised: five gathers
    of one code point per id and a table lookup each (about 30 ms for 936k ids)."""
    arr = _as_strings(ids)
    out = np.zeros(arr.size, dtype=bool)
    if arr.size == 0 or arr.dtype.itemsize == 0:
        return out.reshape(arr.shape)
    codes, lengths = _codes(arr)
    long_enough = np.flatnonzero(lengths > SUFFIX_LENGTH)
    if long_enough.size == 0:
        return out.reshape(arr.shape)
    flat = codes.reshape(-1)
    start = long_enough * codes.shape[1] + lengths[long_enough] - SUFFIX_LENGTH
    hit = np.ones(long_enough.size, dtype=bool)
    for place, table in enumerate(_TABLES):
        column = flat[start + place]
        hit &= table[np.minimum(column, 255)]  # a code point above 255 is in no table
    out[long_enough[hit]] = True
    return out.reshape(arr.shape)


def loci(ids: np.ndarray | list[str] | tuple[str, ...]) -> np.ndarray:
    """:func:`locus` of every id, vectorised; a numpy string array of the input's dtype and shape (a
    list becomes a ``U`` array). The ids are returned as they are (no copy) when none has a suffix."""
    arr = _as_strings(ids)
    mask = suffix_mask(arr).reshape(-1)
    if not mask.any():
        return arr
    out = arr.copy()
    codes, lengths = _codes(out)
    rows = np.flatnonzero(mask)
    start = rows * codes.shape[1] + lengths[rows] - SUFFIX_LENGTH
    flat = codes.reshape(-1)
    for place in range(SUFFIX_LENGTH):
        flat[start + place] = 0  # a zero ends a numpy fixed-width string
    return out


def representatives(ids: np.ndarray, *, presorted: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(loci, index)``: the distinct loci of ``ids`` in sorted order and, for each, the index in
    ``ids`` of its representative probe (the smallest id of the locus in byte order).

    Duplicate ids are the caller's to refuse (a cohort and a prior both do); here the first of equal
    ids would win. One stable sort of the loci of the sorted ids: ids of one locus sort together and,
    within it, stay in id order, so the first of each run is the representative. Sorted ids have
    nearly sorted loci (a suffix moves an id only past ids it is a prefix of), which the stable sort
    (timsort) handles in close to linear time. ``presorted``: the ids are known to be sorted already
    (a cohort's sorted index), which saves sorting them again.
    """
    arr = _as_strings(ids).reshape(-1)
    by_id = np.arange(arr.size) if presorted else np.argsort(arr, kind="stable")
    sorted_ids = arr if presorted else arr[by_id]
    names = loci(sorted_ids)
    if names is sorted_ids:  # no suffix anywhere: every id is its own locus
        return sorted_ids, by_id
    by_locus = np.argsort(names, kind="stable")
    names = names[by_locus]
    first = np.ones(names.size, dtype=bool)
    first[1:] = names[1:] != names[:-1]
    return names[first], by_id[by_locus[first]]


def case_hint(probe_id: str) -> str:
    """The spelling Illumina would give ``probe_id`` if only its case is wrong: the locus in lower case
    and a suffix in upper case (``CG00000029_tc21`` -> ``cg00000029_TC21``). For error messages only:
    lookups never fold case."""
    match = re.fullmatch(r"(.+)_([tb][co][12][0-9])", probe_id, flags=re.IGNORECASE)
    if match is None:
        return probe_id.lower()
    return f"{match.group(1).lower()}_{match.group(2).upper()}"

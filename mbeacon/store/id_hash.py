"""A hash index over a fixed-width numpy string array: many id lookups at one memory access each.

A binary search for one id among close to a million (an EPIC v2 cohort or prior) reads about twenty
ids, and most of those reads miss the CPU caches: a batch of 1,000 ids then spends more time waiting
for memory than anything else it does with them. An open-addressing table (linear probing, at most
half full) finds an id in one or two slots plus one comparison with the stored id, so a batch costs
about three cache misses per id, which the CPU overlaps across ids.

The table is built once per index (compiled, one pass over the ids) and holds one int32 per slot;
the ids are read where they lie (no copy), as machine words. Lookups return the same positions as an
exact search in the ids: a hit is confirmed by comparing every byte of the two ids (needles are first
brought to the ids' dtype, so both are padded alike), never by the hash alone.

Timing: how long a lookup takes depends on which ids are stored and asked, which are public (a
cohort's and a prior's probe lists are published), never on any value measured on a patient.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["IdHash"]

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_MIX = np.uint64(0x9E3779B97F4A7C15)


@numba.njit(cache=True, nogil=True)
def _hash(words: np.ndarray, i: int) -> np.uint64:
    """A multiply-xorshift hash of the words of id ``i`` (padding included: ids of one width), mixed
    so that the high bits, which pick the slot, depend on every word."""
    h = _FNV_OFFSET
    for k in range(words.shape[1]):
        h = (h ^ np.uint64(words[i, k])) * _FNV_PRIME
        h ^= h >> np.uint64(32)
    return h * _MIX


@numba.njit(cache=True, nogil=True)
def _equal(a: np.ndarray, i: int, b: np.ndarray, j: int) -> bool:
    for k in range(a.shape[1]):  # noqa: SIM110 - numba compiles a loop, not all() over a generator
        if a[i, k] != b[j, k]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _build(words: np.ndarray, table: np.ndarray, bits: int) -> None:
    mask = np.uint64(table.size - 1)
    shift = np.uint64(64 - bits)
    for i in range(words.shape[0]):
        slot = (_hash(words, i) >> shift) & mask
        while True:
            held = table[slot]
            if held < 0:
                table[slot] = i
                break
            if _equal(words, held, words, i):
                break  # an id seen before keeps its first position
            slot = (slot + np.uint64(1)) & mask


@numba.njit(cache=True, nogil=True)
def _find(words: np.ndarray, table: np.ndarray, bits: int, needles: np.ndarray, out: np.ndarray) -> None:
    mask = np.uint64(table.size - 1)
    shift = np.uint64(64 - bits)
    for j in range(needles.shape[0]):
        slot = (_hash(needles, j) >> shift) & mask
        found = -1
        while True:
            held = table[slot]
            if held < 0:
                break
            if _equal(words, held, needles, j):
                found = held
                break
            slot = (slot + np.uint64(1)) & mask
        out[j] = found


def _words(ids: np.ndarray) -> np.ndarray:
    """A 1-d fixed-width string array as a (n, k) matrix of the widest unsigned words that divide its
    item size (eight bytes for ``S64``), without a copy when it is contiguous: the hash and the
    comparison then take a few words per id rather than one byte or character at a time."""
    size = ids.dtype.itemsize
    if size == 0:
        return np.zeros((ids.size, 1), dtype=np.uint8)
    word = next(w for w in (8, 4, 2, 1) if size % w == 0)
    return np.ascontiguousarray(ids).view(f"u{word}").reshape(ids.size, size // word)


class IdHash:
    """Positions of ids in ``ids`` (a 1-d ``S`` or ``U`` array, kept by reference); the first position
    where an id repeats."""

    def __init__(self, ids: np.ndarray) -> None:
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.dtype.kind not in "SU":
            raise TypeError(f"IdHash indexes a 1-d numpy string array, not {ids.dtype} of shape {ids.shape}")
        self.ids = np.ascontiguousarray(ids)
        self._codes = _words(self.ids)
        if ids.size >= 2**30:
            raise ValueError("too many ids for an int32 table")
        self._bits = max((2 * ids.size).bit_length(), 4)  # 2**bits > 2n slots: at most half full
        self._table = np.full(1 << self._bits, -1, dtype=np.int32)
        _build(self._codes, self._table, self._bits)

    def find(self, needles: np.ndarray) -> np.ndarray:
        """The position of each needle in the ids, -1 where absent; int64, the needles' shape.

        Needles of the other string kind (``S`` for ``U`` ids or the reverse) are converted as numpy
        converts them (ASCII); a needle longer than the ids' width is never found.
        """
        arr = np.asarray(needles)
        shape = arr.shape
        arr = arr.reshape(-1)
        out = np.empty(arr.size, dtype=np.int64)
        if arr.size == 0:
            return out.reshape(shape)
        dtype = self.ids.dtype
        if arr.dtype.kind != dtype.kind:
            arr = arr.astype(dtype.kind)
        too_long = None
        if arr.dtype.itemsize > dtype.itemsize:
            too_long = np.char.str_len(arr) > dtype.itemsize // (4 if dtype.kind == "U" else 1)
        if arr.dtype != dtype:
            arr = arr.astype(dtype)  # pads, or cuts only the ids marked too long
        _find(self._codes, self._table, self._bits, _words(arr), out)
        if too_long is not None and too_long.any():
            out[too_long] = -1
        return out.reshape(shape)

"""The compiled scan behind :mod:`._fastpath` (numba; runs without the GIL).

Exactness: a decimal ``m / 10**k`` with ``m <= 2**24`` and ``k <= 10`` has both terms exact in
float32, so one IEEE float32 division gives the correctly rounded value, which is what Arrow's
``fast_float`` parser returns for the same text (Clinger's fast path). Other numbers are left to Arrow.
"""

# The kernel compares bytes with chained ``==`` (plain integer compares once compiled), not ``in (...)``.
# ruff: noqa: SIM109

from __future__ import annotations

import numba
import numpy as np

#: What the kernel does with each field of a line: the beta column it fills (>= 0), or one of these.
PROBE, SKIP = -1, -2

_EXACT_MANTISSA = 1 << 24  # float32 has a 24-bit significand: every integer up to 2**24 is exact
_POW10 = np.array([10.0**k for k in range(11)], dtype=np.float32)  # 10**k exact in float32 for k <= 10
_QUOTE, _CR, _LF, _DOT, _ZERO = 34, 13, 10, 46, 48
_GIVE_UP = -1


@numba.njit(cache=True, nogil=True)
def _is_null_token(data: np.ndarray, start: int, stop: int) -> bool:
    """Whether ``data[start:stop]`` is a missing-value token of ``_table.NULL_TOKENS``."""
    size = stop - start
    if size == 0:
        return True
    a = data[start]
    b = data[start + 1] if size > 1 else 0
    c = data[start + 2] if size > 2 else 0
    d = data[start + 3] if size > 3 else 0
    if size == 2:  # NA
        return a == 78 and b == 65
    if size == 3:  # NaN nan N/A
        return (
            (a == 78 and b == 97 and c == 78)
            or (a == 110 and b == 97 and c == 110)
            or (a == 78 and b == 47 and c == 65)
        )
    if size == 4:  # null NULL #N/A
        return (
            (a == 110 and b == 117 and c == 108 and d == 108)
            or (a == 78 and b == 85 and c == 76 and d == 76)
            or (a == 35 and b == 78 and c == 47 and d == 65)
        )
    return False


@numba.njit(cache=True, nogil=True)
def scan(
    data: np.ndarray,
    delimiter: int,
    kinds: np.ndarray,
    values: np.ndarray,
    id_bytes: np.ndarray,
    id_offsets: np.ndarray,
) -> int:
    """Parse whole lines into ``values`` (rows x betas) and the ids into ``id_bytes``/``id_offsets``.

    Returns the number of rows, or -1 as soon as anything is outside the plain grammar.
    """
    n = data.size
    n_fields = kinds.size
    max_rows = values.shape[0]
    nan = np.float32(np.nan)
    pos = 0
    row = 0
    id_end = 0
    id_offsets[0] = 0
    while pos < n:
        if row >= max_rows:
            return _GIVE_UP
        for field in range(n_fields):
            kind = kinds[field]
            if kind >= 0:
                start = pos
                mantissa = 0
                while pos < n:  # the whole part
                    digit = np.int64(data[pos]) - _ZERO
                    if digit < 0 or digit > 9:
                        break
                    mantissa = mantissa * 10 + digit
                    pos += 1
                if pos == start:  # no digit: a missing-value token, or not the plain case
                    while pos < n:
                        byte = data[pos]
                        if byte == delimiter or byte == _LF or byte == _CR:
                            break
                        pos += 1
                    if not _is_null_token(data, start, pos):
                        return _GIVE_UP
                    values[row, kind] = nan
                else:
                    decimals = 0
                    if pos < n and data[pos] == _DOT:
                        pos += 1
                        fraction = pos
                        while pos < n:
                            digit = np.int64(data[pos]) - _ZERO
                            if digit < 0 or digit > 9:
                                break
                            mantissa = mantissa * 10 + digit
                            pos += 1
                        decimals = pos - fraction
                        if decimals == 0:
                            return _GIVE_UP
                    # over 18 digits may have wrapped around int64; such a number never fits anyway
                    if pos - start > 18 or mantissa > _EXACT_MANTISSA or decimals > 10:
                        return _GIVE_UP
                    value = np.float32(mantissa) / _POW10[decimals]
                    if value > np.float32(1.0):
                        return _GIVE_UP
                    values[row, kind] = value
            elif kind == PROBE:
                if pos < n and data[pos] == _QUOTE:
                    pos += 1
                    start = pos
                    while pos < n:
                        byte = data[pos]
                        if byte == _QUOTE or byte == _LF or byte == _CR:
                            break
                        pos += 1
                    if pos >= n or data[pos] != _QUOTE:
                        return _GIVE_UP
                    stop = pos
                    pos += 1
                else:
                    start = pos
                    while pos < n:
                        byte = data[pos]
                        if byte == delimiter or byte == _LF or byte == _CR or byte == _QUOTE:
                            break
                        pos += 1
                    if pos < n and data[pos] == _QUOTE:
                        return _GIVE_UP
                    stop = pos
                if _is_null_token(data, start, stop):  # empty, NA...: Arrow's missing probe id
                    return _GIVE_UP
                for i in range(start, stop):
                    id_bytes[id_end] = data[i]
                    id_end += 1
            else:
                while pos < n:
                    byte = data[pos]
                    if byte == delimiter or byte == _LF or byte == _CR:
                        break
                    if byte == _QUOTE:
                        return _GIVE_UP
                    pos += 1
            if pos >= n:
                return _GIVE_UP
            byte = data[pos]
            if field == n_fields - 1:
                if byte == _CR:
                    pos += 1
                    if pos >= n or data[pos] != _LF:
                        return _GIVE_UP
                elif byte != _LF:
                    return _GIVE_UP
            elif byte != delimiter:
                return _GIVE_UP
            pos += 1
        row += 1
        id_offsets[row] = id_end
    return row


def warm() -> None:
    """Run the kernel once on a tiny input: loads its machine code from numba's cache (or compiles it)."""
    data = np.frombuffer(b"cg1\t0.5\n", dtype=np.uint8)
    kinds = np.array([PROBE, 0], dtype=np.int64)
    scan(data, 9, kinds, np.empty((1, 1), np.float32), np.empty(8, np.uint8), np.empty(2, np.int32))

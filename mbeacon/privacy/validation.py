"""One way to check every privacy parameter: epsilons, deltas, counts of positives, sensitivities
and noise scales.

A mechanism's guarantee holds only for the parameters its proof assumes, and a NaN or an infinity
slips through the comparisons a hand-written check makes (``nan <= 0`` is false): a mechanism would
run with noise of scale NaN, or promise an infinite epsilon. So every mechanism of
:mod:`mbeacon.privacy` checks its parameters here, when it is called or when its parameter object is
built, and each check

* refuses what is not a real number, ``bool`` included (``True`` is not an epsilon of 1), with a
  ``TypeError``;
* refuses NaN, infinities and values outside the parameter's range with a ``ValueError``;
* names the parameter and the value it got, and returns the value as a plain ``float`` or ``int``.

Numpy scalars are real numbers; arrays are not (a parameter is one number).
"""

from __future__ import annotations

import math
import numbers

__all__ = ["delta", "finite", "fraction", "integer", "non_negative", "positive"]

_INF = math.inf


def _real(value: float, name: str) -> float:
    """``value`` as a float if it is a real number, else a TypeError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    return float(value)


def positive(value: float, name: str) -> float:
    """A finite number > 0: every epsilon that must buy something, every sensitivity and noise scale."""
    # the common case first: noise samplers check their scale on every draw
    if type(value) is float and 0.0 < value < _INF:
        return value
    x = _real(value, name)
    if not 0.0 < x < _INF:
        raise ValueError(f"{name} must be a finite number > 0, got {x}")
    return x


def non_negative(value: float, name: str) -> float:
    """A finite number >= 0: an epsilon that may be zero to switch its part off (``epsilon3``)."""
    x = _real(value, name)
    if not 0.0 <= x < _INF:
        raise ValueError(f"{name} must be a finite number >= 0, got {x}")
    return x


def finite(value: float, name: str) -> float:
    """Any finite number: a threshold, or a shift of one."""
    if type(value) is float and -_INF < value < _INF:
        return value
    x = _real(value, name)
    if not math.isfinite(x):
        raise ValueError(f"{name} must be a finite number, got {x}")
    return x


def delta(value: float, name: str = "delta", *, zero: bool = False) -> float:
    """A failure probability: in ``(0, 1)``, or ``[0, 1)`` with ``zero=True`` (0 asks for pure DP)."""
    x = _real(value, name)
    above = x >= 0.0 if zero else x > 0.0
    if not (above and x < 1.0):
        raise ValueError(f"{name} must be a number in {'[' if zero else '('}0, 1), got {x}")
    return x


def fraction(value: float, name: str) -> float:
    """A share of a budget strictly between 0 and 1 (both parts must buy something)."""
    x = _real(value, name)
    if not 0.0 < x < 1.0:
        raise ValueError(f"{name} must be a number in (0, 1), got {x}")
    return x


def integer(value: int, name: str, minimum: int | None = 1) -> int:
    """A whole number >= ``minimum`` (no bound with ``None``): the positives ``c``, ``k``, a count.

    A float with an integral value (``5.0``) is accepted and returned as the ``int``.
    """
    if type(value) is int and (minimum is None or value >= minimum):
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    bound = "" if minimum is None else f" >= {minimum}"
    if isinstance(value, numbers.Integral):
        n = int(value)
    else:
        x = float(value)
        if not x.is_integer():  # NaN and infinities are not integers either
            raise ValueError(f"{name} must be an integer{bound}, got {x}")
        n = int(x)
    if minimum is not None and n < minimum:
        raise ValueError(f"{name} must be an integer{bound}, got {n}")
    return n

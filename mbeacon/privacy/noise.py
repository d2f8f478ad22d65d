"""Noise for differential privacy, drawn from a cryptographically secure source by default.

Every sampler takes ``rng``:

* ``None`` (the default): the operating system's CSPRNG (``os.urandom``, the kernel's ChaCha20
  generator on Linux). It keeps no state in this process, so a parent and the workers it forks can
  never share a stream: there is nothing to copy across ``fork``. This is the only source the service
  uses.
* an ``int``: a seeded numpy ``Generator`` (reproducible mode, for tests and experiments only).
* a ``numpy.random.Generator``: used as given (reproducible mode; pass the same one through a whole
  experiment).

All samplers start from uniform 64-bit words. Discrete Laplace takes exactly one word per sample:
53 bits give ``W`` uniform on ``(0, 1]`` and one further bit gives the sign, and ``|X|`` is the
inverse CDF of ``W``. Outputs are integers, so the least-significant-bit attacks on floating-point
Laplace (Mironov, CCS 2012) do not apply; the pmf is exact up to the 2^-53 granularity of ``W``,
which truncates the tail beyond about 37 scales (mass below 1e-16). ``docs/noise.md`` measures the
alternatives (OpenDP's exact samplers, a ChaCha20 numpy bit generator) and explains the choice.
"""

from __future__ import annotations

import math
import os
from typing import Protocol, TypeAlias, overload

import numpy as np

from mbeacon.privacy.validation import positive

RNGLike: TypeAlias = "int | np.random.Generator | RandomSource | None"

_TWO_53 = float(2**53)
_INV_2_53 = 1.0 / _TWO_53
_U64_MAX = np.iinfo(np.uint64).max


class RandomSource(Protocol):
    """Anything that yields uniformly random 64-bit words."""

    def words(self, n: int) -> np.ndarray:
        """Return ``n`` independent uniform ``uint64`` words."""
        ...

    def word(self) -> int:
        """Return one uniform 64-bit word as a Python int (fast scalar path)."""
        ...


class SecureSource:
    """The operating system CSPRNG; stateless in-process, hence fork-safe by construction."""

    secure = True

    def words(self, n: int) -> np.ndarray:
        return np.frombuffer(os.urandom(8 * n), dtype=np.uint64)

    def word(self) -> int:
        return int.from_bytes(os.urandom(8), "little")

    def __repr__(self) -> str:
        return "SecureSource(os.urandom)"


class GeneratorSource:
    """A numpy Generator: reproducible, *not* for production noise."""

    secure = False

    def __init__(self, generator: np.random.Generator) -> None:
        self.generator = generator

    def words(self, n: int) -> np.ndarray:
        return self.generator.integers(0, _U64_MAX, size=n, dtype=np.uint64, endpoint=True)

    def word(self) -> int:
        return int(self.generator.integers(0, _U64_MAX, dtype=np.uint64, endpoint=True))

    def __repr__(self) -> str:
        return f"GeneratorSource({self.generator!r})"


_SECURE = SecureSource()


#: The shape of a draw of many values (one value: ``None``).
Size = int | tuple[int, ...]


def as_source(rng: RNGLike = None) -> RandomSource:
    """Resolve the ``rng`` argument every sampler accepts into a word source."""
    if rng is None:
        return _SECURE
    if isinstance(rng, (SecureSource, GeneratorSource)):
        return rng
    if isinstance(rng, np.random.Generator):
        return GeneratorSource(rng)
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        seeded = np.random.default_rng(int(rng))  # noise-ok: reproducible mode, never the default
        return GeneratorSource(seeded)
    if hasattr(rng, "words") and hasattr(rng, "word"):
        return rng  # a user-supplied RandomSource
    raise TypeError(f"rng must be None, an int seed or a numpy Generator, not {type(rng).__name__}")


def _shape(size: int | tuple[int, ...] | None) -> tuple[int, ...]:
    if size is None:
        return ()
    if isinstance(size, (int, np.integer)):
        return (int(size),)
    return tuple(int(s) for s in size)


@overload
def uniform(size: Size, rng: RNGLike = None) -> np.ndarray: ...
@overload
def uniform(size: None = None, rng: RNGLike = None) -> float: ...
def uniform(size: Size | None = None, rng: RNGLike = None) -> np.ndarray | float:
    """Uniform on ``(0, 1]`` with 53-bit resolution (never exactly 0, so ``log`` is safe)."""
    source = as_source(rng)
    if size is None:
        return ((source.word() >> 11) + 1) * _INV_2_53
    shape = _shape(size)
    w = source.words(math.prod(shape))
    return (((w >> np.uint64(11)).astype(np.float64) + 1.0) * _INV_2_53).reshape(shape)


@overload
def discrete_laplace(scale: float, size: Size, rng: RNGLike = None) -> np.ndarray: ...
@overload
def discrete_laplace(scale: float, size: None = None, rng: RNGLike = None) -> int: ...
def discrete_laplace(scale: float, size: Size | None = None, rng: RNGLike = None) -> np.ndarray | int:
    """Discrete Laplace on the integers: ``P(X = k) = (1-q)/(1+q) * q**|k|`` with ``q = exp(-1/scale)``.

    Shifting the input of a count by 1 changes any outcome's probability by at most ``exp(1/scale)``,
    exactly as for continuous ``Lap(scale)``, so it is a drop-in replacement in every mechanism here
    with the same privacy cost.
    """
    scale = positive(scale, "scale")
    q = math.exp(-1.0 / scale)
    log_q = -1.0 / scale
    half_1pq = (1.0 + q) / 2.0
    source = as_source(rng)
    if size is None:
        word = source.word()
        w = ((word >> 11) + 1) * _INV_2_53
        magnitude = int(math.log(w * half_1pq) / log_q)  # >= 0, so int() is floor
        return magnitude if word & 1 else -magnitude
    shape = _shape(size)
    words = source.words(math.prod(shape))
    negative = (words & np.uint64(1)) == 0
    # The scalar path's arithmetic, step by step in place: each temporary of a large draw is a fresh
    # mapping whose page faults cost more than the arithmetic itself.
    ws = (words >> np.uint64(11)).astype(np.float64)
    ws += 1.0
    ws *= _INV_2_53
    ws *= half_1pq
    np.log(ws, out=ws)
    ws *= 1.0 / log_q
    magnitudes = ws.astype(np.int64)
    np.negative(magnitudes, out=magnitudes, where=negative)
    return magnitudes.reshape(shape)


@overload
def lattice_laplace(scale: float, sensitivity: float, size: Size, rng: RNGLike = None) -> np.ndarray: ...
@overload
def lattice_laplace(
    scale: float, sensitivity: float = 1.0, size: None = None, rng: RNGLike = None
) -> float: ...
def lattice_laplace(
    scale: float,
    sensitivity: float = 1.0,
    size: Size | None = None,
    rng: RNGLike = None,
) -> np.ndarray | float:
    """Discrete Laplace on the lattice ``sensitivity * Z`` with the privacy of ``Lap(scale)``.

    Mechanisms written with ``Lap(k * sensitivity / epsilon)`` use this: a neighbouring input moves a
    query by at most one lattice step, which costs ``sensitivity / scale`` exactly as in the
    continuous proof. With ``sensitivity = 1`` (counts) the noise is an integer and every comparison
    of a noisy count with a noisy threshold is exact.
    """
    sensitivity = positive(sensitivity, "sensitivity")
    units = discrete_laplace(positive(scale, "scale") / sensitivity, size, rng)
    if sensitivity == 1.0:
        return units
    return units * sensitivity


@overload
def laplace(scale: float, size: Size, rng: RNGLike = None) -> np.ndarray: ...
@overload
def laplace(scale: float, size: None = None, rng: RNGLike = None) -> float: ...
def laplace(scale: float, size: Size | None = None, rng: RNGLike = None) -> np.ndarray | float:
    """Continuous Laplace by inverse CDF from secure words (for real-valued scores only)."""
    scale = positive(scale, "scale")
    source = as_source(rng)
    if size is None:
        word = source.word()
        w = ((word >> 11) + 1) * _INV_2_53
        magnitude = -scale * math.log(w)
        return magnitude if word & 1 else -magnitude
    shape = _shape(size)
    words = source.words(math.prod(shape))
    ws = ((words >> np.uint64(11)).astype(np.float64) + 1.0) * _INV_2_53
    sign = (words & np.uint64(1)).astype(np.float64) * 2.0 - 1.0
    return (-scale * np.log(ws) * sign).reshape(shape)


@overload
def gumbel(scale: float, size: Size, rng: RNGLike = None) -> np.ndarray: ...
@overload
def gumbel(scale: float, size: None = None, rng: RNGLike = None) -> float: ...
def gumbel(scale: float, size: Size | None = None, rng: RNGLike = None) -> np.ndarray | float:
    """Gumbel(0, scale): adding it to scores and taking the arg-max samples the exponential mechanism."""
    scale = positive(scale, "scale")
    u = uniform(size, rng)
    # u is in (0, 1]; u == 1 would give -log(0): nudge it below 1 (probability 2^-53).
    if size is None:
        u = min(u, 1.0 - _INV_2_53)
        return -scale * math.log(-math.log(u))
    u = np.minimum(u, 1.0 - _INV_2_53)
    return -scale * np.log(-np.log(u))


# --- exact distribution functions of the discrete Laplace (tests, audits, batch engines) ---------


def discrete_laplace_pmf(k: np.ndarray | int, scale: float) -> np.ndarray:
    """Exact ``P(X = k)`` of :func:`discrete_laplace`."""
    q = math.exp(-1.0 / positive(scale, "scale"))
    return (1.0 - q) / (1.0 + q) * np.power(q, np.abs(np.asarray(k, dtype=np.float64)))


def discrete_laplace_sf(m: np.ndarray | int, scale: float) -> np.ndarray:
    """Exact ``P(X >= m)`` of :func:`discrete_laplace` for integer ``m``."""
    scale = positive(scale, "scale")
    q = math.exp(-1.0 / scale)
    m = np.asarray(m, dtype=np.float64)
    upper = np.exp(np.maximum(m, 0.0) * (-1.0 / scale)) / (1.0 + q)  # m >= 1
    lower = 1.0 - np.exp(np.maximum(1.0 - m, 0.0) * (-1.0 / scale)) / (1.0 + q)  # m <= 0
    return np.where(m >= 1.0, upper, lower)


def lattice_laplace_sf(v: np.ndarray | float, scale: float, sensitivity: float = 1.0) -> np.ndarray:
    """Exact ``P(N >= v)`` for real ``v`` and ``N`` from :func:`lattice_laplace`."""
    units = np.ceil(np.asarray(v, dtype=np.float64) / positive(sensitivity, "sensitivity") - 1e-9)
    return discrete_laplace_sf(units, scale / sensitivity)

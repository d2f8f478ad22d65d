"""The compiled scan behind :func:`mbeacon.privacy.svt2.svt2_batch` (numba).

Given a run's thresholds ``(z1, z2)``, its queries are ``TOP`` independently with the exact probability
``p_i = P(y >= T + z1 - max_i) * P(y' < T + z2 - min_i)`` (discrete Laplace tails, from a table). No
``TOP`` among the next ``j`` queries has probability ``S_j = prod (1 - p_i)``, so the next ``TOP`` is the
first ``j`` with ``S_j <= U`` for ``U`` uniform on ``[0, 1)``: exactly the distribution of drawing the
two query noises at every step, for one multiplication per query. The kernel does no random sampling
itself: the uniform targets and the threshold draws come from pools filled by the
caller from the project's noise source (the OS CSPRNG by default). When a pool runs dry the kernel
saves every run's state, returns, and is called again with fresh pools; unused draws are discarded
unseen, which biases nothing.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from mbeacon.privacy.noise import RandomSource, lattice_laplace, uniform

TOP, BOT, UNANSWERED = 1, 0, -1
# need[r]: what run r must draw before it can go on
_READY, _NEEDS_TARGET, _NEEDS_THRESHOLDS = 0, 1, 2


@numba.njit(cache=True, nogil=True)
def _sf(m: float, table: np.ndarray, reach: int) -> float:
    """P(Y >= m) for integer-valued m, from the tabulated tail of the query noise."""
    idx = int(m) + reach
    if idx < 0:
        return 1.0
    if idx >= table.size:
        return 0.0
    return table[idx]


@numba.njit(cache=True, nogil=True)
def _scan(
    alpha,
    beta,
    inv_d,
    t1,
    t2,
    table,
    reach,
    c,
    redraw,
    uniforms,
    zs,
    cursor,
    pos,
    count,
    survival,
    target,
    z1,
    z2,
    need,
    out,
    start,
):
    """Advance runs ``start..`` until done or a pool is empty; return the first unfinished run."""
    n, k = alpha.shape
    uc, zc = cursor[0], cursor[1]  # next unused uniform and threshold draw
    for r in range(start, n):
        i = pos[r]
        while i < k and count[r] < c:
            if need[r] == _NEEDS_THRESHOLDS:
                if zc + 2 > zs.size:
                    cursor[0], cursor[1] = uc, zc
                    return r
                z1[r], z2[r] = zs[zc], zs[zc + 1]
                zc += 2
                need[r] = _NEEDS_TARGET
            if need[r] == _NEEDS_TARGET:
                if uc >= uniforms.size:
                    cursor[0], cursor[1] = uc, zc
                    return r
                target[r] = uniforms[uc]
                uc += 1
                survival[r] = 1.0
                need[r] = _READY
            a = alpha[r, i] * inv_d
            b = beta[r, i] * inv_d
            if not (math.isfinite(a) and math.isfinite(b)):
                cursor[0], cursor[1] = uc, zc
                return -1 - r  # bad input: the caller raises
            hi, lo = max(a, b), min(a, b)
            p = _sf(math.ceil(t1 + z1[r] - hi), table, reach) * (
                1.0 - _sf(math.ceil(t2 + z2[r] - lo), table, reach)
            )
            survival[r] *= 1.0 - p  # survival since the last TOP
            i += 1
            pos[r] = i
            if survival[r] <= target[r]:
                out[r, i - 1] = TOP
                count[r] += 1
                need[r] = _NEEDS_THRESHOLDS if redraw else _NEEDS_TARGET
        if count[r] >= c:
            out[r, pos[r] :] = UNANSWERED
    cursor[0], cursor[1] = uc, zc
    return n


def scan(
    alpha: np.ndarray,
    beta: np.ndarray,
    *,
    threshold: float,
    sensitivity: float,
    threshold_scale: float,
    query_scale: float,
    c: int,
    redraw: bool,
    source: RandomSource,
    margins: tuple[float, float] = (0.0, 0.0),
) -> np.ndarray:
    """SVT² flags for ``runs x queries`` (``alpha``/``beta`` already broadcast to 2-D).

    ``margins = (above, below)`` move the threshold of the "both below" test up to ``T + above`` and
    that of the "both above" test down to ``T - below`` (:mod:`mbeacon.privacy.svt2_margin`).
    """
    n, k = alpha.shape
    d = float(sensitivity)
    scale = query_scale / d
    reach = math.ceil(40 * scale) + 1  # beyond 40 scales the tail is 0 or 1 to double precision
    m = np.arange(-reach, reach + 2, dtype=np.float64)
    q = math.exp(-1.0 / scale)
    tail = np.exp(-np.abs(np.where(m >= 1, m, 1 - m)) / scale) / (1 + q)
    table = np.where(m >= 1, tail, 1.0 - tail)
    out = np.zeros((n, k), dtype=np.int8)
    pos = np.zeros(n, dtype=np.int64)
    count = np.zeros(n, dtype=np.int64)
    survival, target, z1, z2 = (np.zeros(n) for _ in range(4))  # per-run state between calls
    need = np.full(n, _NEEDS_THRESHOLDS, dtype=np.int8)
    cursor = np.zeros(2, dtype=np.int64)
    start, pool = 0, n + 64
    while start < n:
        remaining = n - start
        uniforms = 1.0 - uniform(pool, source)  # uniform on [0, 1): U = 0 only stops where p = 1
        zs = lattice_laplace(threshold_scale / d, 1.0, 2 * pool if redraw else 2 * remaining + 2, source)
        zs = zs.astype(np.float64)
        cursor[:] = 0
        state = (cursor, pos, count, survival, target, z1, z2, need, out)
        t1, t2 = (threshold + margins[0]) / d, (threshold - margins[1]) / d
        start = _scan(alpha, beta, 1.0 / d, t1, t2, table, reach, c, redraw, uniforms, zs, *state, start)
        if start < 0:
            raise ValueError("alpha and beta must be finite numbers")
        pool = max(64, 2 * pool)  # TOPs were denser than one per run: draw more next time
    return out

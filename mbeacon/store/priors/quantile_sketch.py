"""The empirical quantile sketch of a prior: building it from reference values, and its CDF.

A prior built from a reference cohort keeps, per probe, ``Q`` quantiles of the probe's reference values
at the levels ``linspace(0, 1, Q)`` (:func:`_levels`, :func:`_row_quantiles`, numpy's "linear"
definition). :meth:`~.model.Prior.probability` with method ``"empirical"`` evaluates the piecewise-linear
CDF through them (:func:`_sketch_cdf`). Building and reading the sketch sit together so that the two
agree on what a sketch row means.

``DEFAULT_QUANTILES`` is the builders' default argument (:mod:`.build`): it is fixed when they are
defined, so assigning it later does not change their default (as in the former single module).
"""

from __future__ import annotations

import bisect

import numpy as np

__all__ = ["DEFAULT_QUANTILES"]


#: Default size of the empirical quantile sketch (levels 0, 0.01, ..., 1).
DEFAULT_QUANTILES = 101


def _levels(quantiles: int | None) -> np.ndarray | None:
    if not quantiles:
        return None
    if quantiles < 2:
        raise ValueError("a quantile sketch needs at least 2 levels (or 0 for none)")
    return np.linspace(0.0, 1.0, int(quantiles))


def _row_quantiles(block: np.ndarray, counts: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """numpy's "linear" quantiles of each row over its non-NaN values (rows with >= 1 value)."""
    ordered = np.sort(block, axis=1)  # NaN sorts last
    position = levels[None, :] * (counts[:, None] - 1)
    below = np.floor(position).astype(np.int64)
    above = np.minimum(below + 1, counts[:, None] - 1)
    frac = position - below
    rows = np.arange(block.shape[0])[:, None]
    low, high = ordered[rows, below], ordered[rows, above]
    return low + frac * (high - low)


def _sketch_cdf(
    flat: np.ndarray, base: np.ndarray, q_count: int, x: np.ndarray, *, right: bool
) -> np.ndarray:
    """Piecewise-linear CDF through the sketch rows starting at ``flat[base]``, evaluated at ``x``.

    ``right=True``: F(x) = P(X <= x); ``right=False``: the left limit F(x-) = P(X < x), which differs
    where quantiles tie (a point mass). Branchless binary search for ``j`` = the number of quantiles
    ``<= x`` (or ``< x``), then interpolation between levels ``j-1`` and ``j``; 0 below the sketch,
    1 above it.
    """
    # Search in the sketch's own precision: a bound equal to a reference value (0.2, stored as the
    # float32 nearest to 0.2) must compare equal to it.
    x32 = np.clip(x, -1.0, 2.0).astype(np.float32)
    j = np.zeros(x.shape, dtype=np.int64)
    step = 1 << (q_count.bit_length() - 1)
    while step:
        cand = j + step
        value = flat[base + np.minimum(cand, q_count) - 1]
        ok = (value <= x32) if right else (value < x32)
        ok &= cand <= q_count
        j = np.where(ok, cand, j)
        step >>= 1
    k = np.clip(j - 1, 0, q_count - 2)
    q0 = flat[base + k].astype(np.float64)
    q1 = flat[base + k + 1].astype(np.float64)
    frac = np.clip((x - q0) / (q1 - q0), 0.0, 1.0)
    cdf = (k + frac) / (q_count - 1)
    cdf[j == 0] = 0.0
    cdf[j == q_count] = 1.0
    return cdf


def _sketch_cdf_scalar(row: list[float], x: float, *, right: bool) -> float:
    """:func:`_sketch_cdf` for one point, in plain Python, bit for bit the same result.

    The beacon answers most requests one query at a time, where numpy's per-call overhead on a
    one-element array dominated; the same IEEE operations in the same order give the same float,
    so a query's answer does not depend on whether it came alone or in a batch
    (``tests/test_priors.py`` checks the identity).
    """
    q_count = len(row)
    x32 = float(np.float32(min(max(x, -1.0), 2.0)))
    j = bisect.bisect_right(row, x32) if right else bisect.bisect_left(row, x32)
    if j == 0:
        return 0.0
    if j == q_count:
        return 1.0
    k = min(max(j - 1, 0), q_count - 2)
    q0, q1 = row[k], row[k + 1]
    frac = min(max((x - q0) / (q1 - q0), 0.0), 1.0)
    return (k + frac) / (q_count - 1)

"""The Beta distribution of a prior: fitting Beta(a, b) by moments, and its CDF for P_prior.

A prior summarises each probe by the Beta(a, b) with the probe's population mean and sd
(:func:`beta_moments`); :meth:`~.model.Prior.probability` with method ``"beta"`` evaluates that Beta's
CDF (:func:`_beta_cdf`), skipping ``betainc`` far in the tails.

Settings, read at call time: ``MEAN_CLIP``, ``VAR_FLOOR``, ``VAR_FRACTION`` (:func:`beta_moments`) and
``TAIL_EXPONENT`` (:func:`_beta_cdf`). They live here, in the module that reads them: set them here
(``mbeacon.store.priors.beta_distribution.TAIL_EXPONENT = ...``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import special

__all__ = ["MEAN_CLIP", "TAIL_EXPONENT", "VAR_FLOOR", "VAR_FRACTION", "beta_moments"]


#: Beta by moments: means are clipped to ``[MEAN_CLIP, 1 - MEAN_CLIP]`` ...
MEAN_CLIP = 1e-4
#: ... and variances to ``[VAR_FLOOR, VAR_FRACTION * m (1 - m)]``.
VAR_FLOOR = 1e-8
VAR_FRACTION = 0.999


def beta_moments(mean: Any, sd: Any) -> tuple[np.ndarray, np.ndarray]:
    """Beta(a, b) with the given mean and sd, by the method of moments.

    For mean ``m`` and variance ``v < m (1 - m)``: ``k = m (1 - m) / v - 1``, ``a = m k``,
    ``b = (1 - m) k``. Edge cases are handled by clipping first:

    * ``m`` is clipped to ``[1e-4, 1 - 1e-4]`` (a mean at or beyond 0 or 1 has no Beta);
    * ``v = sd**2`` is clipped to ``[1e-8, 0.999 m (1 - m)]``: ``v = 0`` (all values equal) becomes a
      very narrow Beta around ``m`` (sd 1e-4), and ``v >= m (1 - m)`` (more spread than any Beta with
      that mean allows, the two-point limit) becomes the widest Beta, ``a + b = 1/999``, a U shape
      with its mass at 0 and 1 split as ``1 - m : m``.

    NaN in, NaN out.
    """
    m = np.clip(np.asarray(mean, dtype=np.float64), MEAN_CLIP, 1.0 - MEAN_CLIP)
    spread = m * (1.0 - m)
    v = np.clip(np.square(np.asarray(sd, dtype=np.float64)), VAR_FLOOR, VAR_FRACTION * spread)
    k = spread / v - 1.0
    return m * k, (1.0 - m) * k


#: Endpoints ``x`` with ``2 (a + b + 1) (x - mean)^2 > TAIL_EXPONENT`` are in a tail of mass below
#: ``exp(-TAIL_EXPONENT) = 4.2e-18``: Beta(a, b) is sub-Gaussian with variance proxy ``1 / (4 (a + b + 1))``
#: (Elder 2016; Marchal and Arbel 2017), so ``P(X <= mean - t) <= exp(-2 (a + b + 1) t^2)`` and likewise
#: above. There the CDF is set to 0 or 1 without calling ``betainc`` (an absolute error below 4.2e-18,
#: below float64 resolution next to 1); on uniformly random ranges this skips about half the calls.
TAIL_EXPONENT = 40.0


def _beta_cdf(
    a: np.ndarray, b: np.ndarray, mean: np.ndarray, tail_scale: np.ndarray, x: np.ndarray
) -> np.ndarray:
    """The Beta(a, b) CDF at ``x`` in [0, 1]: ``betainc`` except far in the tails (see TAIL_EXPONENT)."""
    dev = x - mean
    out = (dev > 0).astype(np.float64)
    near = np.flatnonzero(tail_scale * dev * dev <= TAIL_EXPONENT)
    if near.size:
        out[near] = special.betainc(a[near], b[near], x[near])
    return out

"""The fast Beta quantile of a latent normal value: how a latent ``z`` becomes a beta value.

The Gaussian copula maps a probe's latent standard normal value ``z`` to ``F^-1(Phi(z))``, ``F`` the
probe's Beta (or two-component Beta mixture). ``scipy.special.betaincinv`` per value is too slow for
hundreds of millions of values, so :func:`beta_quantile_of_normal` interpolates it per probe on a
fixed latent grid (cubic Hermite in logit space with the exact derivatives at the nodes).
"""

from __future__ import annotations

import numpy as np
from scipy import special

__all__ = ["beta_quantile_of_normal"]

#: Latent grid of the fast Beta quantile (cubic Hermite in logit space with exact derivatives).
_Z_MAX = 6.0
_Z_NODES = np.linspace(-_Z_MAX, _Z_MAX, 25)
_Z_STEP = float(_Z_NODES[1] - _Z_NODES[0])
_Q_CLIP = 1e-12


def _quantile_nodes(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """logit F^-1(Phi(z)) and its derivative (times the node step) at the latent grid, per probe."""
    a = np.asarray(a, dtype=np.float64)[:, None]
    b = np.asarray(b, dtype=np.float64)[:, None]
    q = special.betaincinv(a, b, special.ndtr(_Z_NODES)[None, :])
    clipped = (q <= _Q_CLIP) | (q >= 1.0 - _Q_CLIP)
    q = np.clip(q, _Q_CLIP, 1.0 - _Q_CLIP)
    level = special.logit(q)
    log_pdf = special.xlogy(a - 1.0, q) + special.xlog1py(b - 1.0, -q) - special.betaln(a, b)
    log_phi = -0.5 * _Z_NODES**2 - 0.5 * np.log(2 * np.pi)
    with np.errstate(over="ignore", invalid="ignore"):
        slope = np.exp(log_phi[None, :] - log_pdf - np.log(q) - np.log1p(-q)) * _Z_STEP
    # Fritsch-Carlson bound (tangents at most 3x the neighbouring secants) keeps the curve monotone;
    # the secant stands in where the quantile was clipped.
    secant = np.diff(level, axis=1)
    left = np.concatenate([secant[:, :1], secant], axis=1)
    right = np.concatenate([secant, secant[:, -1:]], axis=1)
    bound = 3.0 * np.minimum(left, right)
    slope = np.where(np.isfinite(slope) & ~clipped, np.clip(slope, 0.0, bound), np.minimum(left, right))
    return level, slope


def _hermite(level: np.ndarray, slope: np.ndarray, z: np.ndarray) -> np.ndarray:
    rows, k = level.shape
    pos = (np.clip(z, -_Z_MAX, _Z_MAX) + _Z_MAX) / _Z_STEP
    cell = np.minimum(pos.astype(np.intp), k - 2)
    t = pos - cell
    flat = cell + (np.arange(rows) * k)[:, None]
    y0 = level.ravel()[flat]
    c = level.ravel()[flat + 1] - y0
    d0 = slope.ravel()[flat]
    d1 = slope.ravel()[flat + 1]
    out = y0 + t * (d0 + t * ((3.0 * c - 2.0 * d0 - d1) + t * (d0 + d1 - 2.0 * c)))
    return special.expit(out)


def beta_quantile_of_normal(z: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``Beta(a_i, b_i).ppf(Phi(z_ij))`` for a rows x columns ``z`` and per-row ``a``, ``b``.

    A cubic Hermite interpolant in logit space on a 25-node latent grid over [-6, 6], with the exact
    derivative at the nodes: a few polynomial steps per value instead of ``scipy.special.betaincinv``'s
    iterative inversion, within 1e-4 of it for 99.9% of values (|z| > 6, probability 2e-9, is clipped
    to 6).
    """
    level, slope = _quantile_nodes(a, b)
    return _hermite(level, slope, np.asarray(z, dtype=np.float64))


def _mixture_quantile_of_normal(
    z: np.ndarray, weight: np.ndarray, a1: np.ndarray, b1: np.ndarray, a2: np.ndarray, b2: np.ndarray
) -> np.ndarray:
    """The two-component mixture ``(1 - w) Beta(a1, b1) + w Beta(a2, b2)`` of ``Phi(z)``: uniform levels
    below ``1 - w`` map to the low component, the others to the high one (exactly the mixture)."""
    w = weight[:, None]
    u = special.ndtr(z)
    high = u > 1.0 - w
    level = np.where(high, (u - (1.0 - w)) / w, u / (1.0 - w))
    inner = special.ndtri(np.clip(level, 1e-300, 1.0 - 1e-16))
    return np.where(high, beta_quantile_of_normal(inner, a2, b2), beta_quantile_of_normal(inner, a1, b1))

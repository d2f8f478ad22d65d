"""Incorrect SVT variants, kept as regression fixtures for the privacy audit. NEVER use them.

Lyu, Su and Li (PVLDB 10(6), 2017, Figure 1 and Table 1) show that these published variants do not
deliver the privacy they claim. ``epsilon`` below is the *claimed* cost; ``true_epsilon`` says what
each really costs. ``rho`` is the threshold noise, ``nu`` the query noise, ``D`` the sensitivity.

| name              | what differs from the correct SVT                              | true cost       |
|-------------------|----------------------------------------------------------------|-----------------|
| svt-roth2011      | nu ~ Lap(cD/eps2) and TOP outputs q + nu                       | infinite        |
| svt-lee-clifton   | eps1 = eps/4, nu ~ Lap(D/eps2): query noise ignores c          | (1 + 6c)/4 eps  |
| svt-stoddard      | no query noise; never halts                                    | infinite        |
| svt-chen          | nu ~ Lap(D/eps2) = Lap(2D/eps); never halts                    | infinite        |

A broken twin of an SVT application, for the same purpose:

| name                   | what differs from the correct mechanism                   | true cost       |
|------------------------|-----------------------------------------------------------|-----------------|
| auto-clip-exact-bound  | the clipping bound read off the data's maximum, no SVT    | infinite        |
| dssgd-exact-values     | DSSGD's SVT selection, but the uploaded values un-noised  | infinite        |
"""

from __future__ import annotations

import math

import numpy as np

from mbeacon.privacy.clipping import AutoClipRelease, clipped_sums
from mbeacon.privacy.dssgd import dssgd_select_batch
from mbeacon.privacy.noise import RNGLike, as_source, laplace, lattice_laplace
from mbeacon.privacy.sparse_vector import NumericAnswers, sparse_vector_engine
from mbeacon.privacy.validation import positive


def true_epsilon(name: str, epsilon: float, c: int) -> float:
    """What the variant really costs when it claims ``epsilon`` (Lyu, Su and Li, Table 1)."""
    if name == "svt-lee-clifton":
        return (1 + 6 * c) / 4 * epsilon
    if name in ("svt-roth2011", "svt-stoddard", "svt-chen", "auto-clip-exact-bound", "dssgd-exact-values"):
        return math.inf
    raise KeyError(name)


def _split(epsilon: float, threshold_share: float, sensitivity: float) -> tuple[float, float]:
    """The claimed ``epsilon`` split as a variant splits it: ``(eps1, eps2)`` for threshold and queries.

    The fixtures check their parameters as the correct mechanisms do, so that what the audit
    measures is the flaw and never a NaN.
    """
    epsilon = positive(epsilon, "epsilon")
    positive(sensitivity, "sensitivity")
    eps1 = epsilon * threshold_share
    return eps1, epsilon - eps1


def svt_roth2011_batch(
    answers: np.ndarray,
    threshold: float,
    epsilon: float,
    c: int,
    *,
    sensitivity: float = 1.0,
    runs: int | None = None,
    rng: RNGLike = None,
) -> NumericAnswers:
    """Roth's 2011 lecture-notes variant: outputs the noisy query ``q + nu`` itself on TOP."""
    eps1, eps2 = _split(epsilon, 1 / 2, sensitivity)
    return sparse_vector_engine(
        answers,
        threshold,
        threshold_scale=sensitivity / eps1,
        query_scale=c * sensitivity / eps2,
        c=c,
        release_noisy_query=True,
        sensitivity=sensitivity,
        runs=runs,
        rng=rng,
    )


def svt_lee_clifton_batch(
    answers: np.ndarray,
    threshold: float,
    epsilon: float,
    c: int,
    *,
    sensitivity: float = 1.0,
    runs: int | None = None,
    rng: RNGLike = None,
) -> np.ndarray:
    """Lee and Clifton (KDD 2014): query noise does not scale with ``c``."""
    eps1, eps2 = _split(epsilon, 1 / 4, sensitivity)
    return sparse_vector_engine(
        answers,
        threshold,
        threshold_scale=sensitivity / eps1,
        query_scale=sensitivity / eps2,
        c=c,
        sensitivity=sensitivity,
        runs=runs,
        rng=rng,
    ).flags


def svt_stoddard_batch(
    answers: np.ndarray,
    threshold: float,
    epsilon: float,
    c: int | None = None,
    *,
    sensitivity: float = 1.0,
    runs: int | None = None,
    rng: RNGLike = None,
) -> np.ndarray:
    """Stoddard et al. (2014): no query noise at all and no limit on positives (``c`` ignored)."""
    eps1, _ = _split(epsilon, 1 / 2, sensitivity)
    return sparse_vector_engine(
        answers,
        threshold,
        threshold_scale=sensitivity / eps1,
        query_scale=None,
        c=None,
        sensitivity=sensitivity,
        runs=runs,
        rng=rng,
    ).flags


def svt_chen_batch(
    answers: np.ndarray,
    threshold: float,
    epsilon: float,
    c: int | None = None,
    *,
    sensitivity: float = 1.0,
    runs: int | None = None,
    rng: RNGLike = None,
) -> np.ndarray:
    """Chen et al. (2015): ``nu ~ Lap(D/eps2)`` and no limit on positives (``c`` ignored)."""
    eps1, eps2 = _split(epsilon, 1 / 2, sensitivity)
    return sparse_vector_engine(
        answers,
        threshold,
        threshold_scale=sensitivity / eps1,
        query_scale=sensitivity / eps2,
        c=None,
        sensitivity=sensitivity,
        runs=runs,
        rng=rng,
    ).flags


# --- a broken twin of the automatic clipping bound (clipping.py) ------------------------------------


def auto_clip_exact_bound_batch(
    values: np.ndarray,
    epsilon: float,
    *,
    grid: np.ndarray,
    runs: int = 1,
    rng: RNGLike = None,
) -> AutoClipRelease:
    """Automatic clipping with the bound read off the data (the first grid value >= the maximum)
    instead of found by AboveThreshold, then the same noisy sum and count at ``epsilon/2`` each.

    The bound is a deterministic function of the largest row: infinite true cost.
    """
    eps_half = positive(epsilon, "epsilon") / 2
    source = as_source(rng)
    x = np.clip(np.asarray(values, dtype=np.float64), 0.0, None)
    grid = np.asarray(grid, dtype=np.float64)
    index = np.full(runs, min(int(np.searchsorted(grid, x.max(), side="left")), grid.size - 1))
    bound = grid[index]
    noisy_sum = clipped_sums(np.sort(x), bound) + np.asarray(laplace(1.0, runs, source)) * bound / eps_half
    noisy_count = x.size + np.asarray(lattice_laplace(1.0 / eps_half, 1.0, runs, source), dtype=np.float64)
    return AutoClipRelease(index, bound, noisy_sum, noisy_count)


# --- a broken twin of DSSGD's gradient selection (dssgd.py) -----------------------------------------


def dssgd_exact_values_batch(
    gradients: np.ndarray,
    threshold: float,
    epsilon: float,
    c: int,
    *,
    clip: float,
    sensitivity: float,
    runs: int | None = None,
    rng: RNGLike = None,
) -> NumericAnswers:
    """DSSGD's selection with the uploaded values left exact (``bound(g_j, gamma)``, no ``Lap``).

    The selection alone is private, but each exact value is a deterministic function of the data:
    infinite true cost. It is what DSSGD without its value noise would upload.
    """
    result = dssgd_select_batch(
        gradients, threshold, epsilon, c, clip=clip, sensitivity=sensitivity, runs=runs, rng=rng
    )
    g = np.broadcast_to(np.asarray(gradients, dtype=np.float64), result.flags.shape)
    exact = np.floor(np.clip(g, -clip, clip) / sensitivity) * sensitivity
    return NumericAnswers(result.flags, np.where(np.isnan(result.values), np.nan, exact))

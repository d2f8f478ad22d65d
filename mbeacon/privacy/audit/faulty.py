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
| truncation-exact-max   | the truncation bound read off the largest contribution    | infinite        |

Broken twins of the SVT² sanitisers, one per mechanism:

| name                     | what differs from the correct mechanism                 | true cost       |
|--------------------------|---------------------------------------------------------|-----------------|
| svt2-margin-peeking      | the margin applied only where the exact count agrees    | infinite        |
|                          | with the prior (a margin chosen after reading the data) |                 |
| svt2-noisy-exact-release | SVT²'s TOPs answered from the exact count (no eps3 noise) | infinite      |
| online-pmw-exact-update  | Online PMW's histogram moved to the exact count         | infinite        |
"""

from __future__ import annotations

import math

import numpy as np

from mbeacon.privacy.noise import RNGLike, as_source, laplace, lattice_laplace
from mbeacon.privacy.online_pmw import OnlinePMWParams, online_pmw_batch
from mbeacon.privacy.research.clipping import AutoClipRelease, clipped_sums
from mbeacon.privacy.research.dssgd import dssgd_select_batch
from mbeacon.privacy.sparse_vector import NumericAnswers, sparse_vector_engine
from mbeacon.privacy.svt2_margin import SVT2MarginParams, svt2_margin_batch
from mbeacon.privacy.svt2_noisy import NoisyRelease, SVT2NoisyParams
from mbeacon.privacy.truncation import TruncatedCountRelease, contributions, sample_ranks
from mbeacon.privacy.validation import positive


def true_epsilon(name: str, epsilon: float, c: int) -> float:
    """What the variant really costs when it claims ``epsilon`` (Lyu, Su and Li, Table 1)."""
    if name == "svt-lee-clifton":
        return (1 + 6 * c) / 4 * epsilon
    if name in (
        "svt-roth2011",
        "svt-stoddard",
        "svt-chen",
        "auto-clip-exact-bound",
        "dssgd-exact-values",
        "truncation-exact-max",
        "svt2-margin-peeking",
        "svt2-noisy-exact-release",
        "online-pmw-exact-update",
    ):
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


# --- a broken twin of PrivateSQL's truncation (truncation.py) ---------------------------------------


def truncation_exact_max_batch(
    patient_ids: np.ndarray,
    in_range: np.ndarray,
    epsilon: float,
    epsilon_count: float,
    *,
    max_bound: int,
    runs: int = 1,
    rng: RNGLike = None,
) -> TruncatedCountRelease:
    """Truncation at the exact largest contribution (capped at ``max_bound``) instead of a bound
    learned by AboveThreshold, then the same count at its sensitivity with ``Lap(b/epsilon_count)``.

    The released bound is a deterministic function of the most samples one patient gave: infinite
    true cost (``epsilon`` is claimed for the learning it skips).
    """
    positive(epsilon, "epsilon")
    epsilon_count = positive(epsilon_count, "epsilon_count")
    source = as_source(rng)
    flags = np.asarray(in_range, dtype=bool)
    ranks = sample_ranks(patient_ids)
    most = int(contributions(patient_ids).max()) if ranks.size else 1
    bound = np.full(runs, min(max(most, 1), max_bound), dtype=np.int64)
    per_rank = np.bincount(ranks[flags], minlength=max_bound)
    noise = np.asarray(lattice_laplace(1.0 / epsilon_count, 1.0, runs, source), dtype=np.float64) * bound
    return TruncatedCountRelease(bound, np.cumsum(per_rank)[bound - 1].astype(np.float64) + noise)


# --- broken twins of the SVT² sanitisers (svt2_margin.py, svt2_noisy.py, online_pmw.py) -------------


def svt2_margin_peeking_batch(
    alpha: np.ndarray,
    beta: np.ndarray,
    params: SVT2MarginParams,
    *,
    runs: int,
    rng: RNGLike = None,
) -> np.ndarray:
    """SVT² whose margin is applied only where the exact count is on the prior's side of ``T``.

    It "removes false TOPs" perfectly, because it reads the data to decide: a query whose count
    agrees with the prior can never be TOP, one whose count disagrees can. Infinite true cost.
    """
    source = as_source(rng)
    a = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (runs, np.shape(alpha)[-1]))
    b = np.broadcast_to(np.asarray(beta, dtype=np.float64), a.shape)
    agrees = (a >= params.threshold) == (b >= params.threshold)
    above = np.where(agrees, params.margin_above, 0.0)
    below = np.where(agrees, params.margin_below, 0.0)
    z = lattice_laplace(params.threshold_scale, params.sensitivity, (runs, 2), source)
    y = lattice_laplace(params.query_scale, params.sensitivity, (runs, a.shape[1], 2), source)
    flags = np.full(a.shape, -1, dtype=np.int8)
    count = np.zeros(runs, dtype=np.int64)
    for i in range(a.shape[1]):
        live = count < params.c
        hi, lo = np.maximum(a[:, i], b[:, i]), np.minimum(a[:, i], b[:, i])
        bot = (hi + y[:, i, 0] < params.threshold + above[:, i] + z[:, 0]) | (
            lo + y[:, i, 1] >= params.threshold - below[:, i] + z[:, 1]
        )
        flags[live, i] = np.where(bot[live], 0, 1)
        count += live & ~bot
    return flags


def svt2_noisy_exact_release_batch(
    alpha: np.ndarray,
    beta: np.ndarray,
    params: SVT2NoisyParams,
    *,
    runs: int,
    rng: RNGLike = None,
) -> NoisyRelease:
    """SVT² with its TOPs answered from the exact count ``alpha >= T``: the release without eps3 noise.

    Given a TOP, the answer is a deterministic function of the data: infinite true cost.
    """
    flags = svt2_margin_batch(alpha, beta, params, runs=runs, rng=rng)
    a = np.broadcast_to(np.asarray(alpha, dtype=np.float64), flags.shape)
    b = np.broadcast_to(np.asarray(beta, dtype=np.float64), flags.shape)
    answers = np.where(flags == 1, a >= params.threshold, b >= params.threshold).astype(np.int8)
    answers[flags == -1] = -1
    counts = np.where(flags == 1, a, np.nan)
    return NoisyRelease(flags, answers, counts)


def online_pmw_exact_update_batch(
    probe: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    alpha: np.ndarray,
    prior: np.ndarray,
    params: OnlinePMWParams,
    *,
    runs: int,
    rng: RNGLike = None,
) -> NoisyRelease:
    """Online PMW releasing its noisy measurement but moving the histogram to the *exact* count.

    Later free answers from the histogram then reveal the exact count: infinite true cost.
    """
    return online_pmw_batch(probe, lo, hi, alpha, prior, params, runs=runs, rng=rng, _exact_updates=True)

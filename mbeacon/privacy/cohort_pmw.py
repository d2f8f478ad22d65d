"""Online PMW with one state for a whole cohort, asked by several owners, each within a quota.

The service's ``cohort-pmw`` (:mod:`mbeacon.beacon.sanitisers.cohort_pmw`) runs one Online PMW
(:mod:`mbeacon.privacy.online_pmw`) per cohort for every budget holder: one noisy threshold, one
count of positives, one histogram. Each query belongs to an *owner* (a budget holder); an owner
whose ``quota`` of TOPs is spent, or any owner once the cohort's ``c`` are, is answered from the
synthetic histogram with no test (flag UNANSWERED, the synthetic answer, no count). Which owner asks
is public and the quotas are counts of earlier outputs, so the run is one Online PMW run against an
adaptive adversary: ``eps1 + eps2 + eps3`` for the cohort, whatever the number of owners
(docs/privacy.md, "The cohort's accountant", Theorem 4).

:func:`cohort_pmw_batch` is that run on one probe's binned histogram, vectorised over independent
runs, for the statistical audit; its broken twin (``_exact_past_quota``) answers an owner past its
quota from the data instead of the synthetic state, a quota kept without keeping the promise.
"""

from __future__ import annotations

import numpy as np

from mbeacon.privacy.noise import RNGLike, as_source, lattice_laplace
from mbeacon.privacy.online_pmw import OnlinePMWParams, _check_prior
from mbeacon.privacy.sparse_vector import BOT, TOP, UNANSWERED
from mbeacon.privacy.svt2_noisy import NoisyRelease
from mbeacon.privacy.validation import integer

__all__ = ["cohort_pmw_batch"]


def cohort_pmw_batch(
    owners: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    alpha: np.ndarray,
    prior: np.ndarray,
    params: OnlinePMWParams,
    quota: int,
    *,
    runs: int,
    rng: RNGLike = None,
    _exact_past_quota: bool = False,
) -> NoisyRelease:
    """``runs`` independent cohort runs over one stream of queries at one probe.

    ``owners[j]`` owns query ``j`` (whole numbers from 0), ``[lo[j], hi[j])`` its bins, ``alpha`` the
    cohort's counts (``queries`` or ``runs x queries``). Privacy cost: ``params.epsilon`` for the cohort
    (the module docstring); ``_exact_past_quota`` is for the audit's broken twin only.
    """
    h0 = _check_prior(prior)
    if h0.ndim != 1:
        raise ValueError("prior must be one probe's histogram")
    owners = np.asarray(owners, dtype=np.int64)
    lo, hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    k = owners.size
    counts_in = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (runs, k))
    quota = integer(quota, "quota")
    source = as_source(rng)
    n, t = params.n, params.count_threshold
    z = np.asarray(lattice_laplace(params.threshold_scale, 1.0, runs, source), dtype=np.float64)
    spent = np.zeros(runs, dtype=np.int64)
    used = np.zeros((runs, int(owners.max()) + 1), dtype=np.int64)
    h = np.tile(h0, (runs, 1))
    flags = np.full((runs, k), UNANSWERED, dtype=np.int8)
    answers = np.zeros((runs, k), dtype=np.int8)
    counts = np.full((runs, k), np.nan)
    rows = np.arange(runs)
    for j in range(k):
        s = n * h[:, lo[j] : hi[j]].sum(axis=1)
        a = counts_in[:, j]
        yes = s >= params.threshold
        within = used[:, owners[j]] < quota
        live = (spent < params.c) & within
        q = np.where(yes, t - 1 - a, a - t)
        nu = np.asarray(lattice_laplace(params.query_scale, 1.0, runs, source), dtype=np.float64)
        top = live & (q + nu >= params.margin + z)
        v = a + np.asarray(lattice_laplace(params.release_scale, 1.0, runs, source), dtype=np.float64)
        flags[:, j] = np.where(top, TOP, np.where(live, BOT, UNANSWERED))
        untested = yes if not _exact_past_quota else np.where(within, yes, a >= params.threshold)
        answers[:, j] = np.where(top, v >= params.threshold, untested)
        counts[top, j] = v[top]
        spent[top] += 1
        used[top, owners[j]] += 1
        whole = lo[j] <= 0 and hi[j] >= h0.size
        if not whole and top.any():  # the TOPs' runs move their histogram to the released count
            target = np.clip(v[top] / n, 0.5 / n, 1.0 - 0.5 / n)
            moved = h[rows[top], :]
            inside = moved[:, lo[j] : hi[j]].sum(axis=1)
            up, down = target / inside, (1.0 - target) / (1.0 - inside)
            scale = np.where(
                (np.arange(h0.size) >= lo[j]) & (np.arange(h0.size) < hi[j]), up[:, None], down[:, None]
            )
            h[rows[top], :] = moved * scale
    return NoisyRelease(flags, answers, counts)

"""PrivateSQL's truncation: learn a per-patient contribution bound with AboveThreshold, keep at most
that many samples of each patient, and count at that sensitivity (Kotsogiannis et al., PVLDB 12(11),
2019; seeds/svt-tutorial, case study 2).

A cohort where one patient gives several samples (tissues, time points, replicates) makes a count of
samples change by up to the largest number of samples one patient has when that patient is added or
removed: the count's sensitivity is that maximum, and the maximum itself is private. PrivateSQL bounds
it by truncation: each patient keeps at most ``b`` samples, so the truncated count has sensitivity
``b``, whatever the data. ``b`` is either declared by the data custodian (public, free) or learned
from the data with the sparse vector technique, as PrivateSQL learns its truncation threshold.

**Learning.** With ``m_p`` the number of samples of patient ``p``, AboveThreshold runs over the public
candidate bounds ``b = 1, 2, ..., max_bound - 1`` with the queries

    q_b(D) = -#{patients p with m_p > b}

(minus the number of patients the bound ``b`` would truncate). Adding or removing one patient, with
all of their samples, moves every ``q_b`` by at most 1: sensitivity 1. ``q_b`` rises to 0 once ``b``
passes every patient's contribution; the first noisy ``q_b`` at or above the threshold gives the
bound ``b``. If none fires, the bound is ``max_bound``. (This is the textbook's clipping-bound query,
:mod:`mbeacon.privacy.research.clipping`, on the integer grid ``1..max_bound`` with step 1, applied to the
per-patient contributions.)

The threshold defaults to one query-noise scale below 0 (``-4/eps``; AboveThreshold's query noise is
``Lap(4/eps)``): past the data it fires at the first or second candidate, and below it only where few
patients (a handful of noise scales' worth) would lose samples. On an integer grid an overshoot costs
a bound one or two higher; the textbook's threshold 0 overshoots more often.

**Truncation rule** (data-independent): a patient keeps their *first* ``b`` samples in the cohort's
sample order (the order of the input file's columns), whatever their values. Which samples are kept
depends only on the patient ids and the sample order, never on a methylation value, so it cannot leak
one, and adding or removing one patient leaves every other patient's kept samples unchanged.

**Counting.** The number of kept samples with a value in a range has sensitivity ``b``; mechanisms
take ``b`` as their ``sensitivity`` (SVT² in the service, a lattice-Laplace count here).

Privacy cost: learning the bound costs ``epsilon`` (AboveThreshold, whatever ``max_bound``); the
count released after it costs ``epsilon_count`` at sensitivity ``b`` (``Lap(b/epsilon_count)``); in
all ``epsilon + epsilon_count`` by sequential composition
(:func:`mbeacon.privacy.accounting.truncation_epsilon`). A declared bound costs nothing. The unit of
privacy is the patient: one patient with all of their samples added or removed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mbeacon.privacy import validation
from mbeacon.privacy.noise import RNGLike, as_source, lattice_laplace
from mbeacon.privacy.sparse_vector import TOP, above_threshold_batch
from mbeacon.privacy.validation import integer, positive

__all__ = [
    "DEFAULT_MAX_BOUND",
    "TruncatedCountRelease",
    "bound_queries",
    "contributions",
    "default_threshold",
    "keep_mask",
    "learn_bound",
    "learn_bound_batch",
    "sample_ranks",
    "truncated_count",
    "truncated_count_batch",
]

#: Candidate bounds are ``1..DEFAULT_MAX_BOUND``: more samples than this per patient are kept only if
#: declared. AboveThreshold's cost does not depend on the number of candidates.
DEFAULT_MAX_BOUND = 256
THRESHOLD_SCALES = 1.0  # the default threshold, in AboveThreshold query-noise scales below 0


def default_threshold(epsilon: float) -> float:
    """``-4/eps``: one of AboveThreshold's query-noise scales below 0 (see the module)."""
    return -THRESHOLD_SCALES * 4.0 / positive(epsilon, "epsilon")


def _codes(patient_ids: Sequence | np.ndarray) -> np.ndarray:
    """Each sample's patient as an integer code (patients numbered by first appearance)."""
    ids = np.asarray(patient_ids)
    if ids.ndim != 1:
        raise ValueError("patient_ids must be a 1-D sequence, one patient id per sample")
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64)
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # unique's order -> order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[inverse.ravel()].astype(np.int64)


def contributions(patient_ids: Sequence | np.ndarray) -> np.ndarray:
    """Number of samples of each patient (patients in order of first appearance)."""
    return np.bincount(_codes(patient_ids)).astype(np.int64)


def sample_ranks(patient_ids: Sequence | np.ndarray) -> np.ndarray:
    """Each sample's 0-based position among its patient's samples, in sample order."""
    codes = _codes(patient_ids)
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_codes)) + 1]
    run_start = np.repeat(starts, np.diff(np.r_[starts, codes.size]))
    ranks = np.empty(codes.size, dtype=np.int64)
    ranks[order] = np.arange(codes.size) - run_start
    return ranks


def keep_mask(patient_ids: Sequence | np.ndarray, bound: int) -> np.ndarray:
    """Which samples truncation at ``bound`` keeps: each patient's first ``bound`` in sample order."""
    bound = integer(bound, "bound")
    return sample_ranks(patient_ids) < bound


def truncated_count(in_range: np.ndarray, patient_ids: Sequence | np.ndarray, bound: int) -> int:
    """Kept samples (truncation at ``bound``) that are in range: a count of sensitivity ``bound``."""
    flags = np.asarray(in_range, dtype=bool)
    keep = keep_mask(patient_ids, bound)
    if flags.shape != keep.shape:
        raise ValueError(f"in_range has {flags.size} samples but patient_ids has {keep.size}")
    return int(np.count_nonzero(flags & keep))


def _check_max_bound(max_bound: int) -> int:
    return integer(max_bound, "max_bound", minimum=2)


def _check_contributions(counts: np.ndarray) -> np.ndarray:
    m = np.asarray(counts)
    if m.ndim != 1:
        raise ValueError("contributions must be a 1-D array, one count per patient")
    if m.size and (not np.all(np.isfinite(m)) or np.any(m < 0) or np.any(m != np.round(m))):
        raise ValueError("contributions must be whole numbers >= 0 (samples per patient)")
    return m.astype(np.int64)


def bound_queries(counts: np.ndarray, max_bound: int = DEFAULT_MAX_BOUND) -> np.ndarray:
    """The ``max_bound - 1`` sensitivity-1 queries ``q_b = -#{p: m_p > b}`` for ``b = 1..max_bound-1``."""
    m = np.sort(_check_contributions(counts))
    b = np.arange(1, _check_max_bound(max_bound))
    return (np.searchsorted(m, b, side="right") - m.size).astype(np.float64)


def learn_bound_batch(
    counts: np.ndarray,
    epsilon: float,
    *,
    max_bound: int = DEFAULT_MAX_BOUND,
    threshold: float | None = None,
    runs: int = 1,
    rng: RNGLike = None,
) -> np.ndarray:
    """``runs`` independent learned bounds (int array) from the per-patient ``counts``.

    Privacy cost of each run: ``epsilon`` (AboveThreshold over ``max_bound - 1`` candidates).
    """
    epsilon = positive(epsilon, "epsilon")
    max_bound = _check_max_bound(max_bound)
    runs = integer(runs, "runs")
    threshold = default_threshold(epsilon) if threshold is None else validation.finite(threshold, "threshold")
    queries = bound_queries(counts, max_bound)
    flags = above_threshold_batch(queries, threshold, epsilon, runs=runs, rng=as_source(rng))
    fired = (flags == TOP).any(axis=1)
    return np.where(fired, np.argmax(flags == TOP, axis=1) + 1, max_bound).astype(np.int64)


def learn_bound(
    counts: np.ndarray,
    epsilon: float,
    *,
    max_bound: int = DEFAULT_MAX_BOUND,
    threshold: float | None = None,
    rng: RNGLike = None,
) -> int:
    """PrivateSQL's learned truncation threshold for per-patient ``counts``. Privacy cost: ``epsilon``."""
    runs = learn_bound_batch(counts, epsilon, max_bound=max_bound, threshold=threshold, runs=1, rng=rng)
    return int(runs[0])


@dataclass(frozen=True)
class TruncatedCountRelease:
    """What runs of :func:`truncated_count_batch` release: the learned bound and the noisy count."""

    bound: np.ndarray
    noisy_count: np.ndarray


def truncated_count_batch(
    patient_ids: Sequence | np.ndarray,
    in_range: np.ndarray,
    epsilon: float,
    epsilon_count: float,
    *,
    max_bound: int = DEFAULT_MAX_BOUND,
    threshold: float | None = None,
    runs: int = 1,
    rng: RNGLike = None,
) -> TruncatedCountRelease:
    """``runs`` PrivateSQL counts: learn the bound (``epsilon``), then count the in-range samples
    kept by truncation at it with lattice ``Lap(b/epsilon_count)``.

    Privacy cost of each run: ``epsilon + epsilon_count`` (one patient added or removed).
    """
    epsilon_count = positive(epsilon_count, "epsilon_count")
    flags = np.asarray(in_range, dtype=bool)
    ranks = sample_ranks(patient_ids)
    if flags.shape != ranks.shape:
        raise ValueError(f"in_range has {flags.size} samples but patient_ids has {ranks.size}")
    source = as_source(rng)
    bound = learn_bound_batch(
        contributions(patient_ids), epsilon, max_bound=max_bound, threshold=threshold, runs=runs, rng=source
    )
    # kept-and-in-range count at every bound 1..max_bound: samples of rank < b
    per_rank = np.bincount(ranks[flags], minlength=int(bound.max()))
    at_bound = np.cumsum(per_rank)[bound - 1]
    # lattice Lap(b/eps_count) on b*Z is b times a unit discrete Laplace of scale 1/eps_count
    noise = np.asarray(lattice_laplace(1.0 / epsilon_count, 1.0, runs, source), dtype=np.float64) * bound
    return TruncatedCountRelease(bound, at_bound.astype(np.float64) + noise)

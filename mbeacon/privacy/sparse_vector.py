"""The sparse vector technique (SVT) family, as plain functions over arrays of query answers.

Every mechanism returns an ``int8`` array of flags, one per query: ``TOP`` (1, the noisy answer
reached the noisy threshold), ``BOT`` (0) or ``UNANSWERED`` (-1, the mechanism halted before this
query). Mechanisms that release numbers on ``TOP`` return :class:`NumericAnswers`. Each function has
a ``*_batch`` twin that runs many independent copies at once (``runs x queries``) for audits and
evaluations; the single-run function *is* the batch function with one run, so what the audit measures
is what callers get.

Noise is discrete Laplace on the lattice ``sensitivity * Z`` (:func:`noise.lattice_laplace`), which
has the privacy of continuous ``Lap`` at the same scale; see ``docs/privacy.md``.

Sources: Dwork and Roth's AboveThreshold/Sparse/NumericSparse (Roth's 2011 lecture notes, Algorithms
1-3 of ``seeds/svt-lecture-notes``) and the generalised SVT of Lyu, Su and Li (PVLDB 10(6), 2017).
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np

from mbeacon.privacy import validation
from mbeacon.privacy.noise import RNGLike, as_source, lattice_laplace, lattice_laplace_sf, uniform
from mbeacon.privacy.validation import integer, positive

TOP: int = 1
BOT: int = 0
UNANSWERED: int = -1


class NumericAnswers(NamedTuple):
    """Flags as for indicator mechanisms, and the released value of every ``TOP`` (NaN elsewhere)."""

    flags: np.ndarray
    values: np.ndarray


def _as_runs(answers: np.ndarray, runs: int | None) -> np.ndarray:
    answers = np.asarray(answers, dtype=np.float64)
    if answers.ndim == 1:
        answers = answers[np.newaxis, :]
        if runs is not None:
            answers = np.broadcast_to(answers, (runs, answers.shape[1]))
    elif answers.ndim != 2:
        raise ValueError(f"answers must be 1-D (queries) or 2-D (runs x queries), got {answers.ndim}-D")
    elif runs is not None and answers.shape[0] != runs:
        raise ValueError(f"answers has {answers.shape[0]} runs but runs={runs}")
    if not np.all(np.isfinite(answers)):
        raise ValueError("query answers must be finite numbers")
    return answers


def _thresholds(thresholds: np.ndarray | float, k: int) -> np.ndarray:
    """The thresholds, one per query: a NaN one would fail every comparison and answer BOT unseen."""
    t = np.asarray(thresholds, dtype=np.float64)
    if not np.all(np.isfinite(t)):
        raise ValueError(f"threshold must be a finite number, got {t[~np.isfinite(t)].ravel()[0]}")
    return np.broadcast_to(t, (k,))


def _generalized_noise(
    epsilon1: float, epsilon2: float, c: int, monotonic: bool, sensitivity: float
) -> tuple[int, float, float, float]:
    """The generalised SVT's parameters, checked, and its noise scales: ``rho ~ Lap(D/eps1)`` and
    ``nu ~ Lap(2cD/eps2)`` (``Lap(cD/eps2)`` when ``monotonic``).

    Returns ``(c, D, threshold_scale, query_scale)``.
    """
    epsilon1 = positive(epsilon1, "epsilon1")
    epsilon2 = positive(epsilon2, "epsilon2")
    c = integer(c, "c")
    sensitivity = positive(sensitivity, "sensitivity")
    return c, sensitivity, sensitivity / epsilon1, (1 if monotonic else 2) * c * sensitivity / epsilon2


def sparse_vector_engine(
    answers: np.ndarray,
    thresholds: np.ndarray | float,
    *,
    threshold_scale: float,
    query_scale: float | None,
    c: int | None,
    redraw: bool = False,
    numeric_scale: float | None = None,
    release_noisy_query: bool = False,
    release_gap: bool = False,
    sensitivity: float = 1.0,
    runs: int | None = None,
    rng: RNGLike = None,
) -> NumericAnswers:
    """Run the generic SVT loop on ``runs x queries`` answers, vectorised across runs.

    For each run: ``rho ~ Lap(threshold_scale)``; for each query ``nu ~ Lap(query_scale)`` (no noise
    when ``query_scale`` is None); ``TOP`` when ``q + nu >= T + rho``; on ``TOP`` optionally release
    ``q + Lap(numeric_scale)`` (or ``q + nu`` itself when ``release_noisy_query``, Roth 2011's
    non-private variant, or the noisy gap ``q + nu - (T + rho)`` when ``release_gap``, Ding et al.'s
    free gap), count it, re-draw ``rho`` when ``redraw``, and halt after ``c`` positives
    (never halts when ``c`` is None). The parameters alone decide whether this is private: the public
    mechanisms below and the faulty fixtures in :mod:`mbeacon.privacy.audit.faulty` are thin wrappers.
    """
    source = as_source(rng)
    sensitivity = positive(sensitivity, "sensitivity")
    c = None if c is None else integer(c, "c")
    threshold_scale = positive(threshold_scale, "threshold_scale")
    query_scale = None if query_scale is None else positive(query_scale, "query_scale")
    numeric_scale = None if numeric_scale is None else positive(numeric_scale, "numeric_scale")
    q = _as_runs(answers, runs)
    n_runs, k = q.shape
    t = _thresholds(thresholds, k)

    def noise(scale: float, n: int) -> np.ndarray:
        return lattice_laplace(scale, sensitivity, n, source)

    rho = noise(threshold_scale, n_runs).astype(np.float64)
    count = np.zeros(n_runs, dtype=np.int64)
    alive = np.ones(n_runs, dtype=bool)
    flags = np.full((n_runs, k), UNANSWERED, dtype=np.int8)
    values = np.full((n_runs, k), np.nan)
    for i in range(k):
        if not alive.any():
            break
        nu = noise(query_scale, n_runs) if query_scale is not None else 0.0
        noisy = q[:, i] + nu
        top = (noisy >= t[i] + rho) & alive
        flags[alive, i] = BOT
        flags[top, i] = TOP
        if not top.any():
            continue
        if release_noisy_query:
            values[top, i] = np.broadcast_to(noisy, (n_runs,))[top]
        elif release_gap:
            values[top, i] = (np.broadcast_to(noisy, (n_runs,)) - (t[i] + rho))[top]
        elif numeric_scale is not None:
            values[top, i] = q[top, i] + noise(numeric_scale, int(top.sum()))
        count += top
        if redraw:
            rho[top] = noise(threshold_scale, int(top.sum()))
        if c is not None:
            alive &= count < c
    return NumericAnswers(flags, values)


def _single(result: NumericAnswers) -> NumericAnswers:
    """The one run of a batch of one, with its released values."""
    return NumericAnswers(result.flags[0], result.values[0])


# --- AboveThreshold -------------------------------------------------------------------------------


def above_threshold_batch(
    answers: np.ndarray,
    threshold: float,
    epsilon: float,
    *,
    sensitivity: float = 1.0,
    runs: int | None = None,
    rng: RNGLike = None,
) -> np.ndarray:
    """Batch form of :func:`above_threshold`: ``runs x queries`` flags."""
    epsilon = positive(epsilon, "epsilon")
    sensitivity = positive(sensitivity, "sensitivity")
    return sparse_vector_engine(
        answers,
        threshold,
        threshold_scale=2 * sensitivity / epsilon,
        query_scale=4 * sensitivity / epsilon,
        c=1,
        sensitivity=sensitivity,
        runs=runs,
        rng=rng,
    ).flags


def above_threshold(
    answers: np.ndarray,
    threshold: float,
    epsilon: float,
    *,
    sensitivity: float = 1.0,
    rng: RNGLike = None,
) -> np.ndarray:
    """AboveThreshold (Dwork and Roth, Algorithm 1): flag the first query above a noisy threshold.

    ``T^ = T + Lap(2D/eps)``, ``nu_i ~ Lap(4D/eps)``, halt at the first ``TOP``.
    Privacy cost: ``epsilon``-DP for any number of queries (D = ``sensitivity``).
    """
    return above_threshold_batch(answers, threshold, epsilon, sensitivity=sensitivity, rng=rng)[0]


# --- Sparse ---------------------------------------------------------------------------------------


def sparse_sigma(epsilon: float, c: int, delta: float = 0.0, sensitivity: float = 1.0) -> float:
    """Threshold noise scale of Sparse: ``2cD/eps`` (pure) or ``sqrt(32 c ln(1/delta)) D / eps``."""
    epsilon = positive(epsilon, "epsilon")
    c = integer(c, "c")
    delta = validation.delta(delta, zero=True)
    sensitivity = positive(sensitivity, "sensitivity")
    if delta == 0:
        return 2 * c * sensitivity / epsilon
    return math.sqrt(32 * c * math.log(1 / delta)) * sensitivity / epsilon


def sparse_batch(
    answers: np.ndarray,
    threshold: float,
    epsilon: float,
    c: int,
    *,
    delta: float = 0.0,
    sensitivity: float = 1.0,
    runs: int | None = None,
    rng: RNGLike = None,
) -> np.ndarray:
    """Batch form of :func:`sparse`."""
    c = integer(c, "c")
    sigma = sparse_sigma(epsilon, c, delta, sensitivity)
    return sparse_vector_engine(
        answers,
        threshold,
        threshold_scale=sigma,
        query_scale=2 * sigma,
        c=c,
        redraw=True,
        sensitivity=sensitivity,
        runs=runs,
        rng=rng,
    ).flags


def sparse(
    answers: np.ndarray,
    threshold: float,
    epsilon: float,
    c: int,
    *,
    delta: float = 0.0,
    sensitivity: float = 1.0,
    rng: RNGLike = None,
) -> np.ndarray:
    """Sparse (Dwork and Roth, Algorithm 2): up to ``c`` positives, threshold re-drawn after each.

    ``sigma = 2cD/eps`` when ``delta == 0``, else ``sqrt(32 c ln(1/delta)) D / eps``;
    ``T^ = T + Lap(sigma)``, ``nu_i ~ Lap(2 sigma)``.
    Privacy cost: ``epsilon``-DP when ``delta == 0`` (c AboveThresholds at ``eps/c``, basic
    composition); ``(epsilon, delta)``-DP otherwise (advanced composition, for ``epsilon <= 1``).
    """
    return sparse_batch(answers, threshold, epsilon, c, delta=delta, sensitivity=sensitivity, rng=rng)[0]


# --- NumericSparse --------------------------------------------------------------------------------


def numeric_sparse_batch(
    answers: np.ndarray,
    threshold: float,
    epsilon: float,
    c: int,
    *,
    delta: float = 0.0,
    sensitivity: float = 1.0,
    runs: int | None = None,
    rng: RNGLike = None,
) -> NumericAnswers:
    """Batch form of :func:`numeric_sparse`."""
    epsilon = positive(epsilon, "epsilon")
    c = integer(c, "c")
    delta = validation.delta(delta, zero=True)
    sensitivity = positive(sensitivity, "sensitivity")
    _require_lattice(answers, sensitivity)
    eps1, eps2 = 8 * epsilon / 9, 2 * epsilon / 9
    sigma1 = sparse_sigma(eps1, c, delta / 2 if delta else 0.0, sensitivity)
    sigma2 = sparse_sigma(eps2, c, delta / 2 if delta else 0.0, sensitivity)
    return sparse_vector_engine(
        answers,
        threshold,
        threshold_scale=sigma1,
        query_scale=2 * sigma1,
        c=c,
        redraw=True,
        numeric_scale=sigma2,
        sensitivity=sensitivity,
        runs=runs,
        rng=rng,
    )


def numeric_sparse(
    answers: np.ndarray,
    threshold: float,
    epsilon: float,
    c: int,
    *,
    delta: float = 0.0,
    sensitivity: float = 1.0,
    rng: RNGLike = None,
) -> NumericAnswers:
    """NumericSparse (Dwork and Roth, Algorithm 3): Sparse that also releases a noisy value on TOP.

    ``eps1 = 8 eps/9`` runs Sparse; every ``TOP`` releases ``q + Lap(sigma(eps2))`` with
    ``eps2 = 2 eps/9``. Released values are on the lattice ``sensitivity * Z``: answers must lie on it
    (counts with sensitivity 1), otherwise the noise would reveal their fractional part.
    Privacy cost: ``epsilon``-DP (``delta == 0``) or ``(epsilon, delta)``-DP.
    """
    result = numeric_sparse_batch(
        answers, threshold, epsilon, c, delta=delta, sensitivity=sensitivity, rng=rng
    )
    return _single(result)


def _require_lattice(answers: np.ndarray, sensitivity: float) -> None:
    units = np.asarray(answers, dtype=np.float64) / sensitivity
    if not np.allclose(units, np.round(units), rtol=0, atol=1e-9):
        raise ValueError(
            "numeric release needs answers on the lattice sensitivity * Z (e.g. integer counts "
            "with sensitivity 1); lattice noise would otherwise reveal their fractional part"
        )


# --- the generalised SVT of Lyu, Su and Li --------------------------------------------------------


def generalized_svt_allocate(
    epsilon: float, c: int, *, monotonic: bool = False, epsilon3: float = 0.0
) -> tuple[float, float, float]:
    """Split ``epsilon`` into ``(eps1, eps2, eps3)`` minimising the comparison-noise variance.

    ``eps1 : eps2 = 1 : (2c)^(2/3)`` in general and ``1 : c^(2/3)`` for monotonic queries
    (Lyu, Su and Li, Section 4.2); ``eps3`` (numeric answers) is set aside first.
    """
    epsilon = positive(epsilon, "epsilon")
    c = integer(c, "c")
    epsilon3 = validation.non_negative(epsilon3, "epsilon3")
    if epsilon3 >= epsilon:
        raise ValueError(f"epsilon3 must be less than epsilon ({epsilon}), got {epsilon3}")
    rest = epsilon - epsilon3
    ratio = (c if monotonic else 2 * c) ** (2 / 3)
    eps1 = rest / (1 + ratio)
    return eps1, rest - eps1, float(epsilon3)


def generalized_svt_batch(
    answers: np.ndarray,
    thresholds: np.ndarray | float,
    epsilon1: float,
    epsilon2: float,
    c: int,
    *,
    epsilon3: float = 0.0,
    monotonic: bool = False,
    sensitivity: float = 1.0,
    runs: int | None = None,
    rng: RNGLike = None,
) -> NumericAnswers:
    """Batch form of :func:`generalized_svt`."""
    c, sensitivity, threshold_scale, query_scale = _generalized_noise(
        epsilon1, epsilon2, c, monotonic, sensitivity
    )
    epsilon3 = validation.non_negative(epsilon3, "epsilon3")
    if epsilon3 > 0:
        _require_lattice(answers, sensitivity)
    return sparse_vector_engine(
        answers,
        thresholds,
        threshold_scale=threshold_scale,
        query_scale=query_scale,
        c=c,
        numeric_scale=c * sensitivity / epsilon3 if epsilon3 > 0 else None,
        sensitivity=sensitivity,
        runs=runs,
        rng=rng,
    )


def generalized_svt(
    answers: np.ndarray,
    thresholds: np.ndarray | float,
    epsilon1: float,
    epsilon2: float,
    c: int,
    *,
    epsilon3: float = 0.0,
    monotonic: bool = False,
    sensitivity: float = 1.0,
    rng: RNGLike = None,
) -> NumericAnswers:
    """Generalised SVT (Lyu, Su and Li, Algorithm 7 / "SVT-S") with per-query thresholds ``T_i``.

    ``rho ~ Lap(D/eps1)`` once; ``nu_i ~ Lap(2cD/eps2)`` (``Lap(cD/eps2)`` when every neighbouring
    change moves all answers in the same direction, ``monotonic=True``); ``TOP`` releases
    ``q_i + Lap(cD/eps3)`` when ``eps3 > 0``; halt after ``c`` positives.
    Privacy cost: ``(eps1 + eps2 + eps3)``-DP.
    """
    result = generalized_svt_batch(
        answers,
        thresholds,
        epsilon1,
        epsilon2,
        c,
        epsilon3=epsilon3,
        monotonic=monotonic,
        sensitivity=sensitivity,
        rng=rng,
    )
    return _single(result)


def svt_with_gap_batch(
    answers: np.ndarray,
    thresholds: np.ndarray | float,
    epsilon: float,
    c: int,
    *,
    threshold_share: float | None = None,
    monotonic: bool = False,
    sensitivity: float = 1.0,
    runs: int | None = None,
    rng: RNGLike = None,
) -> NumericAnswers:
    """Batch form of :func:`svt_with_gap`."""
    epsilon = positive(epsilon, "epsilon")
    if threshold_share is None:
        eps1, eps2, _ = generalized_svt_allocate(epsilon, c, monotonic=monotonic)
    else:
        share = validation.fraction(threshold_share, "threshold_share")
        eps1, eps2 = share * epsilon, (1 - share) * epsilon
    c, sensitivity, threshold_scale, query_scale = _generalized_noise(eps1, eps2, c, monotonic, sensitivity)
    return sparse_vector_engine(
        answers,
        thresholds,
        threshold_scale=threshold_scale,
        query_scale=query_scale,
        c=c,
        release_gap=True,
        sensitivity=sensitivity,
        runs=runs,
        rng=rng,
    )


def svt_with_gap(
    answers: np.ndarray,
    thresholds: np.ndarray | float,
    epsilon: float,
    c: int,
    *,
    threshold_share: float | None = None,
    monotonic: bool = False,
    sensitivity: float = 1.0,
    rng: RNGLike = None,
) -> NumericAnswers:
    """SVT that also releases, for each TOP, the noisy gap ``q_i + nu_i - (T_i + rho)`` for free.

    Ding, Wang, Zhang and Kifer, "Free gap information from the differentially private sparse vector
    and noisy max mechanisms" (PVLDB 13(3), 2019): the generalised SVT's comparison already pays for
    the gap; releasing it costs nothing more. ``eps1 : eps2`` defaults to Lyu, Su and Li's optimal
    split (``threshold_share`` sets ``eps1 / eps`` instead). The gap tells an analyst how far above the
    threshold a positive was, which sharpens any later estimate of it.
    Privacy cost: ``epsilon``-DP. (Contrast Roth 2011, which releases ``q_i + nu_i`` without the
    threshold noise and is not private: ``mbeacon audit`` tells them apart.)
    """
    result = svt_with_gap_batch(
        answers,
        thresholds,
        epsilon,
        c,
        threshold_share=threshold_share,
        monotonic=monotonic,
        sensitivity=sensitivity,
        rng=rng,
    )
    return _single(result)


def svt_retraversal_batch(
    answers: np.ndarray,
    threshold: float,
    epsilon1: float,
    epsilon2: float,
    c: int,
    *,
    increment: float,
    monotonic: bool = False,
    sensitivity: float = 1.0,
    max_passes: int | None = 1000,
    runs: int | None = None,
    rng: RNGLike = None,
) -> np.ndarray:
    """Batch form of :func:`svt_retraversal`: ``runs x c`` selected positions, -1 padded.

    ``answers`` is one vector of item scores (``runs`` copies) or ``runs x items`` (e.g. a different
    traversal order per run). Given a run's threshold noise ``rho``, every test of item ``i`` succeeds
    independently with ``p_i = P(q_i + nu >= T + increment + rho)`` (exact lattice-Laplace tail), so
    the pass in which ``i`` is first selected is Geometric(``p_i``), and the stream halts at the
    ``c``-th success in (pass, position) order. Sampling those passes directly (one uniform per item)
    has the distribution of walking every (pass, item) of the stream, which ``tests`` checks against
    a straightforward walk, at a tiny fraction of its cost when a raised threshold makes passes sparse.
    """
    source = as_source(rng)
    c, sensitivity, threshold_scale, query_scale = _generalized_noise(
        epsilon1, epsilon2, c, monotonic, sensitivity
    )
    raised = validation.finite(threshold, "threshold") + validation.finite(increment, "increment")
    if max_passes is not None:
        max_passes = integer(max_passes, "max_passes")
    q = _as_runs(answers, runs)
    n_runs, n = q.shape
    rho = lattice_laplace(threshold_scale, sensitivity, n_runs, source).astype(np.float64)
    p = lattice_laplace_sf(raised + rho[:, np.newaxis] - q, query_scale, sensitivity)
    u = uniform((n_runs, n), source)  # (0, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        first_pass = np.maximum(np.ceil(np.log(u) / np.log1p(-p)), 1.0)  # inverse-CDF geometric
    first_pass[~np.isfinite(first_pass) | (p <= 0)] = np.inf
    if max_passes is not None:
        first_pass[first_pass > max_passes] = np.inf
    # successes ordered by (pass, position); exact while passes stay below 2^53 / items
    key = np.where(np.isfinite(first_pass), first_pass * n + np.arange(n), np.inf)
    take = min(c, n)
    part = np.argpartition(key, take - 1, axis=1)[:, :take]
    part = np.take_along_axis(part, np.argsort(np.take_along_axis(key, part, axis=1), axis=1), axis=1)
    picked = np.full((n_runs, c), -1, dtype=np.int64)
    picked[:, :take] = np.where(np.isfinite(np.take_along_axis(key, part, axis=1)), part, -1)
    short = int(np.count_nonzero(picked[:, take - 1] < 0))
    if short and max_passes is not None:
        warnings.warn(
            f"svt_retraversal: {short} of {n_runs} runs hit max_passes={max_passes} with fewer than "
            f"c={c} items selected (the threshold increment may be too high for this budget)",
            RuntimeWarning,
            stacklevel=2,
        )
    return picked


def svt_retraversal(
    answers: np.ndarray,
    threshold: float,
    epsilon1: float,
    epsilon2: float,
    c: int,
    *,
    increment: float,
    monotonic: bool = False,
    sensitivity: float = 1.0,
    max_passes: int | None = 1000,
    rng: RNGLike = None,
) -> np.ndarray:
    """Non-interactive SVT with retraversal (Lyu, Su and Li, Section 5): select ``c`` items.

    Runs one generalised SVT over the stream "all not-yet-selected items, again and again" against
    the raised threshold ``threshold + increment`` until ``c`` items are selected (or ``max_passes``
    passes, with a RuntimeWarning: the cap is data-independent, so stopping early is still private, but
    the caller should know; ``max_passes=None`` retraverses until ``c`` items are found, as the paper
    describes). Returns the selected item indices in selection order.
    Privacy cost: ``(eps1 + eps2)``-DP: it is one SVT run (one threshold noise, ``c`` positives)
    whose query stream is chosen from public information only (which items were already selected).
    """
    picked = svt_retraversal_batch(
        answers,
        threshold,
        epsilon1,
        epsilon2,
        c,
        increment=increment,
        monotonic=monotonic,
        sensitivity=sensitivity,
        max_passes=max_passes,
        runs=1,
        rng=rng,
    )[0]
    return picked[picked >= 0]

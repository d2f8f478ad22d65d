"""Range queries worth answering (the textbook's ``range_query_svt``, seeds/svt-textbook-chapter).

A range query counts the rows whose value lies in a range: sensitivity 1, but the ranges overlap, so
answering ``k`` of them with the Laplace mechanism costs ``k`` times one answer. Small counts drown in
that noise anyway. Sparse (Dwork and Roth, Algorithm 2; seeds/svt-lecture-notes) picks the first
``c`` queries whose count is above a threshold ``T`` and the Laplace mechanism answers only those:

    Sparse(counts, T, c, eps_sparse)              sigma = 2c/eps_sparse, T^ = T + Lap(sigma) re-drawn
                                                  after each TOP, nu_i ~ Lap(2 sigma), halt at c TOPs
    on each TOP i:  release counts_i + Lap(c/eps_answers)

Privacy cost: ``eps_sparse + eps_answers = epsilon``, **whatever the number of queries**. Sparse is
``eps_sparse``-DP for any stream length (c AboveThresholds at ``eps_sparse/c`` each, sequential
composition: the textbook and the lecture notes' Theorem); at most ``c`` answers are released, each a
sensitivity-1 count with ``Lap(c/eps_answers)``, i.e. ``eps_answers/c``-DP, ``eps_answers`` for ``c``
of them. The textbook splits evenly: ``eps_sparse = eps/2`` and every answer at ``eps/(2c)``, so the
whole costs twice the sparse part; ``sparse_share`` sets another split. (The lecture notes' numeric
variant answers with ``Lap(sigma(eps/2)) = Lap(4c/eps)``, twice the noise for the same total; Dwork
and Roth's NumericSparse, :func:`~mbeacon.privacy.sparse_vector.numeric_sparse`, is this mechanism
with the split 8:1 and that doubled noise scale.) It holds for one row replaced (counts may move in
different directions) as for one added or removed.

Noise is lattice Laplace on the integers: counts are integers, so every comparison is exact and the
released answers are integers (no floating-point least-significant bits to read).
"""

from __future__ import annotations

import numpy as np

from mbeacon.privacy.noise import RNGLike
from mbeacon.privacy.sparse_vector import NumericAnswers, sparse_sigma, sparse_vector_engine
from mbeacon.privacy.validation import fraction, integer, positive

__all__ = [
    "range_counts",
    "range_query_split",
    "range_query_svt",
    "range_query_svt_batch",
]


def range_counts(values: np.ndarray, lows: np.ndarray, highs: np.ndarray) -> np.ndarray:
    """The count of ``values`` in each closed range ``[lows[i], highs[i]]`` (one sort, two searches)."""
    x = np.sort(np.asarray(values, dtype=np.float64).ravel())
    lows, highs = np.asarray(lows, dtype=np.float64), np.asarray(highs, dtype=np.float64)
    if lows.shape != highs.shape:
        raise ValueError(f"lows and highs must have the same shape, got {lows.shape} and {highs.shape}")
    if np.any(lows > highs):
        raise ValueError("every range needs low <= high")
    return (np.searchsorted(x, highs, side="right") - np.searchsorted(x, lows, side="left")).astype(np.int64)


def range_query_split(epsilon: float, c: int, sparse_share: float = 0.5) -> tuple[float, float, float]:
    """``(eps_sparse, eps_answers, answer_scale)``: the budget of Sparse, of the ``c`` answers, and
    the Laplace scale ``c/eps_answers`` of each answer (``2c/eps`` with the textbook's even split)."""
    epsilon = positive(epsilon, "epsilon")
    c = integer(c, "c")
    share = fraction(sparse_share, "sparse_share")
    eps_sparse = epsilon * share
    eps_answers = epsilon - eps_sparse
    return eps_sparse, eps_answers, c / eps_answers


def range_query_svt_batch(
    counts: np.ndarray,
    threshold: float,
    epsilon: float,
    c: int,
    *,
    sparse_share: float = 0.5,
    runs: int | None = None,
    rng: RNGLike = None,
) -> NumericAnswers:
    """Batch form of :func:`range_query_svt`: ``runs x queries`` flags and released answers."""
    eps_sparse, _, answer_scale = range_query_split(epsilon, c, sparse_share)
    c = integer(c, "c")
    q = np.asarray(counts, dtype=np.float64)
    if not np.all(np.isfinite(q)) or np.any(q != np.round(q)):
        raise ValueError("counts must be whole numbers: lattice noise would reveal a fractional part")
    sigma = sparse_sigma(eps_sparse, c)
    return sparse_vector_engine(
        q,
        threshold,
        threshold_scale=sigma,
        query_scale=2 * sigma,
        c=c,
        redraw=True,
        numeric_scale=answer_scale,
        runs=runs,
        rng=rng,
    )


def range_query_svt(
    counts: np.ndarray,
    threshold: float,
    epsilon: float,
    c: int,
    *,
    sparse_share: float = 0.5,
    rng: RNGLike = None,
) -> NumericAnswers:
    """Answer only the range queries worth answering: the first ``c`` whose count is above ``threshold``.

    ``counts`` are the true counts of the queries in stream order (:func:`range_counts` computes them).
    Returns flags (TOP: answered, BOT: below the threshold, UNANSWERED: after the ``c``-th TOP) and the
    released noisy count of every TOP (NaN elsewhere).
    Privacy cost: ``epsilon`` (``sparse_share * epsilon`` for Sparse, the rest for the answers), for
    any number of queries.
    """
    result = range_query_svt_batch(counts, threshold, epsilon, c, sparse_share=sparse_share, rng=rng)
    return NumericAnswers(result.flags[0], result.values[0])

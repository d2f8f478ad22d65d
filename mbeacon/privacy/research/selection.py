"""Private selection: exponential mechanism, report-noisy-max, top-k, and Durfee and Rogers'
unknown-domain top-k (NeurIPS 2019; its pay-what-you-get budget is in :mod:`mbeacon.privacy.accounting`).

The exponential mechanism is sampled with the Gumbel-max trick: ``argmax(u + Gumbel(2D/eps))`` picks
``i`` with probability proportional to ``exp(eps * u_i / (2D))``; the one-shot top-k (the ``k``
largest Gumbel-perturbed scores, in order) has the distribution of ``k`` peeled exponential
mechanisms (Durfee and Rogers, Lemma 4.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mbeacon.privacy import validation
from mbeacon.privacy.noise import RNGLike, as_source, gumbel, lattice_laplace
from mbeacon.privacy.validation import integer, positive


def _scores(scores: np.ndarray) -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim not in (1, 2) or s.shape[-1] == 0:
        raise ValueError("scores must be a non-empty 1-D vector (or 2-D runs x items)")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite")
    return s


def _batch_scores(scores: np.ndarray, runs: int) -> np.ndarray:
    s = _scores(scores)
    return np.broadcast_to(s, (runs, s.shape[-1])) if s.ndim == 1 else s


def _em_scale(epsilon: float, sensitivity: float, monotonic: bool) -> float:
    epsilon = positive(epsilon, "epsilon")
    return (1.0 if monotonic else 2.0) * positive(sensitivity, "sensitivity") / epsilon


def exponential_mechanism_batch(
    scores: np.ndarray,
    epsilon: float,
    *,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    runs: int = 1,
    rng: RNGLike = None,
) -> np.ndarray:
    """Batch form of :func:`exponential_mechanism`: one selected index per run."""
    s = _batch_scores(scores, runs)
    noise = gumbel(_em_scale(epsilon, sensitivity, monotonic), s.shape, rng)
    return np.argmax(s + noise, axis=-1)


def exponential_mechanism(
    scores: np.ndarray,
    epsilon: float,
    *,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    rng: RNGLike = None,
) -> int:
    """Select index ``i`` with probability proportional to ``exp(eps * u_i / (2D))``.

    ``monotonic=True`` (all scores move in the same direction between neighbours, e.g. counts)
    uses ``exp(eps * u_i / D)``. Privacy cost: ``epsilon``-DP (and ``epsilon``-bounded-range).
    """
    return int(
        exponential_mechanism_batch(scores, epsilon, sensitivity=sensitivity, monotonic=monotonic, rng=rng)[0]
    )


def report_noisy_max_batch(
    scores: np.ndarray,
    epsilon: float,
    *,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    runs: int = 1,
    rng: RNGLike = None,
) -> np.ndarray:
    """Batch form of :func:`report_noisy_max`."""
    s = _batch_scores(scores, runs)
    scale = _em_scale(epsilon, sensitivity, monotonic)
    noise = lattice_laplace(scale, sensitivity, s.shape, rng)
    return np.argmax(s + noise, axis=-1)


def report_noisy_max(
    scores: np.ndarray,
    epsilon: float,
    *,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    rng: RNGLike = None,
) -> int:
    """Report-noisy-max with Laplace noise: the index of the largest ``u_i + Lap(2D/eps)``.

    Only the index is released. ``Lap(D/eps)`` when ``monotonic``. Ties (possible with lattice
    noise) go to the lowest index, a fixed data-independent rule that keeps the usual proof.
    Privacy cost: ``epsilon``-DP.
    """
    return int(
        report_noisy_max_batch(scores, epsilon, sensitivity=sensitivity, monotonic=monotonic, rng=rng)[0]
    )


def top_k_batch(
    scores: np.ndarray,
    k: int,
    epsilon: float,
    *,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    runs: int = 1,
    rng: RNGLike = None,
) -> np.ndarray:
    """Batch form of :func:`top_k`: ``runs x k`` indices."""
    s = _batch_scores(scores, runs)
    k = integer(k, "k")
    if k > s.shape[-1]:
        raise ValueError(f"k must be between 1 and the number of items ({s.shape[-1]})")
    epsilon = positive(epsilon, "epsilon")
    noisy = s + gumbel(_em_scale(epsilon / k, sensitivity, monotonic), s.shape, rng)
    part = np.argpartition(-noisy, k - 1, axis=-1)[:, :k]
    order = np.argsort(-np.take_along_axis(noisy, part, axis=-1), axis=-1)
    return np.take_along_axis(part, order, axis=-1)


def top_k(
    scores: np.ndarray,
    k: int,
    epsilon: float,
    *,
    sensitivity: float = 1.0,
    monotonic: bool = False,
    rng: RNGLike = None,
) -> np.ndarray:
    """The ``k`` items with the largest Gumbel-perturbed scores, best first.

    Equivalent to peeling ``k`` exponential mechanisms at ``eps/k`` each (the EM baseline of Lyu,
    Su and Li's non-interactive comparison). Privacy cost: ``epsilon``-DP (basic composition).
    """
    return top_k_batch(scores, k, epsilon, sensitivity=sensitivity, monotonic=monotonic, rng=rng)[0]


# --- Durfee and Rogers: top-k over an unknown domain ----------------------------------------------


@dataclass(frozen=True)
class TopKRelease:
    """Items released by an unknown-domain top-k query, best first (counts only for Algorithm 1)."""

    items: tuple
    counts: tuple[float, ...] | None

    def __len__(self) -> int:
        return len(self.items)


def _true_top(histogram: dict, kbar: int) -> tuple[list, np.ndarray, float]:
    if not histogram:
        return [], np.empty(0), 0.0
    items = list(histogram)
    counts = np.asarray([histogram[i] for i in items], dtype=np.float64)
    if np.any(counts < 0) or not np.all(np.isfinite(counts)):
        raise ValueError("histogram counts must be finite and >= 0")
    order = np.argsort(-counts, kind="stable")
    top = order[:kbar]
    # h_(kbar+1): the first count *not* among the top kbar (0 if the domain seen is that small)
    h_next = float(counts[order[kbar]]) if order.size > kbar else 0.0
    return [items[i] for i in top], counts[top], h_next


def unknown_domain_top_k_restricted(
    histogram: dict,
    k: int,
    kbar: int,
    epsilon: float,
    delta: float,
    *,
    restricted_sensitivity: int,
    rng: RNGLike = None,
) -> TopKRelease:
    """Durfee and Rogers, Algorithm 1: known only through its true top-``kbar`` items, with
    ``Delta``-restricted sensitivity (one user changes at most ``Delta`` counts, each by at most 1).

    ``h_perp = h_(kbar+1) + 1 + ln(Delta/delta)/eps + Lap(1/eps)``; ``h_i + Lap(1/eps)`` for the
    top ``kbar``; release (item, noisy count) for the at most ``k`` largest noisy counts above
    ``h_perp``. (The slides omit the ``/eps`` of the offset; it is needed for the units to agree.)
    Privacy cost: ``(Delta * epsilon, delta)``-DP per query (Laplace mechanism on ``Delta`` counts
    plus the probability ``delta`` that an item outside the top ``kbar`` would have passed).
    """
    source = as_source(rng)
    k, kbar = integer(k, "k"), integer(kbar, "kbar")
    epsilon, delta = positive(epsilon, "epsilon"), validation.delta(delta)
    restricted_sensitivity = integer(restricted_sensitivity, "restricted_sensitivity")
    items, counts, h_next = _true_top(histogram, kbar)
    offset = 1 + math.log(restricted_sensitivity / delta) / epsilon
    h_perp = h_next + offset + lattice_laplace(1 / epsilon, 1.0, None, source)
    noisy = counts + lattice_laplace(1 / epsilon, 1.0, counts.size, source)
    order = [i for i in np.argsort(-noisy, kind="stable") if noisy[i] > h_perp][:k]
    return TopKRelease(tuple(items[i] for i in order), tuple(float(noisy[i]) for i in order))


def unknown_domain_top_k(
    histogram: dict,
    k: int,
    kbar: int,
    epsilon: float,
    delta: float,
    *,
    rng: RNGLike = None,
) -> TopKRelease:
    """Durfee and Rogers, Algorithm 2: unknown domain, unrestricted sensitivity, Gumbel noise.

    ``h_perp = h_(kbar+1) + 1 + ln(kbar/delta)/eps + Gumbel(1/eps)``; ``h_i + Gumbel(1/eps)`` for
    the top ``kbar``; release, in order, at most ``k`` items whose noisy count beats ``h_perp`` (no
    counts). Privacy cost (pay-what-you-get): a query that returns ``j`` items costs ``j + 1``
    ``epsilon``-bounded-range units and ``delta``; charge it to a
    :class:`~mbeacon.privacy.accounting.PayWhatYouGet` budget.
    """
    source = as_source(rng)
    k, kbar = integer(k, "k"), integer(kbar, "kbar")
    epsilon, delta = positive(epsilon, "epsilon"), validation.delta(delta)
    items, counts, h_next = _true_top(histogram, kbar)
    offset = 1 + math.log(kbar / delta) / epsilon
    h_perp = h_next + offset + gumbel(1 / epsilon, None, source)
    noisy = counts + gumbel(1 / epsilon, counts.size, source)
    order = [i for i in np.argsort(-noisy, kind="stable") if noisy[i] > h_perp][:k]
    return TopKRelease(tuple(items[i] for i in order), None)

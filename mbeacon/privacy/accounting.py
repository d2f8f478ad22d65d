"""What the mechanisms cost: one rule for each, and the composition theorems that add costs up.

* **SVT²** (``docs/privacy.md``, Theorems 1 and 2): a threshold pair costs ``2 eps1`` and each
  positive (TOP) ``2 eps2 / c``. The single-pair variant draws its one pair up front; ``redraw``
  draws a new pair after every positive but the last, so after ``j`` positives it has paid for
  ``min(j + 1, c)`` pairs. :func:`svt2_spent` is the cost so far; :func:`svt2_epsilon`, the cost of
  a whole run, is the cost at ``j = c``: ``2(eps1 + eps2)``, or ``2(c eps1 + eps2)`` with redraw.
  A noisy count released with each positive (``count_epsilon``) adds ``count_epsilon / c`` a positive.
* **Online PMW** (:func:`online_pmw_spent`): ``eps1`` up front and ``(eps2 + eps3) / c`` a positive.
* **Composition** of ``m`` mechanisms: advanced composition (Dwork, Rothblum and Vadhan) for
  ``epsilon``-DP ones, the tighter bounded-range composition (Durfee and Rogers) for
  ``epsilon``-bounded-range ones such as the exponential mechanism.
* **Pay-what-you-get** (Durfee and Rogers §7), the budget of repeated unknown-domain top-k queries,
  is in :mod:`mbeacon.privacy.research.pay_what_you_get` with the selection mechanisms it pays for.

The costs of the other mechanisms are their epsilon as given (their docstrings and
``docs/privacy.md`` state them); the audit checks each one.
"""

from __future__ import annotations

import math

from mbeacon.privacy import validation
from mbeacon.privacy.validation import integer, positive

__all__ = [
    "advanced_composition",
    "auto_clip_epsilon",
    "bounded_range_composition",
    "dssgd_epsilon",
    "online_pmw_spent",
    "range_query_svt_epsilon",
    "svt2_epsilon",
    "svt2_spent",
    "truncation_epsilon",
]


# --- SVT² -------------------------------------------------------------------------------------------


def svt2_spent(
    epsilon1: float,
    epsilon2: float,
    c: int,
    positives: int,
    *,
    redraw: bool,
    count_epsilon: float = 0.0,
) -> float:
    """The epsilon an SVT² run has spent once it has answered ``positives`` TOPs (of at most ``c``).

    ``2 eps1`` for each threshold pair drawn (one, or ``min(positives + 1, c)`` with ``redraw``) plus
    ``(2 eps2 + count_epsilon) / c`` for each positive.
    """
    epsilon1 = positive(epsilon1, "epsilon1")
    epsilon2 = positive(epsilon2, "epsilon2")
    c = integer(c, "c")
    positives = integer(positives, "positives", minimum=0)
    if positives > c:
        raise ValueError(f"positives must be at most c ({c}), got {positives}")
    count_epsilon = validation.non_negative(count_epsilon, "count_epsilon")
    pairs = min(positives + 1, c) if redraw else 1
    per_positive = 2.0 * epsilon2 + count_epsilon
    # a run that has spent all c positives has spent exactly its promised total (x * c / c can be
    # one rounding away from x)
    on_positives = per_positive if positives == c else per_positive * positives / c
    return 2.0 * epsilon1 * pairs + on_positives


def svt2_epsilon(epsilon1: float, epsilon2: float, c: int, *, redraw: bool) -> float:
    """Total privacy cost of one SVT² run: ``2(eps1+eps2)``, or ``2(c*eps1+eps2)`` with redraw."""
    return svt2_spent(epsilon1, epsilon2, c, c, redraw=redraw)


# --- Online PMW (online_pmw.py) ---------------------------------------------------------------------


def online_pmw_spent(epsilon1: float, epsilon2: float, epsilon3: float, c: int, positives: int) -> float:
    """The epsilon an Online PMW run has spent after ``positives`` TOPs (of at most ``c``).

    Lyu, Su and Li's generalised SVT pays ``eps1`` for its threshold up front and
    ``(eps2 + eps3) / c`` for each positive (its query-noise shift and its released measurement);
    a run that has spent all ``c`` positives has spent ``eps1 + eps2 + eps3``.
    """
    epsilon1 = positive(epsilon1, "epsilon1")
    epsilon2 = positive(epsilon2, "epsilon2")
    epsilon3 = positive(epsilon3, "epsilon3")
    c = integer(c, "c")
    positives = integer(positives, "positives", minimum=0)
    if positives > c:
        raise ValueError(f"positives must be at most c ({c}), got {positives}")
    per_positive = epsilon2 + epsilon3
    return epsilon1 + (per_positive if positives == c else per_positive * positives / c)


# --- automatic clipping bound and range queries (clipping.py, range_queries.py) -------------------


def auto_clip_epsilon(epsilon_svt: float, epsilon_sum: float, epsilon_count: float) -> float:
    """Cost of one automatic-clipping release: ``eps_svt + eps_sum + eps_count`` (sequential
    composition of AboveThreshold over any grid, the clipped sum and the count)."""
    return (
        positive(epsilon_svt, "epsilon_svt")
        + positive(epsilon_sum, "epsilon_sum")
        + positive(epsilon_count, "epsilon_count")
    )


def range_query_svt_epsilon(epsilon_sparse: float, answer_scale: float, c: int) -> float:
    """Cost of one ``range_query_svt`` run: ``eps_sparse + c / answer_scale``, for any number of queries.

    Sparse costs ``eps_sparse`` however long the stream; each of at most ``c`` answers is a
    sensitivity-1 count with ``Lap(answer_scale)``, ``1/answer_scale`` each. With the textbook's split
    (``eps/2`` and scale ``2c/eps``) this is ``eps``.
    """
    answers = integer(c, "c") / positive(answer_scale, "answer_scale")
    return positive(epsilon_sparse, "epsilon_sparse") + answers


# --- PrivateSQL's truncation (truncation.py) -------------------------------------------------------


def truncation_epsilon(epsilon_bound: float, epsilon_count: float = 0.0) -> float:
    """Cost of a learned truncation bound (``epsilon_bound``, AboveThreshold over any number of
    candidate bounds) and a count at its sensitivity (``epsilon_count``, 0 if none is released):
    their sum, by sequential composition. A declared bound costs nothing and is not counted here.
    """
    return positive(epsilon_bound, "epsilon_bound") + validation.non_negative(epsilon_count, "epsilon_count")


# --- DSSGD (dssgd.py) -------------------------------------------------------------------------------


def dssgd_epsilon(epsilon_per_epoch: float, epochs: int) -> float:
    """Cost to one DSSGD participant of ``epochs`` epochs at ``epsilon_per_epoch``: their product.

    Each epoch's upload is one :func:`~mbeacon.privacy.research.dssgd.dssgd_select` run (``epsilon``-DP, a
    reduction to NumericSparse) on the participant's data and the public global model; the epochs
    compose sequentially (basic composition; :func:`advanced_composition` gives an
    ``(eps, delta)`` bound for many epochs).
    """
    return positive(epsilon_per_epoch, "epsilon_per_epoch") * integer(epochs, "epochs")


# --- composition ------------------------------------------------------------------------------------


def _composition_arguments(units: int, epsilon: float, delta: float) -> tuple[int, float, float]:
    return (
        integer(units, "units", minimum=None),
        positive(epsilon, "epsilon"),
        validation.delta(delta),
    )


def bounded_range_composition(units: int, epsilon: float, delta: float) -> float:
    """Epsilon of ``units`` adaptively composed ``epsilon``-bounded-range mechanisms at ``delta``.

    Durfee and Rogers (Section 4.2): ``min(m eps, m eps^2 / 8 + eps sqrt(m ln(1/delta) / 2))``.
    """
    units, epsilon, delta = _composition_arguments(units, epsilon, delta)
    if units <= 0:
        return 0.0
    return min(
        units * epsilon,
        units * epsilon**2 / 8 + epsilon * math.sqrt(units * math.log(1 / delta) / 2),
    )


def advanced_composition(units: int, epsilon: float, delta: float) -> float:
    """Dwork, Rothblum and Vadhan: ``m`` ``epsilon``-DP mechanisms are ``(eps', delta)``-DP with
    ``eps' = eps sqrt(2 m ln(1/delta)) + m eps (e^eps - 1)`` (never worse than ``m eps``)."""
    units, epsilon, delta = _composition_arguments(units, epsilon, delta)
    if units <= 0:
        return 0.0
    return min(
        units * epsilon,
        epsilon * math.sqrt(2 * units * math.log(1 / delta)) + units * epsilon * math.expm1(epsilon),
    )

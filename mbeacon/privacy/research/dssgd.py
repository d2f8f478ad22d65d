"""DSSGD's gradient selection (Shokri and Shmatikov, CCS 2015, as the SVT tutorial gives it).

In distributed selective SGD every participant computes a gradient on its own data and uploads only a
few of its coordinates, with noisy values, to a parameter server. Which coordinates, and their values,
are chosen by the sparse vector technique (the tutorial's algorithm for participant ``i``, with budget
``eps`` per epoch, gradient sensitivity ``Df`` and ``c = theta_u * |w|`` uploads):

1. ``eps1 = 8 eps/9``, ``eps2 = 2 eps/9``, ``sigma(x) = 2 c Df / x``; ``r_tau ~ Lap(sigma(eps1))``;
2. take the next coordinate ``j`` in a random order; ``r_w ~ Lap(2 sigma(eps1))``;
3. if ``|bound(g_j, gamma)| + r_w >= tau + r_tau``: upload ``bound(g_j + Lap(sigma(eps2)), gamma)``,
   and after ``c`` uploads halt, else re-draw ``r_tau`` and go on (step 2 after a negative).

This is Dwork and Roth's NumericSparse (:func:`~mbeacon.privacy.sparse_vector.numeric_sparse`, the
same ``8/9 : 2/9`` split and the same noise scales) run over the queries ``|g_j|`` in a random order,
except that a TOP releases the signed ``g_j`` instead of ``|g_j|``. Both have sensitivity ``Df``
(``||a| - |b|| <= |a - b|``), and NumericSparse's proof only uses that the released query has
sensitivity ``Df``: Sparse at ``eps1`` (``c`` AboveThresholds at ``eps1/c``) composed with ``c``
Laplace releases at scale ``2c Df/eps2`` (``eps2/(2c)`` each) costs ``eps1 + eps2/2 = eps``. The
random order is data-independent and the final ``bound(., gamma)`` is post-processing.

**Privacy cost:** ``epsilon``-DP per call (one epoch of one participant), for gradients whose every
coordinate moves by at most ``sensitivity`` between neighbouring data sets. ``T`` epochs cost
``T * epsilon`` (:func:`~mbeacon.privacy.accounting.dssgd_epsilon`, basic composition).

Gradients are floored to the lattice ``sensitivity * Z`` before the run (flooring cannot move two
values more than one lattice step apart when they were at most one step apart), so the lattice noise
of :mod:`~mbeacon.privacy.noise` does not reveal their fractional parts.
"""

from __future__ import annotations

import numpy as np

from mbeacon.privacy.noise import RNGLike, as_source, lattice_laplace, uniform
from mbeacon.privacy.sparse_vector import TOP, NumericAnswers, sparse_sigma, sparse_vector_engine
from mbeacon.privacy.validation import finite, integer, positive


def dssgd_sensitivity(clip: float, n_samples: int) -> float:
    """Sensitivity of one coordinate of a mean gradient whose per-example values lie in ``[-clip, clip]``.

    Replacing one of ``n_samples`` examples moves the mean by at most ``2 * clip / n_samples``.
    """
    clip = positive(clip, "clip")
    n_samples = integer(n_samples, "n_samples")
    return 2.0 * clip / n_samples


def dssgd_upload_count(upload_fraction: float, n_parameters: int) -> int:
    """``c = theta_u * |w|``, at least one: the most coordinates one participant uploads per epoch."""
    upload_fraction = positive(upload_fraction, "upload_fraction")
    if upload_fraction > 1:
        raise ValueError(f"upload_fraction must be in (0, 1], got {upload_fraction}")
    n_parameters = integer(n_parameters, "n_parameters")
    return max(1, round(upload_fraction * n_parameters))


def dssgd_select_batch(
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
    """Batch form of :func:`dssgd_select`: ``runs x parameters`` gradients (one row per participant).

    Each run has its own random order; the flags and values come back in the parameters' own order.
    """
    source = as_source(rng)
    epsilon = positive(epsilon, "epsilon")
    c = integer(c, "c")
    clip = positive(clip, "clip")
    sensitivity = positive(sensitivity, "sensitivity")
    threshold = finite(threshold, "threshold")
    g = np.asarray(gradients, dtype=np.float64)
    if g.ndim == 1:
        g = np.broadcast_to(g, (1 if runs is None else runs, g.shape[0]))
    elif g.ndim != 2:
        raise ValueError(f"gradients must be 1-D or 2-D (runs x parameters), got {g.ndim}-D")
    if runs is not None and g.shape[0] != runs:
        raise ValueError(f"gradients has {g.shape[0]} runs but runs={runs}")
    if not np.all(np.isfinite(g)):
        raise ValueError("gradients must be finite numbers")
    n_runs, k = g.shape
    q = np.floor(np.clip(g, -clip, clip) / sensitivity) * sensitivity  # bound(., gamma) on the lattice
    order = np.argsort(uniform((n_runs, k), source), axis=1)  # a uniformly random order per run
    in_order = np.take_along_axis(np.abs(q), order, axis=1)
    sigma1 = sparse_sigma(8 * epsilon / 9, c, 0.0, sensitivity)
    sigma2 = sparse_sigma(2 * epsilon / 9, c, 0.0, sensitivity)
    ordered_flags = sparse_vector_engine(
        in_order,
        threshold,
        threshold_scale=sigma1,
        query_scale=2 * sigma1,
        c=c,
        redraw=True,
        sensitivity=sensitivity,
        rng=source,
    ).flags
    flags = np.empty_like(ordered_flags)
    np.put_along_axis(flags, order, ordered_flags, axis=1)
    top = flags == TOP
    values = np.full((n_runs, k), np.nan)
    noisy = q[top] + lattice_laplace(sigma2, sensitivity, int(top.sum()), source)
    values[top] = np.clip(noisy, -clip, clip)
    return NumericAnswers(flags, values)


def dssgd_select(
    gradient: np.ndarray,
    threshold: float,
    epsilon: float,
    c: int,
    *,
    clip: float,
    sensitivity: float,
    rng: RNGLike = None,
) -> NumericAnswers:
    """One participant's upload for one epoch: at most ``c`` coordinates of ``gradient``, noisy.

    ``threshold`` is the tutorial's ``tau`` (on ``|g_j|``), ``clip`` its ``gamma``, ``sensitivity``
    its ``Df`` (:func:`dssgd_sensitivity` for a clipped mean gradient). Returns flags (``TOP`` =
    uploaded, ``BOT`` = examined and not uploaded, ``UNANSWERED`` = never examined, the run having
    halted) and the uploaded values (NaN elsewhere), in the gradient's own order.
    Privacy cost: ``epsilon``-DP (a reduction to NumericSparse; see the module docstring).
    """
    result = dssgd_select_batch(
        gradient, threshold, epsilon, c, clip=clip, sensitivity=sensitivity, runs=1, rng=rng
    )
    return NumericAnswers(result.flags[0], result.values[0])

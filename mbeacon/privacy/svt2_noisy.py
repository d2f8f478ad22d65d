"""SVT² with a noisy release on TOP: the answer to a TOP comes from a noisy count, not a forced flip.

SVT² (:mod:`mbeacon.privacy.svt2`) answers a TOP with the negation of the prior's answer. When the
TOP was false (noise, not data, put the count across ``T``) that flip is wrong for sure. Here a TOP
instead spends a third budget share ``eps3`` (Lyu, Su and Li's generalised SVT, Alg. 7) on a fresh
noisy count and answers from it:

    SVT²'s test (with an optional public margin, :mod:`mbeacon.privacy.svt2_margin`)
    BOT -> answer beta >= T (free)
    TOP -> v = alpha + Lap(c D / eps3);  answer v >= T;  count += 1; halt when count >= c

``v`` itself may be released too (the service's count granularity on TOPs): the yes/no answer is a
function of it.

Privacy cost: ``2 (eps1 + eps2) + eps3`` with one threshold pair, ``2 (c eps1 + eps2) + eps3`` with
``redraw`` (:func:`mbeacon.privacy.accounting.svt2_spent` with ``count_epsilon = eps3``: each positive
costs ``(2 eps2 + eps3) / c``). *Proof.* Fix the flags and the released values. The flags' part is
Theorem 1 (2) of ``docs/privacy.md`` (with fixed margins, see :mod:`~mbeacon.privacy.svt2_margin`);
the released values are at most ``c`` Laplace measurements of sensitivity-``D`` counts at scale
``cD/eps3``, each shifted by at most ``D`` to map the noise of ``D`` onto that of ``D'``, which costs
``eps3 / c`` each; the shifts act on disjoint noise variables, so the factors multiply (this is the
numeric-output step of Lyu, Su and Li's Theorem 4). The release noise is Laplace on the integers at
scale ``cD/eps3``: counts are integers and a neighbour's count differs by an integer of at most ``D``,
so the shift stays on the lattice and costs at most ``eps3 / c`` whatever ``D``; ``alpha`` must
therefore be a count (an integer); other values are refused. The service serves these steps
(:mod:`mbeacon.beacon.sanitisers.svt2_noisy`), so its released counts are integers at any
contribution bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from mbeacon.privacy.accounting import svt2_spent
from mbeacon.privacy.noise import RNGLike, as_source, lattice_laplace
from mbeacon.privacy.sparse_vector import BOT, TOP, UNANSWERED
from mbeacon.privacy.svt2 import SVT2State, svt2_allocate
from mbeacon.privacy.svt2_margin import SVT2MarginParams, svt2_margin_batch, svt2_margin_step
from mbeacon.privacy.validation import fraction, positive

__all__ = [
    "NoisyRelease",
    "SVT2NoisyParams",
    "svt2_noisy",
    "svt2_noisy_batch",
    "svt2_noisy_step",
]


class NoisyRelease(NamedTuple):
    """What a sanitiser releases per query: flag, yes/no answer and any released count.

    ``flags`` are ``int8`` (1 TOP, 0 BOT, -1 unanswered), ``answers`` ``int8`` (1 yes, 0 no,
    -1 unanswered) and ``counts`` ``float64`` (NaN where no count is released).
    """

    flags: np.ndarray
    answers: np.ndarray
    counts: np.ndarray


@dataclass(frozen=True)
class SVT2NoisyParams(SVT2MarginParams):
    """SVT²'s public parameters, its margin and ``epsilon3``, the budget of the noisy counts."""

    epsilon3: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "epsilon3", positive(self.epsilon3, "epsilon3"))

    @property
    def epsilon(self) -> float:
        """The total privacy cost this instance promises."""
        return svt2_spent(
            self.epsilon1, self.epsilon2, self.c, self.c, redraw=self.redraw, count_epsilon=self.epsilon3
        )

    @property
    def release_scale(self) -> float:
        return self.c * self.sensitivity / self.epsilon3

    @classmethod
    def from_epsilon(
        cls,
        epsilon: float,
        c: int,
        threshold: float,
        *,
        release_share: float = 1 / 3,
        margin_above: float = 0.0,
        margin_below: float = 0.0,
        redraw: bool = False,
        sensitivity: float = 1.0,
    ) -> SVT2NoisyParams:
        """``eps3 = release_share * epsilon``; the rest split by :func:`svt2_allocate`."""
        epsilon = positive(epsilon, "epsilon")
        eps3 = fraction(release_share, "release_share") * epsilon
        eps1, eps2 = svt2_allocate(epsilon - eps3, c, redraw=redraw)
        return cls(threshold, eps1, eps2, c, sensitivity, redraw, margin_above, margin_below, eps3)


def _check_lattice(values: np.ndarray) -> None:
    counts = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(counts)) or not np.all(counts == np.round(counts)):
        raise ValueError("alpha must be counts (integers): the release noise lives on the integer lattice")


def svt2_noisy_step(
    state: SVT2State, alpha: float, beta: float, params: SVT2NoisyParams, rng: RNGLike = None
) -> tuple[int, int, float | None, SVT2State]:
    """Answer one query from a saved state: ``(flag, answer, released count or None, state to save)``."""
    # refused before any noise is drawn, whatever the flag would have been: an error that only a
    # TOP raised would tell the caller which way the noisy test went
    _check_lattice(np.asarray(alpha))
    source = as_source(rng)
    flag, after = svt2_margin_step(state, alpha, beta, params, source)
    if flag == UNANSWERED:
        return UNANSWERED, UNANSWERED, None, state
    if flag == BOT:
        return BOT, int(beta >= params.threshold), None, after
    v = alpha + float(lattice_laplace(params.release_scale, 1.0, None, source))
    return TOP, int(v >= params.threshold), v, after


def svt2_noisy(
    alpha: np.ndarray, beta: np.ndarray, params: SVT2NoisyParams, rng: RNGLike = None
) -> NoisyRelease:
    """One stream answered by :func:`svt2_noisy_step` query by query.

    Privacy cost: ``params.epsilon`` (see the module docstring).
    """
    a = np.asarray(alpha, dtype=np.float64).ravel()
    b = np.broadcast_to(np.asarray(beta, dtype=np.float64), a.shape)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("alpha and beta must be finite numbers")
    source = as_source(rng)
    state = SVT2State.start(params, source)
    flags = np.full(a.shape, UNANSWERED, dtype=np.int8)
    answers = np.full(a.shape, UNANSWERED, dtype=np.int8)
    counts = np.full(a.shape, np.nan)
    for i in range(a.size):
        if state.halted(params):
            break
        flags[i], answers[i], v, state = svt2_noisy_step(state, float(a[i]), float(b[i]), params, source)
        if v is not None:
            counts[i] = v
    return NoisyRelease(flags, answers, counts)


def svt2_noisy_batch(
    alpha: np.ndarray,
    beta: np.ndarray,
    params: SVT2NoisyParams,
    *,
    runs: int | None = None,
    rng: RNGLike = None,
) -> NoisyRelease:
    """:func:`svt2_noisy` over ``runs x queries`` independent runs, vectorised across runs.

    The flags come from SVT²'s compiled scan (:func:`~mbeacon.privacy.svt2_margin.svt2_margin_batch`);
    the release noise is independent of them, so drawing it afterwards for the TOP positions only,
    in one call, gives the same distribution as drawing it inside the loop.
    """
    source = as_source(rng)
    flags = svt2_margin_batch(alpha, beta, params, runs=runs, rng=source)
    # The scan leaves most of a long stream unanswered (runs halt): touch only TOP positions, and
    # compare the public prior with T before broadcasting it.
    live = np.flatnonzero(np.any(flags != UNANSWERED, axis=0))
    width = int(live[-1]) + 1 if live.size else 0  # columns after it are unanswered in every run
    rows, cols = np.nonzero(flags[:, :width] == TOP)
    a = np.asarray(alpha, dtype=np.float64)
    a = a[cols] if a.ndim == 1 else np.broadcast_to(a, flags.shape)[rows, cols]
    _check_lattice(a)
    v = a + lattice_laplace(params.release_scale, 1.0, a.size, source)
    counts = np.full(flags.shape, np.nan)
    counts[rows, cols] = v
    prior_yes = (np.asarray(beta, dtype=np.float64) >= params.threshold).astype(np.int8)
    answers = np.full(flags.shape, UNANSWERED, dtype=np.int8)
    head = np.broadcast_to(prior_yes, flags.shape)[:, :width]
    answers[:, :width] = np.where(flags[:, :width] == UNANSWERED, np.int8(UNANSWERED), head)
    answers[rows, cols] = v >= params.threshold
    return NoisyRelease(flags, answers, counts)

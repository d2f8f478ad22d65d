"""SVT² with a decision margin: a TOP needs a clear disagreement between the data and the prior.

SVT² (:mod:`mbeacon.privacy.svt2`) flips the prior's answer whenever a noisy comparison puts the count
and the prior on different sides of ``T``. With query noise of scale ``2cD/eps2`` (about 20 patients
at ``c = 50, eps = 10``) many of those flips are false: the count was on the prior's side all along.
Public margins ``a, b >= 0`` move the two thresholds apart:

    BOT if max(alpha, beta) + y < T + a + z1   or   min(alpha, beta) + y' >= T - b + z2, else TOP

so a TOP needs one of ``alpha, beta`` at least about ``a`` above ``T`` and the other about ``b`` below
it. Counts are never negative, so a ``b`` close to ``T`` makes TOPs with a small count or prior rare.
Everything else (noise, halting, re-drawing, the released answer ``beta >= T`` on BOT and its
negation on TOP) is SVT²'s.

Privacy cost: exactly SVT²'s, ``2 (eps1 + eps2)`` with one threshold pair and ``2 (c eps1 + eps2)``
with ``redraw``. *Proof (reduction).* Theorem 1 of ``docs/privacy.md`` never uses that the two tests
share their threshold: its shift ``phi`` keeps every BOT through the first test a BOT for any fixed
``T1`` in place of ``T``, every BOT through the second for any fixed ``T2``, and every TOP a TOP. The
margins are public and fixed before any data is read, so ``T1 = T + a, T2 = T - b`` are two such
constants and the bound is unchanged (likewise Theorem 2 for ``redraw``). A margin chosen after
looking at the data is not covered: the audit's broken twin ``svt2-margin-peeking`` shows the leak.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbeacon.privacy._svt2_scan import scan
from mbeacon.privacy.noise import RNGLike, as_source, lattice_laplace
from mbeacon.privacy.sparse_vector import BOT, TOP, UNANSWERED
from mbeacon.privacy.svt2 import SVT2Params, SVT2State, as_runs, step_stream, svt2_allocate
from mbeacon.privacy.validation import non_negative

__all__ = ["SVT2MarginParams", "svt2_margin", "svt2_margin_batch", "svt2_margin_step"]


@dataclass(frozen=True)
class SVT2MarginParams(SVT2Params):
    """SVT²'s public parameters and the public margins (patients, ``>= 0``; both 0 is plain SVT²).

    ``margin_above``: how far above ``T`` the larger of count and prior must clearly be for a TOP;
    ``margin_below``: how far below ``T`` the smaller must clearly be.
    """

    margin_above: float = 0.0
    margin_below: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "margin_above", non_negative(self.margin_above, "margin_above"))
        object.__setattr__(self, "margin_below", non_negative(self.margin_below, "margin_below"))

    @property
    def low_threshold(self) -> float:
        """The threshold of the "both below" test (``T + a``): BOT while the larger one stays below."""
        return self.threshold + self.margin_above

    @property
    def high_threshold(self) -> float:
        """The threshold of the "both above" test (``T - b``): BOT while the smaller one stays above."""
        return self.threshold - self.margin_below

    @classmethod
    def from_epsilon(
        cls,
        epsilon: float,
        c: int,
        threshold: float,
        *,
        margin_above: float = 0.0,
        margin_below: float = 0.0,
        redraw: bool = False,
        sensitivity: float = 1.0,
    ) -> SVT2MarginParams:
        eps1, eps2 = svt2_allocate(epsilon, c, redraw=redraw)
        return cls(threshold, eps1, eps2, c, sensitivity, redraw, margin_above, margin_below)


def svt2_margin_step(
    state: SVT2State, alpha: float, beta: float, params: SVT2MarginParams, rng: RNGLike = None
) -> tuple[int, SVT2State]:
    """Answer one query from a saved state (SVT²'s state); return the flag and the state to save."""
    if state.halted(params):
        return UNANSWERED, state
    source = as_source(rng)
    y = float(lattice_laplace(params.query_scale, params.sensitivity, None, source))
    y_prime = float(lattice_laplace(params.query_scale, params.sensitivity, None, source))
    if (
        max(alpha, beta) + y < params.low_threshold + state.z1
        or min(alpha, beta) + y_prime >= params.high_threshold + state.z2
    ):
        return BOT, state
    if params.redraw:
        z = lattice_laplace(params.threshold_scale, params.sensitivity, 2, source)
        return TOP, SVT2State(float(z[0]), float(z[1]), state.count + 1)
    return TOP, SVT2State(state.z1, state.z2, state.count + 1)


def svt2_margin(
    alpha: np.ndarray, beta: np.ndarray, params: SVT2MarginParams, rng: RNGLike = None
) -> np.ndarray:
    """One stream answered by :func:`svt2_margin_step` query by query; ``int8`` flags.

    Privacy cost: ``params.epsilon`` (SVT²'s, see the module docstring).
    """
    return step_stream(svt2_margin_step, alpha, beta, params, rng)


def svt2_margin_batch(
    alpha: np.ndarray,
    beta: np.ndarray,
    params: SVT2MarginParams,
    *,
    runs: int | None = None,
    rng: RNGLike = None,
) -> np.ndarray:
    """:func:`svt2_margin` over ``runs x queries`` independent runs, vectorised across runs.

    SVT²'s compiled scan with the two thresholds apart: given the thresholds each query is TOP
    independently with a closed-form probability, so one uniform per TOP replaces two Laplace draws
    per query (the same distribution; ``tests/test_svt2_margin.py`` checks it).
    """
    a, b = as_runs(alpha, beta, runs)
    return scan(
        a,
        b,
        threshold=params.threshold,
        sensitivity=params.sensitivity,
        threshold_scale=params.threshold_scale,
        query_scale=params.query_scale,
        c=params.c,
        redraw=params.redraw,
        source=as_source(rng),
        margins=(params.margin_above, params.margin_below),
    )

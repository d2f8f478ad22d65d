"""SVT², the double-threshold sparse vector technique of MBeacon (Hagestedt et al., NDSS 2019).

Each query carries the cohort's count ``alpha`` (patients in the range) and the public prior's
expectation ``beta`` (``N * P_prior(range)``). SVT² decides, privately, whether the data disagrees
with the prior about "at least ``T`` patients":

    z1, z2 ~ Lap(D/eps1); count = 0
    for each query: y, y' ~ Lap(2cD/eps2)
        BOT if max(alpha, beta) + y < T + z1  or  min(alpha, beta) + y' >= T + z2, else TOP
        on TOP: count += 1; [redraw: z1, z2 ~ Lap(D/eps1) again]; halt when count >= c

``BOT`` (0) releases the prior's answer ``beta >= T`` at no cost; ``TOP`` (1) releases its negation
and spends one of ``c`` positives; ``UNANSWERED`` (-1) after the halt.

Privacy cost (``docs/privacy.md`` has the proof and the audit that checks it):
``2 (eps1 + eps2)`` with one threshold pair, ``2 (c eps1 + eps2)`` when re-drawn after each TOP;
:mod:`mbeacon.privacy.accounting` states the rule (:func:`svt2_epsilon`, and what a run has spent
so far).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mbeacon.privacy._svt2_scan import scan
from mbeacon.privacy.accounting import svt2_epsilon
from mbeacon.privacy.noise import RNGLike, as_source, lattice_laplace
from mbeacon.privacy.sparse_vector import BOT, TOP, UNANSWERED
from mbeacon.privacy.validation import finite, integer, positive

__all__ = [
    "SVT2Params",
    "SVT2State",
    "svt2",
    "svt2_allocate",
    "svt2_batch",
    "svt2_epsilon",
    "svt2_release",
    "svt2_resume",
    "svt2_step",
]


def svt2_allocate(epsilon: float, c: int, *, redraw: bool) -> tuple[float, float]:
    """The ``(eps1, eps2)`` with ``svt2_epsilon == epsilon`` that minimise the comparison noise.

    The decision compares ``y - z`` with ``Var = 2(D/eps1)^2 + 2(2cD/eps2)^2``. Minimising it under
    ``eps1 + eps2 = eps/2`` gives ``eps1 : eps2 = 1 : (2c)^(2/3)`` (Lyu, Su and Li's allocation);
    under ``c*eps1 + eps2 = eps/2`` (redraw) it gives ``eps2 = 4^(1/3) c eps1``.
    """
    epsilon = positive(epsilon, "epsilon")
    c = integer(c, "c")
    half = epsilon / 2.0
    if redraw:
        eps1 = half / (c + 4 ** (1 / 3) * c)
        return eps1, half - c * eps1
    eps1 = half / (1.0 + (2 * c) ** (2 / 3))
    return eps1, half - eps1


_CHECKED = ("threshold", "epsilon1", "epsilon2", "c", "sensitivity")


@dataclass(frozen=True)
class SVT2Params:
    """Public parameters of one SVT² instance (safe to publish).

    Checked once, here, so that :func:`svt2_step` (once per request) need not check them again.
    """

    threshold: float
    epsilon1: float
    epsilon2: float
    c: int
    sensitivity: float = 1.0
    redraw: bool = False

    def __post_init__(self) -> None:
        given = (self.threshold, self.epsilon1, self.epsilon2, self.c, self.sensitivity)
        checked = (
            finite(self.threshold, "threshold"),
            positive(self.epsilon1, "epsilon1"),
            positive(self.epsilon2, "epsilon2"),
            integer(self.c, "c"),
            positive(self.sensitivity, "sensitivity"),
        )
        # a check returns what it was given when that is already a plain float or int; where it
        # converted (a numpy scalar, c = 5.0) the frozen instance keeps the converted value
        if not all(map(operator.is_, checked, given)):
            for name, value in zip(_CHECKED, checked, strict=True):
                object.__setattr__(self, name, value)

    @property
    def epsilon(self) -> float:
        """The total privacy cost this instance promises."""
        return svt2_epsilon(self.epsilon1, self.epsilon2, self.c, redraw=self.redraw)

    @property
    def threshold_scale(self) -> float:
        return self.sensitivity / self.epsilon1

    @property
    def query_scale(self) -> float:
        return 2 * self.c * self.sensitivity / self.epsilon2

    @classmethod
    def from_epsilon(
        cls,
        epsilon: float,
        c: int,
        threshold: float,
        *,
        redraw: bool = False,
        sensitivity: float = 1.0,
    ) -> SVT2Params:
        eps1, eps2 = svt2_allocate(epsilon, c, redraw=redraw)
        return cls(threshold, eps1, eps2, c, sensitivity, redraw)


@dataclass(frozen=True)
class SVT2State:
    """The secret state between queries: noisy threshold offsets and positives spent.

    ``z1`` and ``z2`` are secrets: they are excluded from ``repr`` so they cannot reach a log by
    accident; :meth:`to_json` is for the ledger only.
    """

    z1: float
    z2: float
    count: int

    def __repr__(self) -> str:
        return f"SVT2State(count={self.count}, thresholds=<secret>)"

    @classmethod
    def start(cls, params: SVT2Params, rng: RNGLike = None) -> SVT2State:
        z1, z2 = _draw_thresholds(params, as_source(rng))
        return cls(z1, z2, 0)

    def halted(self, params: SVT2Params) -> bool:
        return self.count >= params.c

    def to_json(self) -> dict[str, float | int]:
        return {"z1": self.z1, "z2": self.z2, "count": self.count}

    @classmethod
    def from_json(cls, data: dict[str, float | int]) -> SVT2State:
        return cls(float(data["z1"]), float(data["z2"]), int(data["count"]))


def _draw_thresholds(params: SVT2Params, source) -> tuple[float, float]:
    z = lattice_laplace(params.threshold_scale, params.sensitivity, 2, source)
    return float(z[0]), float(z[1])


def svt2_step(
    state: SVT2State, alpha: float, beta: float, params: SVT2Params, rng: RNGLike = None
) -> tuple[int, SVT2State]:
    """Answer one query from a saved state; return the flag and the state to save.

    Answering a stream one step at a time from saved states has exactly the distribution of one
    long :func:`svt2` run: the state is all the mechanism carries between queries.
    """
    if state.halted(params):
        return UNANSWERED, state
    source = as_source(rng)
    # two scalar draws: the same law as the vectorised sampler, without an array for two numbers
    y = float(lattice_laplace(params.query_scale, params.sensitivity, None, source))
    y_prime = float(lattice_laplace(params.query_scale, params.sensitivity, None, source))
    t = params.threshold
    agrees_low = max(alpha, beta) + y < t + state.z1
    agrees_high = min(alpha, beta) + y_prime >= t + state.z2
    if agrees_low or agrees_high:
        return BOT, state
    z1, z2 = _draw_thresholds(params, source) if params.redraw else (state.z1, state.z2)
    return TOP, SVT2State(z1, z2, state.count + 1)


def svt2_resume(
    state: SVT2State, alpha: np.ndarray, beta: np.ndarray, params: SVT2Params, rng: RNGLike = None
) -> tuple[np.ndarray, SVT2State]:
    """Answer a stream of queries from a saved state; return the flags and the state to save.

    The same distribution as calling :func:`svt2_step` once per query (every query gets its own
    fresh pair of query noises, thresholds are re-drawn after a TOP with ``redraw``), but the
    query noise of the whole stream is drawn in one call: the service answers a batch of 1,000
    queries this way. Noise drawn for queries after the halt is discarded, never used.
    """
    a = np.asarray(alpha, dtype=np.float64).ravel()
    b = np.broadcast_to(np.asarray(beta, dtype=np.float64), a.shape)
    _check_inputs(a, b)
    flags = np.full(a.shape, UNANSWERED, dtype=np.int8)
    if state.halted(params) or a.size == 0:
        return flags, state
    source = as_source(rng)
    noise = lattice_laplace(params.query_scale, params.sensitivity, 2 * a.size, source).reshape(-1, 2)
    low = np.maximum(a, b) + noise[:, 0]
    high = np.minimum(a, b) + noise[:, 1]
    t = params.threshold
    z1, z2, count = state.z1, state.z2, state.count
    for i in range(a.size):
        if low[i] < t + z1 or high[i] >= t + z2:
            flags[i] = BOT
            continue
        flags[i] = TOP
        count += 1
        if count >= params.c:
            break
        if params.redraw:
            z1, z2 = _draw_thresholds(params, source)
    return flags, SVT2State(z1, z2, count)


def _check_inputs(alpha: np.ndarray, beta: np.ndarray) -> None:
    if not (np.all(np.isfinite(alpha)) and np.all(np.isfinite(beta))):
        raise ValueError("alpha and beta must be finite numbers")


def svt2(
    alpha: np.ndarray,
    beta: np.ndarray,
    threshold: float,
    epsilon1: float,
    epsilon2: float,
    c: int,
    *,
    sensitivity: float = 1.0,
    redraw: bool = False,
    rng: RNGLike = None,
) -> np.ndarray:
    """Run SVT² over one stream of queries; ``int8`` flags (1 TOP, 0 BOT, -1 unanswered).

    Privacy cost: ``svt2_epsilon(epsilon1, epsilon2, c, redraw=redraw)``.
    """
    params = SVT2Params(threshold, epsilon1, epsilon2, c, sensitivity, redraw)
    return step_stream(svt2_step, alpha, beta, params, rng)


def step_stream(
    step: Callable, alpha: np.ndarray, beta: np.ndarray, params: SVT2Params, rng: RNGLike
) -> np.ndarray:
    """One stream answered query by query with ``step`` (:func:`svt2_step` or a variant of the same
    signature) from a fresh state until it halts; ``int8`` flags, unanswered after the halt."""
    a = np.asarray(alpha, dtype=np.float64).ravel()
    b = np.broadcast_to(np.asarray(beta, dtype=np.float64), a.shape)
    _check_inputs(a, b)
    source = as_source(rng)
    state = SVT2State.start(params, source)
    out = np.full(a.shape, UNANSWERED, dtype=np.int8)
    for i in range(a.size):
        if state.halted(params):
            break
        out[i], state = step(state, float(a[i]), float(b[i]), params, source)
    return out


def svt2_batch(
    alpha: np.ndarray,
    beta: np.ndarray,
    threshold: float,
    epsilon1: float,
    epsilon2: float,
    c: int,
    *,
    sensitivity: float = 1.0,
    redraw: bool = False,
    runs: int | None = None,
    rng: RNGLike = None,
) -> np.ndarray:
    """:func:`svt2` over ``runs x queries`` independent runs, vectorised across runs.

    ``alpha`` and ``beta`` broadcast to 2-D (``runs`` sets the number of runs when both are 1-D).

    Given the thresholds ``(z1, z2)``, the query noises are independent, so each query is ``TOP``
    independently with the exact probability ``p_i = P(y >= T + z1 - max) * P(y' < T + z2 - min)``
    (closed-form discrete Laplace tails). The next ``TOP`` is then the first ``j`` whose survival
    ``prod_i (1 - p_i)`` falls to a uniform draw: one random number per ``TOP`` instead of two
    Laplace draws per query, and the same distribution as :func:`svt2`
    (``tests/test_svt2.py`` checks it). The scan is compiled (:mod:`mbeacon.privacy._svt2_scan`);
    every random number still comes from ``rng`` (the OS CSPRNG by default).
    """
    params = SVT2Params(threshold, epsilon1, epsilon2, c, sensitivity, redraw)
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
    )


def as_runs(alpha: np.ndarray, beta: np.ndarray, runs: int | None) -> tuple[np.ndarray, np.ndarray]:
    """``alpha``/``beta`` as read-only 2-D views (``runs x queries``; ``runs`` sets the number of runs
    when both are 1-D), as the batch forms take them.

    No conversion or validation of the whole matrix: runs halt early, so the scan converts and checks
    only the entries it reads (most of a long query matrix is never reached).
    """
    a, b = np.asarray(alpha), np.asarray(beta)
    if a.dtype.kind not in "iuf" or b.dtype.kind not in "iuf":
        raise ValueError("alpha and beta must be numeric arrays")
    if a.ndim == 1 and b.ndim <= 1:
        a = a[np.newaxis, :]
        if runs is not None:
            a = np.broadcast_to(a, (runs, a.shape[1]))
    shape = np.broadcast_shapes(a.shape, b.shape)
    if len(shape) != 2:
        raise ValueError("alpha/beta must broadcast to 2-D (runs x queries)")
    a, b = np.broadcast_to(a, shape), np.broadcast_to(b, shape)  # read-only views, no copies
    if runs is not None and a.shape[0] != runs:
        raise ValueError(f"alpha/beta have {a.shape[0]} runs but runs={runs}")
    return a, b


def svt2_release(flags: np.ndarray, beta: np.ndarray, threshold: float) -> np.ndarray:
    """The beacon's answers from SVT² flags: ``BOT`` -> ``beta >= T``, ``TOP`` -> its negation.

    Returns ``int8``: 1 yes, 0 no, -1 unanswered. Because ``beta`` is public, the flag itself (the
    ``answeredFrom`` label) is a function of the answer and leaks nothing more.
    """
    flags = np.asarray(flags)
    prior_yes = np.broadcast_to(np.asarray(beta, dtype=np.float64) >= threshold, flags.shape)
    answer = np.where(flags == TOP, ~prior_yes, prior_yes).astype(np.int8)
    answer[flags == UNANSWERED] = UNANSWERED
    return answer

"""The defences the attack is measured against, each as two functions on the same footing.

* :meth:`Defence.release` -- what the beacon releases for a stream of queries, vectorised over runs
  (victims x repetitions) and queries: the *observation* the attacker sees, ``int8`` 1/0, or -1 where
  the query was not answered (budget exhausted or query cap reached).
* :meth:`Defence.p_observe_one` -- ``P(observation = 1 | alpha, beta)`` from the defence's *public*
  parameters: the attacker's model of the defence. An attacker that ignored what the defence does
  would be a straw man.

For SVT² the observation is the flag (1: ``answeredFrom = data``), which the attacker reads off the
response; since the prior's answer ``beta >= T`` is public, the flag and the yes/no answer determine
each other. Every other defence releases a yes/no answer and the observation is that answer.

| name | released for a query with count ``alpha`` | public parameters |
|---|---|---|
| ``none`` | ``alpha >= 1`` | -- |
| ``suppression`` | ``alpha >= T`` | T |
| ``svt2-single`` / ``svt2-redraw`` | SVT² (:func:`mbeacon.privacy.svt2_batch`) | epsilon, c, T |
| ``noisy-count`` | ``alpha + DLap(Q/eps) >= T``, at most ``Q`` queries | epsilon, Q, T |
| ``flip`` | ``alpha >= T``; a "yes" with ``alpha < flip_below`` becomes "no" with probability p | p |
| ``prior-only`` | ``beta >= T`` (the public prior's answer) | T |

``noisy-count`` splits the per-user epsilon over a cap of ``Q`` queries (sequential composition): the
same total privacy cost per user as SVT² with the same epsilon. ``flip`` (Raisaro et al., 2017) has no
differential-privacy guarantee; its ``epsilon`` is reported as null.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from mbeacon.privacy.noise import (
    RNGLike,
    as_source,
    discrete_laplace,
    discrete_laplace_pmf,
    discrete_laplace_sf,
    uniform,
)
from mbeacon.privacy.svt2 import SVT2Params, svt2_batch

DEFENCES = ("none", "suppression", "svt2-single", "svt2-redraw", "noisy-count", "flip", "prior-only")

#: ``flip`` only touches rare "yes" answers (count below this), the ones that identify a person.
FLIP_BELOW = 5


@dataclass(frozen=True)
class Defence:
    """One defence setting. Fields that do not apply to ``name`` stay None."""

    name: str
    threshold: int = 1
    epsilon: float | None = None
    c: int | None = None
    flip: float | None = None
    query_cap: int | None = None

    def __post_init__(self) -> None:
        if self.name not in DEFENCES:
            raise ValueError(f"unknown defence {self.name!r}; choose from {', '.join(DEFENCES)}")
        if int(self.threshold) != self.threshold or self.threshold < 1:
            raise ValueError(f"{self.name}: threshold must be an integer >= 1, got {self.threshold}")
        if self.name == "none" and self.threshold != 1:
            raise ValueError("none: the unprotected beacon answers 'any patient' (T = 1); use suppression")
        needs_epsilon = self.is_svt2 or self.name == "noisy-count"
        if needs_epsilon and not (
            self.epsilon is not None and self.epsilon > 0 and math.isfinite(self.epsilon)
        ):
            raise ValueError(f"{self.name}: epsilon must be a positive number, got {self.epsilon}")
        if self.is_svt2 and (self.c is None or int(self.c) != self.c or self.c < 1):
            raise ValueError(f"{self.name}: c must be an integer >= 1, got {self.c}")
        if self.query_cap is not None and self.query_cap < 1:
            raise ValueError(f"{self.name}: query_cap must be >= 1, got {self.query_cap}")
        if self.name == "flip" and (self.flip is None or not 0.0 <= self.flip <= 1.0):
            raise ValueError(f"flip: the flip probability must be in [0, 1], got {self.flip}")

    @property
    def is_svt2(self) -> bool:
        return self.name.startswith("svt2")

    @property
    def svt2_params(self) -> SVT2Params:
        assert self.is_svt2 and self.epsilon is not None and self.c is not None
        redraw = self.name == "svt2-redraw"
        return SVT2Params.from_epsilon(self.epsilon, int(self.c), self.threshold, redraw=redraw)

    @property
    def noisy_count_scale(self) -> float:
        """Discrete Laplace scale of one noisy count: the epsilon split over the query cap."""
        if self.epsilon is None or self.query_cap is None:
            raise ValueError("noisy-count needs its query cap (Defence.with_cap) before it answers")
        return self.query_cap / self.epsilon

    @property
    def randomised(self) -> bool:
        """Whether two releases of the same queries can differ (repetitions mean something)."""
        return self.name in ("svt2-single", "svt2-redraw", "noisy-count", "flip")

    @property
    def label(self) -> str:
        """A short human name of the setting, for tables and plot legends."""
        if self.name == "suppression":
            text = f"T={self.threshold}"
        elif self.name == "flip":
            text = f"p={self.flip:g}"
        elif self.name == "noisy-count":
            text = f"eps={self.epsilon:g}"
        elif self.is_svt2:
            text = f"eps={self.epsilon:g} c={self.c}"
        else:
            text = ""
        if self.threshold != 1 and self.name != "suppression":
            text += f" T={self.threshold}"
        return f"{self.name} {text}".strip()

    def with_cap(self, queries: int) -> Defence:
        """``noisy-count`` needs its query cap fixed before any query is asked."""
        return replace(self, query_cap=queries) if self.name == "noisy-count" else self

    # --- what the beacon releases ---------------------------------------------------------------

    def release(self, alpha: np.ndarray, beta: np.ndarray, rng: RNGLike = None) -> np.ndarray:
        """Observations for ``runs x queries`` counts ``alpha`` and prior expectations ``beta``.

        Each run is one account's stream of queries, answered in order with a fresh budget.
        """
        alpha = np.asarray(alpha)
        beta = np.broadcast_to(np.asarray(beta, dtype=np.float64), alpha.shape)
        t = self.threshold
        if self.name in ("none", "suppression"):
            return (alpha >= t).astype(np.int8)
        if self.name == "prior-only":
            return (beta >= t).astype(np.int8)
        source = as_source(rng)
        if self.name == "flip":
            yes = alpha >= t
            flipped = yes & (alpha < FLIP_BELOW) & (uniform(alpha.shape, source) < self.flip)
            return (yes & ~flipped).astype(np.int8)
        if self.name == "noisy-count":
            noisy = alpha + discrete_laplace(self.noisy_count_scale, alpha.shape, source)
            out = (noisy >= t).astype(np.int8)
            out[:, int(self.query_cap or 0) :] = -1
            return out
        p = self.svt2_params
        return svt2_batch(alpha, beta, t, p.epsilon1, p.epsilon2, p.c, redraw=p.redraw, rng=source).astype(
            np.int8
        )

    # --- what the attacker knows about it -------------------------------------------------------

    def p_observe_one(self, alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
        """``P(observation = 1 | alpha, beta)``, broadcast over ``alpha`` and ``beta``.

        For SVT² this is the per-query marginal over the secret thresholds: exact for the first
        query and for every query of the redraw variant; with one threshold pair later answers are
        correlated through it, which this (standard) independence approximation ignores.
        """
        alpha = np.asarray(alpha, dtype=np.float64)
        beta = np.asarray(beta, dtype=np.float64)
        shape = np.broadcast_shapes(alpha.shape, beta.shape)
        return np.broadcast_to(self._p_one(alpha, beta), shape)

    def _p_one(self, alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
        t = self.threshold
        if self.name in ("none", "suppression"):
            return (alpha >= t).astype(np.float64)
        if self.name == "prior-only":
            return (beta >= t).astype(np.float64)
        if self.name == "flip":
            keep = np.where(alpha < FLIP_BELOW, 1.0 - float(self.flip or 0.0), 1.0)
            return np.where(alpha >= t, keep, 0.0)
        if self.name == "noisy-count":
            return discrete_laplace_sf(t - alpha, self.noisy_count_scale)  # P(alpha + L >= T)
        p = self.svt2_params
        sf = _difference_sf(p.query_scale, p.threshold_scale)
        # TOP iff max + y >= T + z1 and min + y' < T + z2, i.e. W >= T - max and W' < T - min
        # with W = y - z1, W' = y' - z2 independent and identically distributed on the integers.
        # sf is non-increasing, so sf(T - max(a, b)) = max(sf(T - a), sf(T - b)) (and min for the
        # other side): two small lookups, for the counts and for the betas, then one broadcast.
        from_alpha, from_beta = sf(np.ceil(t - alpha - 1e-9)), sf(np.ceil(t - beta - 1e-9))
        return np.maximum(from_alpha, from_beta) * (1.0 - np.minimum(from_alpha, from_beta))


@lru_cache(maxsize=64)
def _difference_sf(query_scale: float, threshold_scale: float):
    """``k -> P(y - z >= k)`` for independent discrete Laplace ``y`` (query) and ``z`` (threshold).

    The pmf of the difference is a convolution, tabulated once per setting on a support wide enough
    that the tails left out weigh less than 1e-12.
    """
    reach = math.ceil(30.0 * max(query_scale, threshold_scale)) + 5
    k = np.arange(-reach, reach + 1)
    pmf = np.convolve(discrete_laplace_pmf(k, query_scale), discrete_laplace_pmf(k, threshold_scale))
    support = np.arange(-2 * reach, 2 * reach + 1)
    survival = np.cumsum(pmf[::-1])[::-1]  # survival[i] = P(W >= support[i])

    def sf(m: np.ndarray) -> np.ndarray:
        index = np.clip(np.asarray(m, dtype=np.float64) - support[0], 0, support.size).astype(np.int64)
        return np.where(index >= support.size, 0.0, survival[np.minimum(index, support.size - 1)])

    return sf

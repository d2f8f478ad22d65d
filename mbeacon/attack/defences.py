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
| ``svt2-margin`` | SVT² with margins ``a = b = margin`` (``svt2_margin_batch``) | epsilon, c, T, m |
| ``svt2-noisy`` | the same; TOP: ``alpha + Lap(c/eps3) >= T`` (``svt2_noisy_batch``) | epsilon, c, T, m, r |
| ``online-pmw`` | Online PMW from the prior (``online_pmw_batch``), a probe per query | epsilon, c, T, m, r |
| ``cohort-pmw`` | the same, one stream for every account, each within a quota | epsilon, c, T, m, r, quota |

(``m``: ``margin``, ``r``: ``release_share``, ``eps3 = r * epsilon``.)

``noisy-count`` splits the per-user epsilon over a cap of ``Q`` queries (sequential composition): the
same total privacy cost per user as SVT² with the same epsilon. ``flip`` (Raisaro et al., 2017) has no
differential-privacy guarantee; its ``epsilon`` is reported as null. ``svt2-noisy`` and ``online-pmw``
spend ``eps3 = release_share * epsilon`` on their noisy counts and the rest on the test: ``epsilon`` is
the whole per-account cost of each.

``svt2-margin``'s observation is the flag, as SVT²'s. ``svt2-noisy`` and ``online-pmw``
(:data:`FULL_OBSERVED`) release an answer that the flag no longer determines: :meth:`release` gives
the yes/no answer (what the ``rarest`` attacker scores), :meth:`Defence.release_all` the flag, the
answer and the released count, and :meth:`Defence.observation_likelihood` the exact per-query law of
all three, which the ``flag``, ``count``, tracker and boundary attackers score.
``online-pmw`` is released here with every query at a probe of its own: a two-bin histogram (the
range and the rest) starting at the prior's mass ``beta / N``, floored at half a patient. That is the
mechanism's exact law for streams that never ask twice at one probe (the rarest-range attack, the
random and discovery workloads); the tracker and the boundary attacker, which do, run it with each
account's per-probe state (:mod:`mbeacon.attack.pmw_state`).

``cohort-pmw`` is the served default: Online PMW whose state belongs to the cohort. Every account's
queries go through **one** stream (:meth:`Defence.release_accounts`: round-robin over the accounts in
a random order), each account may spend at most ``quota`` of the cohort's ``c`` positives, and a query
past its account's quota or past the ``c``-th positive is answered from the synthetic state with no
test (flag -1, the public answer): the attacker reads nothing from it. The attack's accounts are
the victims' (:meth:`Defence.release_accounts`); a researcher's workload (:meth:`Defence.release`,
:meth:`Defence.release_all`) is one cohort's stream asked by :attr:`Defence.researchers` holders in
turn, enough to spend the whole ``c``. The tracker and the boundary attacker run it as per-account
Online PMW with the cohort's parameters halting at the quota: every victim's account gets its quota
of fresh positives, which favours them (the cohort's ``c`` caps the sum of what all accounts get).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

import numpy as np

from mbeacon.beacon.sanitisers import account_params, sanitiser_of
from mbeacon.beacon.sanitisers.cohort_pmw import default_quota
from mbeacon.beacon.sanitisers.policy import PolicyBase
from mbeacon.privacy.noise import (
    RNGLike,
    as_source,
    discrete_laplace,
    discrete_laplace_pmf,
    discrete_laplace_sf,
    uniform,
)
from mbeacon.privacy.online_pmw import OnlinePMWParams, online_pmw_batch
from mbeacon.privacy.sparse_vector import BOT, TOP
from mbeacon.privacy.svt2 import SVT2Params, svt2_batch
from mbeacon.privacy.svt2_margin import SVT2MarginParams, svt2_margin_batch
from mbeacon.privacy.svt2_noisy import NoisyRelease, SVT2NoisyParams, svt2_noisy_batch

DEFENCES = (
    "none",
    "suppression",
    "svt2-single",
    "svt2-redraw",
    "noisy-count",
    "flip",
    "prior-only",
    "svt2-margin",
    "svt2-noisy",
    "online-pmw",
    "cohort-pmw",
)
#: Online PMW: per account, or the cohort's one state with quotas.
PMW = ("online-pmw", "cohort-pmw")
#: The default evaluation grid's defences; the sanitisers built on SVT² are chosen in the config.
DEFAULT_DEFENCES = DEFENCES[:7]
#: Defences whose observation is SVT²'s flag (the answer is the flag applied to the prior's answer).
FLAG_OBSERVED = ("svt2-single", "svt2-redraw", "svt2-margin")
#: Defences whose response carries more than the answer: the flag (``answeredFrom``), which the answer
#: no longer determines, and for CONTROLLED callers with count granularity the released count (the
#: noisy count on a TOP, the public synthetic or prior count on a BOT). :meth:`Defence.release_all`
#: gives all three and :meth:`Defence.observation_likelihood` is their exact per-query law.
FULL_OBSERVED = ("svt2-noisy", *PMW)
#: Defences that keep per-account state between queries (a secret threshold, positives spent).
STATEFUL = ("svt2-single", "svt2-redraw", "svt2-margin", "svt2-noisy", *PMW)

#: The served mechanism and variant of each defence the service runs (the rest are evaluation baselines).
SERVED: dict[str, tuple[str, str]] = {
    "svt2-single": ("svt2", "single"),
    "svt2-redraw": ("svt2", "redraw"),
    "svt2-margin": ("svt2-margin", "single"),
    "svt2-noisy": ("svt2-noisy", "single"),
    "online-pmw": ("online-pmw", "single"),
    "cohort-pmw": ("cohort-pmw", "single"),
}

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
    margin: float | None = None
    release_share: float | None = None
    #: The cohort size N (Online PMW's synthetic counts are N times a histogram mass).
    n: int | None = None
    #: ``cohort-pmw``: the most of the cohort's ``c`` positives one account may spend (None: the
    #: service's default, a tenth of ``c``).
    quota: int | None = None

    def __post_init__(self) -> None:
        if self.name not in DEFENCES:
            raise ValueError(f"unknown defence {self.name!r}; choose from {', '.join(DEFENCES)}")
        if int(self.threshold) != self.threshold or self.threshold < 1:
            raise ValueError(f"{self.name}: threshold must be an integer >= 1, got {self.threshold}")
        if self.name == "none" and self.threshold != 1:
            raise ValueError("none: the unprotected beacon answers 'any patient' (T = 1); use suppression")
        needs_epsilon = self.name in STATEFUL or self.name == "noisy-count"
        if needs_epsilon and not (
            self.epsilon is not None and self.epsilon > 0 and math.isfinite(self.epsilon)
        ):
            raise ValueError(f"{self.name}: epsilon must be a positive number, got {self.epsilon}")
        if self.name in STATEFUL and (self.c is None or int(self.c) != self.c or self.c < 1):
            raise ValueError(f"{self.name}: c must be an integer >= 1, got {self.c}")
        if self.query_cap is not None and self.query_cap < 1:
            raise ValueError(f"{self.name}: query_cap must be >= 1, got {self.query_cap}")
        if self.name == "flip" and (self.flip is None or not 0.0 <= self.flip <= 1.0):
            raise ValueError(f"flip: the flip probability must be in [0, 1], got {self.flip}")
        if self.margin is not None and not (math.isfinite(self.margin) and self.margin >= 0):
            raise ValueError(f"{self.name}: margin must be a number >= 0, got {self.margin}")
        if self.release_share is not None and not 0.0 < self.release_share < 1.0:
            raise ValueError(f"{self.name}: release_share must be in (0, 1), got {self.release_share}")
        if self.quota is not None and not (
            self.name == "cohort-pmw" and int(self.quota) == self.quota and 1 <= self.quota <= (self.c or 0)
        ):
            raise ValueError(f"{self.name}: quota applies to cohort-pmw, a whole number in [1, c]")

    @property
    def is_pmw(self) -> bool:
        return self.name in PMW

    @property
    def effective_quota(self) -> int:
        """``cohort-pmw``'s positives per account (the service's default when none is set)."""
        assert self.c is not None
        return default_quota(self.c) if self.quota is None else int(self.quota)

    @property
    def researchers(self) -> int:
        """``cohort-pmw``: honest holders who ask a workload in turn, enough to spend the whole ``c``."""
        assert self.c is not None
        return math.ceil(self.c / self.effective_quota)

    @property
    def is_svt2(self) -> bool:
        return self.name.startswith("svt2")

    @property
    def flags_observed(self) -> bool:
        """Whether the observation is SVT²'s flag (turned into the answer through the prior)."""
        return self.name in FLAG_OBSERVED

    def served_policy(self) -> PolicyBase:
        """The dataset policy that serves this defence (the service's sanitisers only): the service's
        own policy model, so the evaluation's parameters are the ones an account would be opened with."""
        mechanism, variant = SERVED[self.name]
        keys: dict = {"mechanism": mechanism, "epsilon": self.epsilon, "c": self.c,
                      "threshold": self.threshold, "variant": variant}  # fmt: skip
        fields = sanitiser_of(mechanism).policy_model.model_fields
        if "margin" in fields:
            keys["margin"] = float(self.margin or 0.0)
        if "margin_above" in fields:
            keys["margin_above"] = keys["margin_below"] = float(self.margin or 0.0)
        if "release_share" in fields:
            keys["release_share"] = self.release_share
        if "quota" in fields:
            keys["quota"] = self.quota
        # built without the service's operational bounds (epsilon <= 100, ...): the evaluation also
        # measures settings no operator would serve; __post_init__ has checked what the split needs
        return sanitiser_of(mechanism).policy_model.model_construct(**keys)

    def _mechanism_params(self, n: int | None = None) -> object:
        policy = self.served_policy()
        return sanitiser_of(policy).mechanism_params(account_params(policy), n=n)

    @cached_property
    def svt2_params(self) -> SVT2Params:
        assert self.is_svt2 and self.epsilon is not None and self.c is not None
        params = self._mechanism_params()
        assert isinstance(params, SVT2Params)
        return params

    @cached_property
    def pmw_params(self) -> OnlinePMWParams:
        """Online PMW's parameters; needs the cohort size (:meth:`with_cohort`)."""
        assert self.is_pmw and self.epsilon is not None and self.c is not None
        if self.n is None:
            raise ValueError(f"{self.name} needs the cohort size (Defence.with_cohort) before it answers")
        params = self._mechanism_params(self.n)
        assert isinstance(params, OnlinePMWParams)
        return params

    @property
    def noisy_count_scale(self) -> float:
        """Discrete Laplace scale of one noisy count: the epsilon split over the query cap."""
        if self.epsilon is None or self.query_cap is None:
            raise ValueError("noisy-count needs its query cap (Defence.with_cap) before it answers")
        return self.query_cap / self.epsilon

    @property
    def randomised(self) -> bool:
        """Whether two releases of the same queries can differ (repetitions mean something)."""
        return self.name in (*STATEFUL, "noisy-count", "flip")

    @property
    def label(self) -> str:
        """A short human name of the setting, for tables and plot legends."""
        if self.name == "suppression":
            text = f"T={self.threshold}"
        elif self.name == "flip":
            text = f"p={self.flip:g}"
        elif self.name == "noisy-count":
            text = f"eps={self.epsilon:g}"
        elif self.name in STATEFUL:
            text = f"eps={self.epsilon:g} c={self.c}"
            if self.margin:
                text += f" m={self.margin:g}"
            if self.release_share is not None and self.name in ("svt2-noisy", *PMW):
                text += f" r={self.release_share:g}"
            if self.name == "cohort-pmw":
                text += f" quota={self.effective_quota}"
        else:
            text = ""
        if self.threshold != 1 and self.name != "suppression":
            text += f" T={self.threshold}"
        return f"{self.name} {text}".strip()

    def with_cap(self, queries: int) -> Defence:
        """``noisy-count`` needs its query cap fixed before any query is asked."""
        return replace(self, query_cap=queries) if self.name == "noisy-count" else self

    def with_cohort(self, n: int) -> Defence:
        """Online PMW needs the cohort size N before any query is asked."""
        return replace(self, n=int(n)) if self.is_pmw else self

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
        if self.name in FULL_OBSERVED:
            return self.release_all(alpha, beta, source).answers
        p = self.svt2_params
        if isinstance(p, SVT2MarginParams):
            return svt2_margin_batch(alpha, beta, p, rng=source).astype(np.int8)
        return svt2_batch(alpha, beta, t, p.epsilon1, p.epsilon2, p.c, redraw=p.redraw, rng=source).astype(
            np.int8
        )

    def release_all(self, alpha: np.ndarray, beta: np.ndarray, rng: RNGLike = None) -> NoisyRelease:
        """Flags, answers and released counts of ``runs x queries`` (:data:`FULL_OBSERVED` only).

        The answers are :meth:`release`'s, drawn from the same randomness. A BOT's released count is
        public (the prior's ``beta`` for ``svt2-noisy``, the synthetic count for ``online-pmw``): it
        is reported as NaN for ``svt2-noisy``, whose service releases no count on a BOT.
        """
        if self.name not in FULL_OBSERVED:
            raise ValueError(f"{self.name}: its answer is its whole observation; use release()")
        alpha = np.asarray(alpha)
        beta = np.broadcast_to(np.asarray(beta, dtype=np.float64), alpha.shape)
        source = as_source(rng)
        if self.name == "online-pmw":
            return self._release_pmw(alpha, beta, source)
        if self.name == "cohort-pmw":  # each run one cohort's stream, asked by the researchers in turn
            owner = np.arange(alpha.shape[1]) % self.researchers
            return self._release_pmw(alpha, beta, source, owner=owner, quota=self.effective_quota)
        return svt2_noisy_batch(alpha, beta, self.svt2_params, rng=source)  # type: ignore[arg-type]

    def release_accounts(
        self, alpha: np.ndarray, beta: np.ndarray, rng: RNGLike = None, *, accounts: int
    ) -> NoisyRelease:
        """``cohort-pmw``: every ``accounts`` consecutive runs are accounts of one cohort, their queries
        asked round-robin (every account's first query, then every second, ...) over the accounts in a
        random order through the cohort's one stream, each account within its quota."""
        if self.name != "cohort-pmw":
            raise ValueError(f"{self.name}: every account has a budget of its own; use release_all()")
        alpha = np.asarray(alpha)
        beta = np.broadcast_to(np.asarray(beta, dtype=np.float64), alpha.shape)
        runs, k = alpha.shape
        if accounts < 1 or runs % accounts:
            raise ValueError(f"{runs} runs are not whole cohorts of {accounts} accounts")
        source = as_source(rng)
        cohorts = runs // accounts
        # position t * accounts + j of a cohort's stream: query t of its j-th account in a random order
        order = np.argsort(uniform((cohorts, accounts), source), axis=1)
        rows = (np.arange(cohorts)[:, None] * accounts + order)[:, None, :]  # cohorts x 1 x accounts
        take = lambda m: m[rows, np.arange(k)[None, :, None]].reshape(cohorts, -1)  # noqa: E731
        owner = np.broadcast_to(order[:, None, :], (cohorts, k, accounts)).reshape(cohorts, -1)
        out = self._release_pmw(take(alpha), take(beta), source, owner=owner, quota=self.effective_quota)
        back = np.empty((runs, k), dtype=np.int64)  # stream position of every (run, query)
        back[rows.reshape(cohorts, accounts), :] = (
            np.arange(cohorts)[:, None, None] * (k * accounts)
            + np.arange(k)[None, None, :] * accounts
            + np.arange(accounts)[None, :, None]
        )
        flat = back.reshape(-1)
        return NoisyRelease(
            out.flags.reshape(-1)[flat].reshape(runs, k),
            out.answers.reshape(-1)[flat].reshape(runs, k),
            out.counts.reshape(-1)[flat].reshape(runs, k),
        )

    def _release_pmw(
        self,
        alpha: np.ndarray,
        beta: np.ndarray,
        source,
        *,
        owner: np.ndarray | None = None,
        quota: int | None = None,
    ) -> NoisyRelease:
        """Online PMW with every query at a probe of its own (see the module docstring)."""
        p = self.pmw_params
        runs, k = alpha.shape
        inside = np.clip(beta / p.n, 0.5 / p.n, 1.0 - 0.5 / p.n).reshape(-1)
        prior = np.column_stack([inside, 1.0 - inside])
        probe = np.arange(runs * k, dtype=np.int64).reshape(runs, k)
        lo, hi = np.zeros((1, k), dtype=np.int64), np.ones((1, k), dtype=np.int64)
        return online_pmw_batch(
            probe, lo, hi, alpha, prior, p, runs=runs, rng=source, owner=owner, quota=quota
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
        if self.is_pmw:
            return self._p_one_pmw(alpha, beta)
        p = self.svt2_params
        sf = _difference_sf(p.query_scale, p.threshold_scale)
        if isinstance(p, SVT2MarginParams):
            # TOP iff W >= T + a - max(alpha, beta) and W' < T - b - min(alpha, beta)
            high = np.maximum(
                sf(np.ceil(p.low_threshold - alpha - 1e-9)), sf(np.ceil(p.low_threshold - beta - 1e-9))
            )
            low = np.minimum(
                sf(np.ceil(p.high_threshold - alpha - 1e-9)), sf(np.ceil(p.high_threshold - beta - 1e-9))
            )
            top = high * (1.0 - low)
            if not isinstance(p, SVT2NoisyParams):
                return top
            noisy_yes = discrete_laplace_sf(np.ceil(t - alpha - 1e-9), p.release_scale)  # P(alpha + L >= T)
            return top * noisy_yes + (1.0 - top) * (beta >= t)
        # TOP iff max + y >= T + z1 and min + y' < T + z2, i.e. W >= T - max and W' < T - min
        # with W = y - z1, W' = y' - z2 independent and identically distributed on the integers.
        # sf is non-increasing, so sf(T - max(a, b)) = max(sf(T - a), sf(T - b)) (and min for the
        # other side): two small lookups, for the counts and for the betas, then one broadcast.
        from_alpha, from_beta = sf(np.ceil(t - alpha - 1e-9)), sf(np.ceil(t - beta - 1e-9))
        return np.maximum(from_alpha, from_beta) * (1.0 - np.minimum(from_alpha, from_beta))

    def _p_one_pmw(self, alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
        """Online PMW before any update at the probe: the synthetic count is the prior's ``beta``
        (floored as in :meth:`_release_pmw`); TOP iff ``q + nu >= margin + rho``."""
        top = self.p_top(alpha, beta)
        noisy_yes = discrete_laplace_sf(np.ceil(self.threshold - alpha - 1e-9), self.release_scale)
        return top * noisy_yes + (1.0 - top) * self.bot_answer(beta)

    # --- the full observation of FULL_OBSERVED defences: flag, answer and count ---------------------

    @property
    def release_scale(self) -> float:
        """Discrete Laplace scale of the count a TOP releases (``c / eps3``)."""
        p = self.pmw_params if self.is_pmw else self.svt2_params
        if not isinstance(p, OnlinePMWParams | SVT2NoisyParams):
            raise ValueError(f"{self.name} releases no noisy count")
        return float(p.release_scale)

    def bot_answer(self, beta: np.ndarray) -> np.ndarray:
        """The answer of a BOT: the public count ``beta`` (the prior's expectation, or Online PMW's
        synthetic count) against T. Online PMW's synthetic masses are floored at half a patient."""
        beta = np.asarray(beta, dtype=np.float64)
        if self.is_pmw:
            beta = np.clip(beta, 0.5, self.pmw_params.n - 0.5)
        return (beta >= self.threshold).astype(np.float64)

    def p_top(self, alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
        """``P(TOP | alpha, beta)`` of a :data:`FULL_OBSERVED` defence, the per-query marginal over the
        secret threshold (as :meth:`p_observe_one`). For ``online-pmw`` ``beta`` is the synthetic count
        the query is compared with (the prior's expectation before any update at the probe)."""
        alpha = np.asarray(alpha, dtype=np.float64)
        if self.is_pmw:
            p = self.pmw_params
            yes = self.bot_answer(beta) > 0
            t = p.count_threshold
            q = np.where(yes, t - 1 - alpha, alpha - t)
            return _difference_sf(p.query_scale, p.threshold_scale)(np.ceil(p.margin - q - 1e-9))
        p = self.svt2_params
        if self.name != "svt2-noisy" or not isinstance(p, SVT2MarginParams):
            raise ValueError(f"{self.name}: its flag is its whole observation; use p_observe_one()")
        beta = np.asarray(beta, dtype=np.float64)
        sf = _difference_sf(p.query_scale, p.threshold_scale)
        high = np.maximum(
            sf(np.ceil(p.low_threshold - alpha - 1e-9)), sf(np.ceil(p.low_threshold - beta - 1e-9))
        )
        low = np.minimum(
            sf(np.ceil(p.high_threshold - alpha - 1e-9)), sf(np.ceil(p.high_threshold - beta - 1e-9))
        )
        return high * (1.0 - low)

    def observation_likelihood(
        self,
        alpha: np.ndarray,
        beta: np.ndarray,
        flags: np.ndarray,
        answers: np.ndarray,
        counts: np.ndarray,
        *,
        use_counts: bool,
    ) -> np.ndarray:
        """``P(observation | alpha, beta)``, broadcast over all arguments, for a :data:`FULL_OBSERVED`
        defence whose response shows the flag, the answer and (``use_counts``) the released count.

        * unanswered (flag -1): 1 (nothing observed, nothing scored);
        * BOT: ``1 - P(TOP)``; its answer and count are public (``beta``), so they add nothing;
        * TOP, count seen: ``P(TOP) * P(L = v - alpha)``, ``L`` the release's discrete Laplace noise;
          a count of 0 or less is read as ``v <= 0`` (the service releases ``max(v, 0)``);
        * TOP, answer only: ``P(TOP) * P(alpha + L >= T)`` for "yes", ``P(TOP) * P(alpha + L < T)``
          for "no".
        """
        alpha = np.asarray(alpha, dtype=np.float64)
        flags, answers = np.asarray(flags), np.asarray(answers)
        counts = np.asarray(counts, dtype=np.float64)
        top = self.p_top(alpha, beta)
        scale = self.release_scale
        if use_counts:
            seen = np.isfinite(counts)
            noise = np.where(seen, np.rint(np.nan_to_num(counts) - alpha), 0.0)
            exact = discrete_laplace_pmf(noise, scale)
            at_most_zero = 1.0 - discrete_laplace_sf(1.0 - alpha, scale)  # P(alpha + L <= 0)
            release = np.where(seen, np.where(np.nan_to_num(counts) <= 0, at_most_zero, exact), np.nan)
        else:
            seen = np.zeros(np.shape(counts), dtype=bool)
            release = np.nan
        yes = discrete_laplace_sf(np.ceil(self.threshold - alpha - 1e-9), scale)
        by_answer = np.where(answers == 1, yes, 1.0 - yes)
        on_top = top * np.where(seen, release, by_answer)
        return np.where(flags == TOP, on_top, np.where(flags == BOT, 1.0 - top, 1.0))


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

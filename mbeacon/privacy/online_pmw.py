"""Online Private Multiplicative Weights (Hardt and Rothblum) started at the public population prior.

Per probe the mechanism keeps a *synthetic* histogram over value bins: it starts at the public prior
and moves only when a sparse-vector test says its answer is wrong. A query is ``(probe, lo, hi)``
with ``lo < hi`` bin indices (the range ``[lo, hi)`` of bins: ranges are canonicalised to bin edges
by the caller, and ``alpha`` is the cohort's count in those bins):

    rho ~ Lap(1/eps1); count = 0
    for each query: s = n * h_probe[lo:hi].sum()              (synthetic count, public)
        q = alpha - T  if s < T  else  T - 1 - alpha          (>= 0 iff the data disagrees with s)
        nu ~ Lap(2c/eps2)
        BOT if q + nu < margin + rho: answer s >= T, release the count s      (free)
        TOP: v = alpha + Lap(c/eps3); answer v >= T, release v;
             update h_probe: the range's mass becomes v / n (clipped into (0, 1)), the bins inside
             and outside are rescaled by one factor each (the multiplicative-weights step whose
             learning rate lands exactly on the measurement: the KL projection of h onto it)
             count += 1; halt when count >= c

(``T`` is rounded up to a whole count: ``alpha >= T`` iff ``alpha >= ceil(T)`` for counts.) Later
questions at the same probe, other ranges and counts included, are answered from the updated
histogram at no cost: the histogram is a function of the public prior and of released values only.

Privacy cost: ``eps1 + eps2 + eps3`` for the whole stream, however long (``online_pmw_epsilon``).
*Proof (reduction to Lyu, Su and Li's generalised SVT, Alg. 7, Theorem 4).* ``q_i`` is a
sensitivity-1 function of the cohort (``alpha_i`` moves by at most one patient when one patient is
replaced; the sign of ``q_i`` is chosen from ``s_i``, which depends only on the public prior and on
earlier outputs, so the query is adaptively chosen from public information as the theorem allows).
The test is Alg. 7 with threshold ``margin``, ``rho ~ Lap(1/eps1)`` and non-monotonic query noise
``Lap(2c/eps2)``; on each of at most ``c`` TOPs it releases ``alpha_i + Lap(c/eps3)``, which is
``T + (q_i + noise)`` or ``T - 1 - (q_i + noise)`` (the noise is symmetric), a post-processing of
Alg. 7's numeric output ``q_i + Lap(c/eps3)``.
Alg. 7 is ``(eps1 + eps2 + eps3)``-DP; the answers, the released synthetic counts and the histogram
updates are post-processing of its outputs. All noise is lattice Laplace on the integers (counts),
which keeps the proof as it is (``docs/privacy.md``, "Discrete noise on the lattice").

The test compares the data with the synthetic answer on the decision ("at least T patients?"), the
question the beacon answers; the notes' variant compares the counts (``|alpha - s| >= tolerance``),
which costs the same and would spend positives on errors that do not change a yes/no answer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np

from mbeacon.privacy._svt2_scan import _sf
from mbeacon.privacy.accounting import online_pmw_spent
from mbeacon.privacy.noise import RNGLike, as_source, discrete_laplace_sf, lattice_laplace, uniform
from mbeacon.privacy.sparse_vector import BOT, TOP, UNANSWERED
from mbeacon.privacy.svt2_noisy import NoisyRelease
from mbeacon.privacy.validation import finite, fraction, integer, non_negative, positive

__all__ = [
    "OnlinePMWParams",
    "OnlinePMWState",
    "online_pmw",
    "online_pmw_batch",
    "online_pmw_epsilon",
    "online_pmw_step",
    "synthetic_histogram",
    "update_target",
]


def online_pmw_epsilon(epsilon1: float, epsilon2: float, epsilon3: float, c: int) -> float:
    """Total privacy cost of one Online PMW stream: ``eps1 + eps2 + eps3`` (Lyu-Su-Li, Alg. 7);
    :func:`~mbeacon.privacy.accounting.online_pmw_spent` says what a run has spent so far."""
    return online_pmw_spent(epsilon1, epsilon2, epsilon3, c, c)


@dataclass(frozen=True)
class OnlinePMWParams:
    """Public parameters of one Online PMW instance (safe to publish).

    ``n`` is the public cohort size (the synthetic count is ``n`` times a histogram mass), ``margin``
    (patients, ``>= 0``) how clearly the data must disagree with the synthetic answer before a TOP.
    """

    threshold: float
    epsilon1: float
    epsilon2: float
    epsilon3: float
    c: int
    n: int
    margin: float = 0.0

    def __post_init__(self) -> None:
        checked = {
            "threshold": finite(self.threshold, "threshold"),
            "epsilon1": positive(self.epsilon1, "epsilon1"),
            "epsilon2": positive(self.epsilon2, "epsilon2"),
            "epsilon3": positive(self.epsilon3, "epsilon3"),
            "c": integer(self.c, "c"),
            "n": integer(self.n, "n"),
            "margin": non_negative(self.margin, "margin"),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @property
    def epsilon(self) -> float:
        """The total privacy cost this instance promises."""
        return online_pmw_epsilon(self.epsilon1, self.epsilon2, self.epsilon3, self.c)

    @property
    def count_threshold(self) -> int:
        """``ceil(T)``: for counts, ``alpha >= T`` iff ``alpha >= ceil(T)``."""
        return math.ceil(self.threshold)

    @property
    def threshold_scale(self) -> float:
        return 1.0 / self.epsilon1

    @property
    def query_scale(self) -> float:
        return 2 * self.c / self.epsilon2

    @property
    def release_scale(self) -> float:
        return self.c / self.epsilon3

    @classmethod
    def from_epsilon(
        cls,
        epsilon: float,
        c: int,
        threshold: float,
        n: int,
        *,
        release_share: float = 1 / 3,
        margin: float = 0.0,
    ) -> OnlinePMWParams:
        """``eps3 = release_share * epsilon``, the rest ``eps1 : eps2 = 1 : (2c)^(2/3)`` (Lyu-Su-Li)."""
        epsilon = positive(epsilon, "epsilon")
        c = integer(c, "c")
        eps3 = fraction(release_share, "release_share") * epsilon
        rest = epsilon - eps3
        eps1 = rest / (1 + (2 * c) ** (2 / 3))
        return cls(threshold, eps1, rest - eps1, eps3, c, n, margin)


Update = tuple[str, int, int, float]  # (probe, lo, hi, target mass of [lo, hi))


@dataclass(frozen=True)
class OnlinePMWState:
    """The state between queries: the noisy threshold (secret), TOPs spent and the histogram updates.

    The updates are at most ``c`` small tuples: each probe's histogram is re-derived from its public
    prior, so the state stays small enough for the ledger whatever the number of bins.
    """

    z: float
    count: int
    updates: tuple[Update, ...] = ()

    def __repr__(self) -> str:
        return f"OnlinePMWState(count={self.count}, updates={len(self.updates)}, threshold=<secret>)"

    @classmethod
    def start(cls, params: OnlinePMWParams, rng: RNGLike = None) -> OnlinePMWState:
        return cls(float(lattice_laplace(params.threshold_scale, 1.0, None, as_source(rng))), 0)

    def halted(self, params: OnlinePMWParams) -> bool:
        return self.count >= params.c

    def updates_at(self, probe: str) -> list[tuple[int, int, float]]:
        return [(lo, hi, target) for p, lo, hi, target in self.updates if p == probe]

    def to_json(self) -> dict:
        return {"z": self.z, "count": self.count, "updates": [list(u) for u in self.updates]}

    @classmethod
    def from_json(cls, data: dict) -> OnlinePMWState:
        updates = tuple((str(p), int(lo), int(hi), float(t)) for p, lo, hi, t in data.get("updates", ()))
        return cls(float(data["z"]), int(data["count"]), updates)


def _check_prior(prior: np.ndarray) -> np.ndarray:
    """A prior histogram (or table of them, one row per probe): finite, every bin > 0, rows sum to 1."""
    p = np.asarray(prior, dtype=np.float64)
    if p.ndim not in (1, 2) or p.shape[-1] < 2:
        raise ValueError("prior must be a histogram of at least 2 bins (or a table of them)")
    if not np.all(np.isfinite(p)) or not np.all(p > 0):
        raise ValueError(
            "prior bins must be finite and > 0 "
            "(multiplicative weights cannot move mass into a bin of weight 0)"
        )
    if not np.allclose(p.sum(axis=-1), 1.0, rtol=0, atol=1e-6):
        raise ValueError("each prior histogram must sum to 1")
    return p / p.sum(axis=-1, keepdims=True)


@numba.njit(cache=True, nogil=True)
def _project(h: np.ndarray, lo: int, hi: int, target: float) -> None:
    """Rescale ``h`` in place so that ``h[lo:hi].sum() == target`` (one factor inside, one outside)."""
    if lo <= 0 and hi >= h.size:
        return  # the whole histogram: nothing to move
    inside = 0.0
    for b in range(lo, hi):
        inside += h[b]
    total = 0.0
    for b in range(h.size):
        total += h[b]
    if not 0.0 < inside < total:
        return
    up, down = target / inside, (1.0 - target) / (total - inside)
    for b in range(h.size):
        h[b] *= up if lo <= b < hi else down


def synthetic_histogram(prior: np.ndarray, updates: Sequence[tuple[int, int, float]]) -> np.ndarray:
    """The synthetic histogram of one probe: its prior after the recorded updates, in order.

    Public: a function of the public prior and of released values. The service may answer counts
    (``n * h[lo:hi].sum()``) from it at no cost.
    """
    h = _check_prior(prior).copy()
    if h.ndim != 1:
        raise ValueError("prior must be one probe's histogram")
    for lo, hi, target in updates:
        _project(h, int(lo), int(hi), float(target))
    return h


def update_target(v: float, n: int) -> float:
    """The mass a TOP's released count ``v`` gives its range: ``v / n``, kept half a patient inside
    (0, 1) so that no bin's weight reaches 0 or 1 (a multiplicative update could not move it again)."""
    return min(max(v / n, 0.5 / n), 1.0 - 0.5 / n)


def _check_query(lo: int, hi: int, alpha: int, bins: int, n: int) -> tuple[int, int, int]:
    lo, hi = integer(lo, "lo", minimum=0), integer(hi, "hi", minimum=1)
    if not lo < hi <= bins:
        raise ValueError(f"the range must be bins lo < hi <= {bins}, got lo={lo}, hi={hi}")
    alpha = integer(alpha, "alpha", minimum=0)
    if alpha > n:
        raise ValueError(f"alpha must be a count of at most n ({n}) patients, got {alpha}")
    return lo, hi, alpha


def online_pmw_step(
    state: OnlinePMWState,
    probe: str,
    lo: int,
    hi: int,
    alpha: int,
    prior: np.ndarray,
    params: OnlinePMWParams,
    rng: RNGLike = None,
) -> tuple[int, int, float | None, OnlinePMWState]:
    """Answer one query: ``(flag, answer, released count, state to save)``.

    The released count is the synthetic count on BOT and the noisy measurement on TOP; ``None``
    once halted.
    """
    if state.halted(params):
        return UNANSWERED, UNANSWERED, None, state
    h = synthetic_histogram(prior, state.updates_at(probe))
    lo, hi, alpha = _check_query(lo, hi, alpha, h.size, params.n)
    source = as_source(rng)
    s = params.n * float(h[lo:hi].sum())
    t = params.count_threshold
    synthetic_yes = s >= params.threshold
    q = (t - 1 - alpha) if synthetic_yes else (alpha - t)
    nu = float(lattice_laplace(params.query_scale, 1.0, None, source))
    if q + nu < params.margin + state.z:
        return BOT, int(synthetic_yes), s, state
    v = alpha + float(lattice_laplace(params.release_scale, 1.0, None, source))
    update = (str(probe), lo, hi, update_target(v, params.n))
    after = OnlinePMWState(state.z, state.count + 1, (*state.updates, update))
    return TOP, int(v >= params.threshold), v, after


def online_pmw(
    probes: Sequence[str],
    lo: np.ndarray,
    hi: np.ndarray,
    alpha: np.ndarray,
    priors: dict[str, np.ndarray],
    params: OnlinePMWParams,
    rng: RNGLike = None,
) -> NoisyRelease:
    """One stream answered by :func:`online_pmw_step` query by query (``priors`` by probe).

    Privacy cost: ``params.epsilon`` (see the module docstring).
    """
    source = as_source(rng)
    state = OnlinePMWState.start(params, source)
    k = len(probes)
    flags = np.full(k, UNANSWERED, dtype=np.int8)
    answers = np.full(k, UNANSWERED, dtype=np.int8)
    counts = np.full(k, np.nan)
    for i in range(k):
        if state.halted(params):
            break
        flags[i], answers[i], v, state = online_pmw_step(
            state, probes[i], int(lo[i]), int(hi[i]), int(alpha[i]), priors[probes[i]], params, source
        )
        counts[i] = v
    return NoisyRelease(flags, answers, counts)


@numba.njit(cache=True, nogil=True)
def _kernel(
    probe,
    lo,
    hi,
    alpha,
    prior,
    n,
    threshold,
    t,
    margin,
    c,
    table,
    reach,
    rho,
    targets,
    meas,
    exact,
    owner,
    quota,
    keep_answering,
    out_f,
    out_a,
    out_v,
):
    """Every run's stream in turn; the noise comes in, drawn by the caller (``exact``: broken twin).

    ``owner`` (rows x queries) says whose quota a query spends; an owner with ``quota`` positives, or
    any query after the ``c``-th positive, gets no test: with ``keep_answering`` it is answered from
    the synthetic state (flag UNANSWERED, the public answer, no count), otherwise not at all.

    Between two TOPs the histograms do not move, so each query is TOP independently with the exact
    probability ``P(nu >= margin + rho - q)`` (from ``table``); the next TOP is the first query at
    which the survival ``prod (1 - p)`` falls to the run's next uniform target: one uniform per TOP
    instead of one Laplace draw per query, and the same distribution as the step loop.
    """
    runs, k = out_f.shape
    bins = prior.shape[1]
    h = np.empty(bins)
    u_probe = np.empty(c, dtype=np.int64)
    u_lo = np.empty(c, dtype=np.int64)
    u_hi = np.empty(c, dtype=np.int64)
    u_target = np.empty(c)
    held = np.zeros(owner.max() + 1 if owner.size else 1, dtype=np.int64)
    for r in range(runs):
        count = 0
        survival = 1.0
        held[:] = 0
        for i in range(k):
            who = owner[min(r, owner.shape[0] - 1), i]
            exhausted = count >= c or held[who] >= quota
            if exhausted and not keep_answering:
                out_f[r, i] = -1
                out_a[r, i] = -1
                out_v[r, i] = np.nan
                continue
            p = probe[min(r, probe.shape[0] - 1), i]
            a_lo = lo[min(r, lo.shape[0] - 1), i]
            a_hi = hi[min(r, hi.shape[0] - 1), i]
            a = alpha[min(r, alpha.shape[0] - 1), i]
            h[:] = prior[p]
            for u in range(count):
                if u_probe[u] == p:
                    _project(h, u_lo[u], u_hi[u], u_target[u])
            s = 0.0
            for b in range(a_lo, a_hi):
                s += h[b]
            s *= n
            yes = s >= threshold
            if exhausted:  # no test: the learnt synthetic state answers, free, and no count
                out_f[r, i] = -1
                out_a[r, i] = 1 if yes else 0
                out_v[r, i] = np.nan
                continue
            q = (t - 1 - a) if yes else (a - t)
            survival *= 1.0 - _sf(math.ceil(margin + rho[r] - q), table, reach)
            if survival > targets[r, count]:
                out_f[r, i] = 0
                out_a[r, i] = 1 if yes else 0
                out_v[r, i] = s
                continue
            v = a + meas[r, count]
            out_f[r, i] = 1
            out_a[r, i] = 1 if v >= threshold else 0
            out_v[r, i] = v
            moved = float(a) if exact else v
            u_probe[count], u_lo[count], u_hi[count] = p, a_lo, a_hi
            u_target[count] = min(max(moved / n, 0.5 / n), 1.0 - 0.5 / n)
            count += 1
            held[who] += 1
            survival = 1.0


def _rows(x: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """``x`` as int64 ``rows x queries`` with one row if it is the same for every run, else ``runs``."""
    x = np.asarray(x)
    rows = x.shape[0] if x.ndim == 2 else 1
    return np.ascontiguousarray(np.broadcast_to(x, (rows, shape[1])), dtype=np.int64)


def _tail_table(scale: float) -> tuple[np.ndarray, int]:
    """``P(nu >= m)`` for integer ``m`` in ``[-reach, reach + 1]`` (discrete Laplace, ``scale``)."""
    reach = math.ceil(40 * scale) + 1  # beyond 40 scales the tail is 0 or 1 to double precision
    m = np.arange(-reach, reach + 2, dtype=np.float64)
    tail = discrete_laplace_sf(m, scale)
    return tail, reach


def online_pmw_batch(
    probe: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    alpha: np.ndarray,
    prior: np.ndarray,
    params: OnlinePMWParams,
    *,
    runs: int | None = None,
    rng: RNGLike = None,
    owner: np.ndarray | None = None,
    quota: int | None = None,
    _exact_updates: bool = False,
) -> NoisyRelease:
    """:func:`online_pmw` over ``runs x queries`` independent runs, compiled.

    ``owner`` and ``quota`` model ``cohort-pmw``'s holders (``mbeacon.beacon.sanitisers.cohort_pmw``):
    each query's holder (non-negative integers, broadcast as ``alpha``) may spend at most ``quota`` of
    a run's ``c`` positives; a query past its holder's quota or past the ``c``-th positive is answered
    from the synthetic state with no test (flag UNANSWERED, the synthetic answer, no count), as
    :func:`mbeacon.privacy.cohort_pmw.cohort_pmw_batch` (the audited step loop at one probe) does.
    Without ``quota`` a run halts at its ``c``-th positive and answers nothing more (``online-pmw``).

    ``probe`` indexes the rows of ``prior`` (``probes x bins``); ``probe``, ``lo``, ``hi`` and
    ``alpha`` broadcast to ``runs x queries`` (1-D with ``runs`` repeats one stream). Each run's noise
    is drawn up front from ``rng``: its threshold, one uniform per possible TOP that decides where the
    next TOP falls (see ``_kernel``) and one measurement per possible TOP. That is the law of the step
    loop, which draws a query noise per query; draws after a run's halt are discarded unseen.
    ``_exact_updates`` is for the audit's broken twin only.
    """
    table = _check_prior(prior)
    table = table[np.newaxis, :] if table.ndim == 1 else table
    arrays = [np.asarray(x) for x in (probe, lo, hi, alpha)]
    for name, x in zip(("probe", "lo", "hi", "alpha"), arrays, strict=True):
        if x.dtype.kind not in "iuf" or not np.all(x == np.round(x)):
            raise ValueError(f"{name} must be whole numbers")
    shape = np.broadcast_shapes(*(x.shape for x in arrays))
    if len(shape) == 1:
        shape = (1 if runs is None else runs, shape[0])
    if len(shape) != 2 or (runs is not None and shape[0] != runs):
        raise ValueError(f"probe/lo/hi/alpha must broadcast to runs x queries, got {shape}")
    # each input keeps one row when it is shared by all runs (no runs x queries copies)
    p, a_lo, a_hi, a = (_rows(x, shape) for x in arrays)
    if p.size and (p.min() < 0 or p.max() >= table.shape[0]):
        raise ValueError(f"probe must index a row of prior (0..{table.shape[0] - 1})")
    if np.any(a_lo < 0) or np.any(a_hi <= a_lo) or np.any(a_hi > table.shape[1]):
        raise ValueError(f"every range must be bins lo < hi <= {table.shape[1]}")
    if np.any(a < 0) or np.any(a > params.n):
        raise ValueError(f"alpha must be counts between 0 and n ({params.n})")
    source = as_source(rng)
    n_runs = shape[0]
    rho = lattice_laplace(params.threshold_scale, 1.0, n_runs, source).astype(np.float64)
    targets = 1.0 - uniform((n_runs, params.c), source)  # on [0, 1): 0 only stops where p = 1
    tail, reach = _tail_table(params.query_scale)
    meas = lattice_laplace(params.release_scale, 1.0, (n_runs, params.c), source).astype(np.float64)
    flags = np.empty(shape, dtype=np.int8)
    answers = np.empty(shape, dtype=np.int8)
    counts = np.empty(shape)
    if quota is not None and (int(quota) != quota or quota < 1):
        raise ValueError(f"quota must be a whole number >= 1, got {quota}")
    owners = _rows(np.zeros(1, dtype=np.int64) if owner is None else owner, shape)
    if owners.size and owners.min() < 0:
        raise ValueError("owner must be non-negative integers")
    _kernel(
        p,
        a_lo,
        a_hi,
        a,
        table,
        float(params.n),
        params.threshold,
        params.count_threshold,
        params.margin,
        params.c,
        tail,
        reach,
        rho,
        targets,
        meas,
        _exact_updates,
        owners,
        params.c if quota is None else int(quota),
        quota is not None,
        flags,
        answers,
        counts,
    )
    return NoisyRelease(flags, answers, counts)

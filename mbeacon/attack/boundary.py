"""The boundary attacker: spend the defence's positives where they tell the most about the victim.

A defence with a decision margin (Online PMW, ``svt2-noisy``) answers a range from the public prior
(or its synthetic distribution) unless the data clearly disagree, i.e. the cohort holds at least
``T + margin`` patients (give or take the noise) where the prior expects fewer than ``T``. The
rarest-range attacker's ranges never do, so it only sees the rare TOPs the noise makes. This
attacker asks, at the cohort's DMPs, windows around the victim's value that the prior puts below
``T`` patients and that the cohort's population (the attacker's pool of profiles, as the ``pooled``
plan uses) fills with enough people for the query noise to push a TOP through now and then. Each
TOP releases a noisy count of the window, which the victim moves by one.

Which count to aim at follows from the defence's public parameters (:class:`BoundaryModel`): a
window holding ``k`` of ``N`` patients gets a TOP with probability ``P(TOP | k)`` per ask, so the
budget buys ``min(c, budget * P(TOP | k))`` released counts there, each telling the victim's shift
``1 - miss - k/N`` apart with the noise ``2 b^2 + k (1 - k/N)`` (``b`` the release's scale). Near
``T + margin`` TOPs are cheap but the window is mostly other people; near ``T`` a member moves the
count by almost one but TOPs are too rare to spend ``c`` of them. Against Online PMW at epsilon 10,
c = 50, T = 1, margin 60 and 1,000 queries the best is about 24 patients. Per victim:

1. **plan** (:func:`plan_boundary`): at each probe where some window around the pool's median holds
   enough people and little prior mass, the window ``[x - w, x + w]`` around the victim's value ``x``
   (``w`` from :data:`WIDTHS`) of highest :meth:`BoundaryModel.value` (the pool's count
   leave-one-out, the member's chance ``miss`` to lie outside) among those whose prior expectation
   stays below ``T``; probes in order of that value;
2. **ask** the window, then the same window with one bound moved out one float32 step at a time (a new
   question with, almost surely, the same count and fresh query noise) until a TOP, then the next
   probe (after a TOP, Online PMW's synthetic distribution there has moved onto the data), until the
   budget or the ``c`` positives are spent;
3. **score** each window once: the exact law of its asks' whole responses (flags, answers, released
   count: :meth:`~mbeacon.attack.defences.Defence.observation_likelihood`, multiplied over the asks,
   which share the count), averaged over the window's count: ``Bin(N, pi)`` for a non-member,
   ``1 + Bin(N - 1, pi)`` for a member (``Bin(N - 1, pi)`` when the measurement noise or a missing
   value moved the member out of the window).

The per-ask law is the marginal over the secret threshold (as every model here): every TOP decision
of a stream compares with the same threshold, so one patient more in every window looks like a
threshold one lower, and the flags alone cannot separate the two; the released counts can. Defined
for the defences whose response carries the flag and a count
(:data:`~mbeacon.attack.defences.FULL_OBSERVED`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr
from scipy.stats import binom

from mbeacon.attack.defences import Defence
from mbeacon.attack.pmw_state import Probability
from mbeacon.attack.tracker import Differences, accumulate
from mbeacon.privacy.svt2_noisy import NoisyRelease

#: Half-widths of the windows tried around the victim's value.
WIDTHS = (0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.2)
#: Probes kept per victim (most telling first).
PER_VICTIM = 300


@dataclass(frozen=True)
class BoundaryModel:
    """What the attacker makes of the defence's public parameters: ``p_top[k]``, the chance that one
    ask of a window holding ``k`` patients (``k = 0..n``) that the prior puts below ``T`` gets a TOP,
    the released count's noise scale, the positives ``c`` and the query budget."""

    p_top: np.ndarray
    release_scale: float
    c: int
    budget: int

    @property
    def n(self) -> int:
        return self.p_top.size - 1

    def value(self, pi: np.ndarray, miss: np.ndarray | float = 0.0) -> np.ndarray:
        """What a window of pooled share ``pi`` (a member outside it with probability ``miss``) tells
        over the whole budget: the TOPs the budget buys there (at most ``c``) times the squared shift a
        member makes in the window's count (``1 - miss - pi``) over the released count's variance
        (the release noise's ``2 b^2`` plus the window's binomial spread)."""
        pi = np.asarray(pi, dtype=np.float64)
        count = self.n * pi
        p = np.interp(count, np.arange(self.n + 1), self.p_top)
        tops = np.minimum(self.c, self.budget * p)
        shift = np.clip(1.0 - np.asarray(miss, dtype=np.float64) - pi, 0.0, None)
        return tops * shift**2 / (2.0 * self.release_scale**2 + count * (1.0 - pi))

    @property
    def target(self) -> int:
        """The expected count whose windows tell the most (:meth:`value` with no miss)."""
        k = np.arange(self.n + 1)
        return int(np.argmax(self.value(k / self.n)))


def boundary_model(defence: Defence, n: int, budget: int) -> BoundaryModel:
    """:class:`BoundaryModel` of a :data:`~mbeacon.attack.defences.FULL_OBSERVED` defence for a cohort
    of ``n`` and ``budget`` queries per account (``c``: the positives one account may spend, for
    ``cohort-pmw`` its quota): public parameters only (``P(TOP)`` is the defence's
    per-query marginal over its secret threshold, the window compared with a count of 0, i.e. a prior
    that says "no")."""
    k = np.arange(n + 1, dtype=np.float64)
    p_top = np.asarray(defence.p_top(k, np.zeros_like(k)), dtype=np.float64)
    # the positives one account may spend: cohort-pmw's quota of the cohort's c, otherwise c
    positives = defence.effective_quota if defence.name == "cohort-pmw" else int(defence.c or 1)
    return BoundaryModel(p_top, defence.release_scale, int(positives), int(budget))


@dataclass(frozen=True)
class BoundaryPlan:
    """victims x planned probes (-1 / NaN padding): prior rows, windows, the pool's ``pi`` of the
    window, the chance a member's stored value falls outside it, and the prior's expected count."""

    rows: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    pi: np.ndarray
    miss: np.ndarray
    beta: np.ndarray


def plan_boundary(
    profiles: np.ndarray,
    prior_rows: np.ndarray,
    probability: Probability,
    *,
    model: BoundaryModel,
    below: float,
    noise_sd: float,
    missing: float = 0.0,
    per_victim: int = PER_VICTIM,
) -> BoundaryPlan:
    """Per victim and probe the window of highest :meth:`BoundaryModel.value` among those whose prior
    expected count is below ``below`` (``T``); probes in order of that value. ``profiles``: victims x
    probes, also the pool (leave-one-out)."""
    values = np.asarray(profiles, dtype=np.float64)
    victims, probes = values.shape
    n, target = model.n, model.target
    rows = np.asarray(prior_rows, dtype=np.int64)
    known = np.isfinite(values)
    size = known.sum(axis=0)
    with np.errstate(all="ignore"):
        median = np.nanmedian(np.where(known, values, np.nan), axis=0)
    # candidate probes: a window around the pool's median that the pool fills and the prior does not
    candidate = np.zeros(probes, dtype=bool)
    usable = (rows >= 0) & (size >= 2) & np.isfinite(median)
    for w in WIDTHS:
        lo, hi = np.clip(median - w, 0, 1), np.clip(median + w, 0, 1)
        inside = np.sum(known & (values >= lo) & (values <= hi), axis=0)
        expected = n * inside / np.maximum(size, 1)
        prior_count = n * np.nan_to_num(probability(np.maximum(rows, 0), lo, hi), nan=np.inf)
        candidate |= usable & (prior_count < below) & (expected >= 0.5 * target)
    columns = np.flatnonzero(candidate)
    k = len(columns)
    best = np.zeros((victims, k))  # value of the best window per victim and probe (0: none)
    out = {name: np.full((victims, k), np.nan) for name in ("lo", "hi", "pi", "miss", "beta")}
    for j, c in enumerate(columns):
        x, pool = values[:, c], np.sort(values[known[:, c], c])
        for w in WIDTHS:
            lo, hi = np.clip(x - w, 0, 1), np.clip(x + w, 0, 1)
            inside = np.searchsorted(pool, hi, side="right") - np.searchsorted(pool, lo, side="left")
            others = inside - np.isfinite(x)  # leave the victim out of its own estimate
            pi = (others + 0.5) / pool.size
            beta = n * np.nan_to_num(probability(np.full(victims, rows[c]), lo, hi), nan=np.inf)
            miss = min(1.0, 2.0 * float(ndtr(-w / max(noise_sd, 1e-9))) + missing)
            value = model.value(pi, miss)
            better = np.isfinite(x) & (beta < below) & (value > best[:, j])
            best[:, j] = np.where(better, value, best[:, j])
            for name, got in (("lo", lo), ("hi", hi), ("pi", pi), ("beta", beta), ("miss", miss)):
                out[name][:, j] = np.where(better, got, out[name][:, j])
    order = np.argsort(-best, axis=1, kind="stable")[:, :per_victim]
    chosen = np.take_along_axis(best, order, axis=1)
    valid = chosen > 0
    plan_rows = np.where(valid, rows[columns][order] if k else np.zeros_like(order), -1)
    taken = {name: np.where(valid, np.take_along_axis(a, order, axis=1), np.nan) for name, a in out.items()}
    return BoundaryPlan(plan_rows, taken["lo"], taken["hi"], taken["pi"], taken["miss"], taken["beta"])


def count_pmfs_with_miss(
    pi: np.ndarray, miss: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(k, member, non)`` over ``k = 0..n`` per row, each row with its own ``miss`` (see
    :func:`mbeacon.attack.lrt.count_pmfs`); computed once per distinct ``(pi, miss)``."""
    k = np.arange(n + 1, dtype=np.float64)
    pairs, which = np.unique(np.column_stack([pi, miss]), axis=0, return_inverse=True)
    which = np.asarray(which).reshape(-1)
    non = binom.pmf(k, n, pairs[:, :1])
    others = binom.pmf(k, n - 1, pairs[:, :1])
    with_victim = np.concatenate([np.zeros((len(pairs), 1)), others[:, :-1]], axis=1)
    member = (1.0 - pairs[:, 1:]) * with_victim + pairs[:, 1:] * others
    return k, member[which], non[which]


class BoundarySearch:
    """The asking of :func:`plan_boundary`'s windows over ``runs`` accounts, one query per run per step:
    each window until a TOP (or ``patience`` asks, if given), then the next."""

    def __init__(self, plan: BoundaryPlan, patience: int | None = None) -> None:
        self.plan = plan
        self.patience = patience
        runs = plan.rows.shape[0]
        self.index = np.zeros(runs, dtype=np.int64)
        self.repeat = np.zeros(runs, dtype=np.int64)
        self.asked = np.zeros(runs, dtype=np.int64)
        self.done = ~(plan.rows[:, 0] >= 0) if plan.rows.shape[1] else np.ones(runs, dtype=bool)
        self._log: list[tuple[np.ndarray, ...]] = []

    def queries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(runs, rows, lo, hi)`` of every active run's next question: the window with one bound moved
        out by ``repeat`` float32 steps (a new question; the store's float32 values it holds stay the
        same unless one lies within those few steps)."""
        runs = np.flatnonzero(~self.done)
        col = self.index[runs]
        lo, hi = self.plan.lo[runs, col], self.plan.hi[runs, col]
        repeat = self.repeat[runs]
        up_step = np.spacing(hi.astype(np.float32)).astype(np.float64)
        down_step = np.spacing(lo.astype(np.float32)).astype(np.float64)
        up = hi + repeat * up_step <= 1.0
        new_lo = np.where(up, lo, lo - repeat * down_step)
        new_hi = np.where(up, hi + repeat * up_step, hi)
        return runs, self.plan.rows[runs, col], new_lo, new_hi

    def update(self, runs: np.ndarray, release: NoisyRelease, compared: np.ndarray) -> None:
        """Record the answers and move each run on: a TOP (or ``patience`` asks) ends a probe; a
        refused answer (positives spent) ends the run."""
        col = self.index[runs]
        answered = release.flags >= 0
        self._log.append(
            (runs, self.asked[runs].copy(), col, release.flags, release.answers, release.counts, compared)
        )
        self.asked[runs] += 1
        self.repeat[runs] += 1
        move = release.flags == 1
        if self.patience is not None:
            move |= self.repeat[runs] >= self.patience
        self.index[runs] += move
        self.repeat[runs] = np.where(move, 0, self.repeat[runs])
        width = self.plan.rows.shape[1]
        at = np.minimum(self.index[runs], width - 1)
        finished = ~answered | (self.index[runs] >= width) | (self.plan.rows[runs, at] < 0)
        self.done[runs] |= finished

    def log(self) -> dict[str, np.ndarray]:
        """Every answered ask: ``run``, ``step`` (0-based), ``column`` (into the plan), ``flag``,
        ``answer``, ``count`` (released) and ``compared`` (the count the defence compared with)."""
        names = ("run", "step", "column", "flag", "answer", "count", "compared")
        if not self._log:
            return {name: np.zeros(0) for name in names}
        parts = [np.concatenate(p) for p in zip(*self._log, strict=True)]
        answered = parts[3] >= 0
        return {name: part[answered] for name, part in zip(names, parts, strict=True)}

    def scores(self, defence: Defence, n: int, queries: int) -> np.ndarray:
        """Cumulative log-likelihood ratios, runs x queries: one per window asked, its asks' joint law
        (:meth:`~mbeacon.attack.defences.Defence.observation_likelihood` multiplied over them, since
        they share the window's count) averaged over the count, at the step of its last ask."""
        runs, width = self.plan.rows.shape
        if not self._log:
            return np.zeros((runs, queries))
        run, step, col, flags, answers, counts, compared = (
            np.concatenate(p) for p in zip(*self._log, strict=True)
        )
        asked = np.flatnonzero(flags >= 0)
        run, step, col, flags, answers, counts, compared = (
            a[asked] for a in (run, step, col, flags, answers, counts, compared)
        )
        if run.size == 0:
            return np.zeros((runs, queries))
        window = np.unique(run * (width + 1) + col, return_inverse=True)[1].reshape(-1)
        windows = int(window.max()) + 1
        k = np.arange(n + 1, dtype=np.float64)
        log_lik = np.zeros((windows, n + 1))
        for start in range(0, run.size, 5000):
            i = np.arange(start, min(start + 5000, run.size))
            lik = defence.observation_likelihood(
                k[None, :],
                compared[i, None],
                flags[i, None],
                answers[i, None],
                counts[i, None],
                use_counts=True,
            )
            np.add.at(log_lik, window[i], np.log(np.maximum(lik, 1e-300)))
        last = np.zeros(windows, dtype=np.int64)
        np.maximum.at(last, window, step)
        w_run, w_col = np.zeros(windows, dtype=np.int64), np.zeros(windows, dtype=np.int64)
        w_run[window], w_col[window] = run, col
        _, member, non = count_pmfs_with_miss(self.plan.pi[w_run, w_col], self.plan.miss[w_run, w_col], n)
        top = log_lik.max(axis=1, keepdims=True)
        scaled = np.exp(log_lik - top)
        p_member = np.einsum("ij,ij->i", member, scaled)
        p_non = np.einsum("ij,ij->i", non, scaled)
        out = np.log(np.maximum(p_member, 1e-300)) - np.log(np.maximum(p_non, 1e-300))
        empty = np.zeros(windows)
        tests = Differences(w_run, last, w_col, empty, empty, empty, np.ones(windows, dtype=np.int8))
        return accumulate(tests, out, runs, queries)

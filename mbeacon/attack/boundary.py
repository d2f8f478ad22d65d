"""The boundary attacker: spend the defence's positives where they tell the most about the victim.

A defence with a decision margin (Online PMW, ``svt2-noisy``) answers a range from the public prior
(or its synthetic distribution) unless the data clearly disagree, i.e. the cohort holds at least
``T + margin`` patients (give or take the noise) where the prior expects fewer than ``T``. The
rarest-range attacker's ranges never do, so it only sees the rare TOPs the noise makes. This
attacker asks where the test is *at its boundary*: at the cohort's DMPs, a range around the victim's
value that the prior puts below ``T`` patients and that the cohort's population (the attacker's pool
of profiles, as the ``pooled`` plan uses) fills with about ``T + margin``. There a TOP is a coin flip
whose odds move with every patient in the range, the victim included, and each TOP releases a
noisy count of the range. Per probe:

1. **plan** (:func:`plan_boundary`): for each victim and each probe where some window around the pool's
   median holds many people and little prior mass, the window ``[x - w, x + w]`` around the victim's
   value ``x`` (``w`` from :data:`WIDTHS`) whose expected count (pool, leave-one-out) is closest to
   ``T + margin`` while the prior's expectation stays below ``T``; probes in order of that closeness;
2. **ask** the window, then the same window widened by one grid cell at a time (a new question with,
   almost surely, the same count and fresh query noise) until a TOP or :data:`REPEATS` asks, then the
   next probe (after a TOP, Online PMW's synthetic distribution there has moved onto the data);
3. **score** every answer with the exact per-query law of the whole response (flag, answer, released
   count: :meth:`~mbeacon.attack.defences.Defence.observation_likelihood`), averaged over the
   window's count: ``Bin(N, pi)`` for a non-member, ``1 + Bin(N - 1, pi)`` for a member
   (``Bin(N - 1, pi)`` when the measurement noise or a missing value moved the member out of the
   window), against the count the query was compared with.

The per-query law is the marginal over the secret threshold (as every model here); the repeated asks at
one probe share it and the count, which the marginal treats as independent. Integrating the threshold
out over each whole stream instead (every TOP decision of a stream compares with the same threshold, so
one patient more everywhere looks like a threshold one lower) moved the AUC by less than 0.002 on the
default simulation at forty times the cost, so the marginal stays. Defined for the defences
whose response carries the flag and a count (:data:`~mbeacon.attack.defences.FULL_OBSERVED`).
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
#: Asks per probe before moving on without a TOP.
REPEATS = 6
#: One grid cell of the store's float32 values: widening by it makes a new question, same count.
STEP = 1.0 / 2**14
#: Probes kept per victim (most telling first).
PER_VICTIM = 300


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
    n: int,
    target: float,
    below: float,
    noise_sd: float,
    missing: float = 0.0,
    per_victim: int = PER_VICTIM,
) -> BoundaryPlan:
    """Windows whose pooled expected count is near ``target`` (``T + margin``) and whose prior expected
    count is below ``below`` (``T``). ``profiles``: victims x probes, also the pool (leave-one-out)."""
    values = np.asarray(profiles, dtype=np.float64)
    victims, probes = values.shape
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
    best = np.full((victims, k), np.inf)  # |expected - target| of the best window per victim and probe
    out = {name: np.full((victims, k), np.nan) for name in ("lo", "hi", "pi", "miss", "beta")}
    for j, c in enumerate(columns):
        x, pool = values[:, c], np.sort(values[known[:, c], c])
        for w in WIDTHS:
            lo, hi = np.clip(x - w, 0, 1), np.clip(x + w, 0, 1)
            inside = np.searchsorted(pool, hi, side="right") - np.searchsorted(pool, lo, side="left")
            others = inside - np.isfinite(x)  # leave the victim out of its own estimate
            pi = (others + 0.5) / pool.size
            beta = n * np.nan_to_num(probability(np.full(victims, rows[c]), lo, hi), nan=np.inf)
            gap = np.abs(n * pi - target)
            better = np.isfinite(x) & (beta < below) & (gap < best[:, j])
            best[:, j] = np.where(better, gap, best[:, j])
            for name, value in (("lo", lo), ("hi", hi), ("pi", pi), ("beta", beta)):
                out[name][:, j] = np.where(better, value, out[name][:, j])
            miss = min(1.0, 2.0 * float(ndtr(-w / max(noise_sd, 1e-9))) + missing)
            out["miss"][:, j] = np.where(better, miss, out["miss"][:, j])
    order = np.argsort(best, axis=1, kind="stable")[:, :per_victim]
    chosen = np.take_along_axis(best, order, axis=1)
    valid = np.isfinite(chosen)
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
    """The asking of :func:`plan_boundary`'s windows over ``runs`` accounts, one query per run per step."""

    def __init__(self, plan: BoundaryPlan) -> None:
        self.plan = plan
        runs = plan.rows.shape[0]
        self.index = np.zeros(runs, dtype=np.int64)
        self.repeat = np.zeros(runs, dtype=np.int64)
        self.asked = np.zeros(runs, dtype=np.int64)
        self.done = ~(plan.rows[:, 0] >= 0) if plan.rows.shape[1] else np.ones(runs, dtype=bool)
        self._log: list[tuple[np.ndarray, ...]] = []

    def queries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(runs, rows, lo, hi)`` of every active run's next question (widened by ``repeat`` cells)."""
        runs = np.flatnonzero(~self.done)
        col = self.index[runs]
        lo, hi = self.plan.lo[runs, col], self.plan.hi[runs, col]
        widen = self.repeat[runs] * STEP
        up = hi + widen <= 1.0
        return runs, self.plan.rows[runs, col], np.where(up, lo, lo - widen), np.where(up, hi + widen, hi)

    def update(self, runs: np.ndarray, release: NoisyRelease, compared: np.ndarray) -> None:
        """Record the answers and move each run on: a TOP or :data:`REPEATS` asks end a probe; a
        refused answer (budget spent) ends the run."""
        col = self.index[runs]
        answered = release.flags >= 0
        self._log.append(
            (runs, self.asked[runs].copy(), col, release.flags, release.answers, release.counts, compared)
        )
        self.asked[runs] += 1
        self.repeat[runs] += 1
        move = (release.flags == 1) | (self.repeat[runs] >= REPEATS)
        self.index[runs] += move
        self.repeat[runs] = np.where(move, 0, self.repeat[runs])
        width = self.plan.rows.shape[1]
        at = np.minimum(self.index[runs], width - 1)
        finished = ~answered | (self.index[runs] >= width) | (self.plan.rows[runs, at] < 0)
        self.done[runs] |= finished

    def scores(self, defence: Defence, n: int, queries: int) -> np.ndarray:
        """Cumulative log-likelihood ratios, runs x queries."""
        runs = self.plan.rows.shape[0]
        if not self._log:
            return np.zeros((runs, queries))
        run, step, col, flags, answers, counts, compared = (
            np.concatenate(p) for p in zip(*self._log, strict=True)
        )
        asked = flags >= 0
        out = np.zeros(run.size)
        for start in range(0, int(asked.sum()), 5000):
            i = np.flatnonzero(asked)[start : start + 5000]
            k, member, non = count_pmfs_with_miss(
                self.plan.pi[run[i], col[i]], self.plan.miss[run[i], col[i]], n
            )
            lik = defence.observation_likelihood(
                k[None, :],
                compared[i, None],
                flags[i, None],
                answers[i, None],
                counts[i, None],
                use_counts=True,
            )
            p_member = np.einsum("ij,ij->i", member, lik)
            p_non = np.einsum("ij,ij->i", non, lik)
            out[i] = np.log(np.maximum(p_member, 1e-300)) - np.log(np.maximum(p_non, 1e-300))
        empty = np.zeros(run.size)
        tests = Differences(run, step, col, empty, empty, empty, flags)
        return accumulate(tests, out, runs, queries)

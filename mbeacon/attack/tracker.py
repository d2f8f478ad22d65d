"""The threshold-aware attacker: a tracker (Denning, 1979) that turns a "at least T?" beacon into "any?".

A beacon that only says whether at least ``T`` patients lie in a range looks safe against the
rarest-range attacker (:mod:`mbeacon.attack.planning`), whose ranges around the victim's value hold
far fewer than ``T`` patients. The tracker asks ranges that hold ``T - 1`` patients besides the
victim's interval instead. For one probe, with the victim's interval ``I = [v - m, v + m]``:

1. **side**: the side of ``I`` (above or below) that the public prior says holds more people; the
   search below works on the side above ``I`` and mirrors values (``x -> 1 - x``) for the side below;
2. **full side**: "at least T in ``[g0, 1]``?" (``g0``: the first grid point above ``I``); a "no"
   means the side holds fewer than ``T`` patients and the probe is dropped;
3. **bound search**: bisection on the upper bound ``b`` of ``R_b = [g0, b]`` over the grid
   ``k / 2**14`` (exact in float32, the store's precision) until the answer flips between ``b_no``
   and ``b_no + 1/2**14``. Under an exact beacon ``R = R_{b_no}`` then holds exactly ``T - 1``
   patients (unless two share one grid cell, which the grid makes rare);
4. **calibration** (randomised defences only): ``R`` asked once more, to see whether the noise
   misled the search (a "yes" means ``R`` is taken to hold ``T`` patients);
5. **test**: the nested range ``Q = I ∪ R`` (it differs from ``R`` only by ``I``, up to one grid
   cell): under an exact beacon "yes" iff at least one patient lies in ``I`` -- the ``T = 1``
   question, at about 16 queries per probe.

The search is vectorised over *runs* (victims x repetitions): each run asks one query per step and
moves through its probes on its own; the answers come from a callback, so the same search drives the
simulated evaluation (:mod:`mbeacon.attack.tracker_eval`) and the live attack over HTTP
(:mod:`mbeacon.attack.live.tracker`).

**Scoring (the defence's noise in the model).** Only the test answers are scored. The attacker
models the count of ``Q`` as ``r + K`` with ``r`` the count it believes ``R`` holds (``T - 1``;
``T`` after a "yes" on the calibration; 0 when ``R`` is empty) and ``K`` the count of ``I``:
``Bin(N, pi)`` for a non-member, ``1 + Bin(N - 1, pi)`` for a member (``Bin(N - 1, pi)`` with the
miss probability), and averages the defence's public model :meth:`Defence.p_observe_one` of the
observation over it (for SVT² the observation is the ``answeredFrom = data`` flag, so the prior's
side of ``T`` and the budget the flags burn are in the model; noisy counts and flips enter through
their noise laws). Under an exact beacon this is the ``T = 1`` likelihood ratio; under a noisy one
``r`` is only the attacker's belief (the search may end off by the noise), which the model does
not correct: the tracker is a strong attacker against thresholds, not an optimal one against noise.
The search's own answers are not scored: they are about ``R``, not the victim.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mbeacon.attack.defences import Defence
from mbeacon.attack.lrt import count_pmfs

#: Grid of the bound search: bounds are ``k / GRID`` (exact in float32); 14 bisection steps at most.
GRID = 2**14
EPS = 1e-12

FULL, BISECT, CALIBRATE, TEST, DONE = range(5)


@dataclass(frozen=True)
class Targets:
    """The probes a tracker attacks, runs x probes in the order tried (most telling first).

    ``rows``: prior positions (-1: unusable, skipped without asking); ``lo``/``hi``: the victim's
    interval ``I``; ``pi``: the attacker's probability that one person falls in ``I``; ``above``:
    True to search the side above ``I``.
    """

    rows: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    pi: np.ndarray
    above: np.ndarray


@dataclass(frozen=True)
class Differences:
    """The test queries asked, one entry per (run, probe) that got that far.

    ``run``, ``step`` (0-based query index within the run), ``column`` (index into the targets),
    ``believed`` (``r``, the count the attacker believes ``R`` holds), ``lo``/``hi`` (the range
    asked, in true coordinates) and ``observation`` (1, 0, -1; for the defences whose response carries
    more, rows of ``(flag, answer, count, compared count)``: see :mod:`mbeacon.attack.tracker_eval`).
    """

    run: np.ndarray
    step: np.ndarray
    column: np.ndarray
    believed: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    observation: np.ndarray


def first_grid_point_above(x: np.ndarray) -> np.ndarray:
    """The smallest grid index ``g`` with ``g / GRID > x``."""
    return np.floor(np.asarray(x, dtype=np.float64) * GRID).astype(np.int64) + 1


class TrackerSearch:
    """The tracker's state over ``runs`` independent runs, one query per run per :meth:`step`.

    ``ask(runs, rows, lo, hi) -> (answers, observations)``: the released yes/no answers (1, 0, -1
    refused) and the observations the scoring uses (the same, or SVT²'s flags) of one query per
    listed run. A refused answer ends that run's attack: the budget is gone.
    """

    def __init__(self, targets: Targets, threshold: int, *, calibrate: bool) -> None:
        self.t = int(threshold)
        self.calibrate = calibrate
        runs = targets.rows.shape[0]
        # the interval in "side" coordinates: the side searched is always above it
        above = np.asarray(targets.above, dtype=bool)
        self.above = above
        self.side_lo = np.where(above, targets.lo, 1.0 - targets.hi)
        side_hi = np.where(above, targets.hi, 1.0 - targets.lo)
        with np.errstate(invalid="ignore"):
            self.g0 = np.where(np.isfinite(side_hi), first_grid_point_above(np.nan_to_num(side_hi)), GRID + 1)
        usable = (
            (targets.rows >= 0)
            & np.isfinite(targets.lo)
            & np.isfinite(targets.hi)
            & np.isfinite(targets.pi)
            & (self.g0 <= GRID)
        )
        # each run tries its usable probes in order: order[r, i] is the i-th usable column
        self.order = np.argsort(~usable, axis=1, kind="stable")
        self.usable_count = usable.sum(axis=1)
        self.targets = targets
        self.index = np.zeros(runs, dtype=np.int64)  # position in order
        self.phase = np.where(self.usable_count > 0, FULL, DONE)
        self.low = np.zeros(runs, dtype=np.int64)
        self.high = np.zeros(runs, dtype=np.int64)
        self.believed = np.zeros(runs, dtype=np.int64)
        self.steps = 0
        self.asked = np.zeros(runs, dtype=np.int64)
        self._tests: list[tuple[np.ndarray, ...]] = []

    @property
    def column(self) -> np.ndarray:
        """Each run's current target column (meaningless for finished runs)."""
        at = np.minimum(self.index, self.targets.rows.shape[1] - 1)
        return self.order[np.arange(self.order.shape[0]), at]

    @property
    def done(self) -> bool:
        return bool(np.all(self.phase == DONE))

    def queries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The next query of every active run: ``(runs, rows, lo, hi)`` in true coordinates."""
        runs = np.flatnonzero(self.phase != DONE)
        col = self.column[runs]
        phase = self.phase[runs]
        g0 = self.g0[runs, col]
        low, high = self.low[runs], self.high[runs]
        side_lo = np.where(phase == TEST, self.side_lo[runs, col], g0 / GRID)
        upper = np.where(
            phase == FULL,
            GRID,
            np.where(
                phase == BISECT, (low + high) // 2, np.where(phase == CALIBRATE, low, np.maximum(low, g0 - 1))
            ),
        )
        side_hi = upper / GRID
        above = self.above[runs, col]
        lo = np.where(above, side_lo, 1.0 - side_hi)
        hi = np.where(above, side_hi, 1.0 - side_lo)
        return runs, self.targets.rows[runs, col], lo, hi

    def step(self, ask: Callable[..., tuple[np.ndarray, np.ndarray]]) -> int:
        """Ask every active run's next query through ``ask``; returns how many were asked."""
        runs, rows, lo, hi = self.queries()
        if runs.size == 0:
            return 0
        answers, observations = ask(runs, rows, lo, hi)
        self.update(runs, np.asarray(answers), np.asarray(observations), lo, hi)
        self.asked[runs] += 1
        self.steps += 1
        return int(runs.size)

    def update(
        self, runs: np.ndarray, answers: np.ndarray, observations: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ) -> None:
        """Move each asked run on by its answer (the transitions of the module docstring)."""
        phase = self.phase[runs].copy()
        col = self.column[runs]
        g0 = self.g0[runs, col]
        low, high = self.low[runs].copy(), self.high[runs].copy()
        yes, refused = answers == 1, answers < 0
        believed = self.believed[runs].copy()
        next_probe = np.zeros(runs.size, dtype=bool)

        full = phase == FULL
        next_probe |= full & ~yes  # fewer than T on this side: drop the probe
        start = full & yes
        low[start], high[start] = g0[start] - 1, GRID
        phase[start] = BISECT

        bisect = (phase == BISECT) & ~start
        mid = (low + high) // 2
        high = np.where(bisect & yes, mid, high)
        low = np.where(bisect & ~yes, mid, low)

        found = (phase == BISECT) & (high - low <= 1)
        empty = low < g0  # R holds nobody: T patients in the first grid cell (or T = 1)
        believed[found] = np.where(empty[found], 0, self.t - 1)
        to_calibrate = found & self.calibrate & ~empty
        phase[to_calibrate] = CALIBRATE
        phase[found & ~to_calibrate] = TEST

        calibrated = (self.phase[runs] == CALIBRATE) & ~refused
        believed[calibrated & yes] = self.t  # the noise misled the search: R looks like T or more
        phase[calibrated] = TEST

        tested = (self.phase[runs] == TEST) & ~refused
        if tested.any():
            self._tests.append(
                (
                    runs[tested],
                    self.asked[runs[tested]].copy(),
                    col[tested],
                    self.believed[runs[tested]].copy(),
                    lo[tested],
                    hi[tested],
                    observations[tested],
                )
            )
        next_probe |= tested
        self.low[runs], self.high[runs], self.believed[runs] = low, high, believed
        index = self.index[runs] + next_probe
        phase = np.where(next_probe, FULL, phase)
        phase = np.where(next_probe & (index >= self.usable_count[runs]), DONE, phase)
        phase[refused] = DONE  # the budget is spent: nothing more to learn
        self.index[runs], self.phase[runs] = index, phase

    def differences(self) -> Differences:
        """Every test query asked so far."""
        if not self._tests:
            empty = np.zeros(0, dtype=np.int64)
            return Differences(
                empty, empty, empty, empty, empty.astype(float), empty.astype(float), empty.astype(np.int8)
            )
        parts = [np.concatenate(p) for p in zip(*self._tests, strict=True)]
        return Differences(*parts)


def choose_above(mass_above: np.ndarray, mass_below: np.ndarray) -> np.ndarray:
    """Search the side the prior says holds more people (ties: above)."""
    return np.nan_to_num(mass_above, nan=-1.0) >= np.nan_to_num(mass_below, nan=-1.0)


def difference_probabilities(
    defence: Defence,
    pi: np.ndarray,
    beta: np.ndarray,
    believed: np.ndarray,
    n: int,
    miss: float,
    *,
    min_pi: float = 0.002,
) -> tuple[np.ndarray, np.ndarray]:
    """``(P(obs = 1 | member), P(obs = 1 | non-member))`` of test queries (1-D arrays).

    The count of ``Q`` is ``believed + K``, ``K`` the count of ``I`` (see the module docstring);
    ``beta`` is the prior's expected count of ``Q``; ``min_pi`` floors ``pi`` as
    :func:`mbeacon.attack.lrt.yes_probabilities` does.
    """
    pi = np.clip(np.asarray(pi, dtype=np.float64), min_pi, 1.0)
    if pi.size == 0:
        return pi.copy(), pi.copy()
    k, member, non = count_pmfs(pi, n, miss)
    counts = np.asarray(believed, dtype=np.float64)[:, None] + k[None, :]
    p_one = defence.p_observe_one(counts, np.asarray(beta, dtype=np.float64)[:, None])
    p_member = np.einsum("ij,ij->i", member, p_one)
    p_non = np.einsum("ij,ij->i", non, p_one)
    return np.clip(p_member, EPS, 1 - EPS), np.clip(p_non, EPS, 1 - EPS)


def difference_scores(
    tests: Differences, p_member: np.ndarray, p_non: np.ndarray, runs: int, queries: int
) -> np.ndarray:
    """Cumulative log-likelihood ratios, runs x queries (column q: after q + 1 queries of the run)."""
    obs = tests.observation
    yes = np.log(p_member) - np.log(p_non)
    no = np.log1p(-p_member) - np.log1p(-p_non)
    step = np.where(obs == 1, yes, np.where(obs == 0, no, 0.0))
    return accumulate(tests, step, runs, queries)


def accumulate(tests: Differences, step: np.ndarray, runs: int, queries: int) -> np.ndarray:
    """The test queries' log-likelihood ratios ``step`` summed per run, runs x queries, cumulative."""
    # The probabilities' last bit depends on how the vectorised sums were laid out in memory (a Dask
    # worker and a local process differ); under heavy noise every step is tiny and victims nearly
    # tie, so that bit could reorder them. Rounded steps make the scores the same everywhere.
    step = np.round(step, 9)
    scores = np.zeros((runs, queries))
    inside = tests.step < queries
    np.add.at(scores, (tests.run[inside], tests.step[inside]), step[inside])
    return np.cumsum(scores, axis=1)

"""Online PMW as the service keeps it: one synthetic distribution per probe, shared by every query there.

The evaluation's default model of ``online-pmw`` (:meth:`mbeacon.attack.defences.Defence.release`)
puts every query at a probe of its own. That is exact for streams that never ask twice at a probe;
an adaptive attacker (the tracker asks nested ranges at one probe) and a researcher zooming in do ask
twice, and after a TOP the mechanism answers nearby ranges from the moved histogram. This module
keeps that state per account, as the service does:

* per (account, probe), the updates made so far: ``(lo, hi, target)`` in value coordinates, ``target``
  the released count over N clipped into ``[0.5/N, 1 - 0.5/N]`` (as :func:`online_pmw_step` does);
* a query ``[lo, hi]`` at the probe is answered over the *segments* between the sorted distinct
  endpoints of the probe's updates, the query's own endpoints, 0 and 1: each segment starts at the
  public prior's mass of that interval, floored at half a patient (``0.5/N``, so no segment is
  impossible) and renormalised; the updates, as ranges of segments, move it
  (:func:`~mbeacon.privacy.online_pmw.synthetic_histogram`), and the synthetic count is N times the
  mass of the query's segments. The test, the noisy release and the update are
  :func:`~mbeacon.privacy.online_pmw.online_pmw_step`'s.

Vectorised over accounts: an account with no update at the query's probe (most queries, with a
margin) is answered from three segments in one array expression; the others one at a time through
:func:`synthetic_histogram`. The noise is drawn in :func:`online_pmw_step`'s order (the threshold
first; per query the query noise of every live account, then a release noise per TOP), so one
account fed one query at a time reproduces it exactly (``tests/test_pmw_state.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mbeacon.privacy.noise import RNGLike, as_source, lattice_laplace
from mbeacon.privacy.online_pmw import OnlinePMWParams, synthetic_histogram
from mbeacon.privacy.sparse_vector import BOT, TOP, UNANSWERED
from mbeacon.privacy.svt2_noisy import NoisyRelease

#: ``probability(rows, lo, hi)``: the public prior's mass of ``[lo, hi]`` at prior rows, vectorised.
Probability = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def segment_prior(probability: Probability, row: int, edges: np.ndarray, n: int) -> np.ndarray:
    """The prior's masses of the segments between sorted distinct ``edges`` (from 0 to 1) at prior
    ``row``, floored at ``0.5 / n`` and renormalised: a histogram :func:`synthetic_histogram` takes."""
    rows = np.full(edges.size - 1, row, dtype=np.int64)
    mass = np.nan_to_num(np.asarray(probability(rows, edges[:-1], edges[1:]), dtype=np.float64))
    mass = np.maximum(mass, 0.5 / n)
    return mass / mass.sum()


def synthetic_count(
    probability: Probability,
    row: int,
    updates: list[tuple[float, float, float]],
    lo: float,
    hi: float,
    n: int,
) -> float:
    """N times the synthetic mass of ``[lo, hi]`` at prior ``row`` after ``updates`` (in order)."""
    points = [0.0, 1.0, lo, hi] + [x for u_lo, u_hi, _ in updates for x in (u_lo, u_hi)]
    edges = np.unique(np.clip(np.asarray(points, dtype=np.float64), 0.0, 1.0))
    i_lo, i_hi = int(np.searchsorted(edges, lo)), int(np.searchsorted(edges, hi))
    if edges.size == 2:  # one segment: the whole range (no update can move it) or none of it
        return float(n) if i_hi > i_lo else 0.0
    h = synthetic_histogram(
        segment_prior(probability, row, edges, n),
        [
            (int(np.searchsorted(edges, u_lo)), int(np.searchsorted(edges, u_hi)), t)
            for u_lo, u_hi, t in updates
        ],
    )
    return float(n * h[i_lo:i_hi].sum())


class PMWStreams:
    """``runs`` Online PMW accounts with their per-probe synthetic distributions (module docstring)."""

    def __init__(
        self, params: OnlinePMWParams, runs: int, probability: Probability, rng: RNGLike = None
    ) -> None:
        self.params = params
        self.probability = probability
        self.source = as_source(rng)
        self.z = np.asarray(lattice_laplace(params.threshold_scale, 1.0, runs, self.source), dtype=np.float64)
        self.count = np.zeros(runs, dtype=np.int64)
        #: per run: prior row -> the updates at that probe, in order
        self.updates: list[dict[int, list[tuple[float, float, float]]]] = [{} for _ in range(runs)]

    def synthetic(self, runs: np.ndarray, rows: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """The synthetic count of every ``(run, row, [lo, hi])`` (public: prior and released counts)."""
        n = self.params.n
        floor = 0.5 / n
        lo_c, hi_c = np.clip(lo, 0.0, 1.0), np.clip(hi, 0.0, 1.0)
        # a range of no width is no segment (its mass is 0, as in :func:`synthetic_count`)
        inside = np.where(
            hi_c > lo_c, np.maximum(np.nan_to_num(self.probability(rows, lo_c, hi_c)), floor), 0.0
        )
        below = np.where(lo_c > 0.0, np.maximum(np.nan_to_num(self.probability(rows, 0.0, lo_c)), floor), 0.0)
        above = np.where(hi_c < 1.0, np.maximum(np.nan_to_num(self.probability(rows, hi_c, 1.0)), floor), 0.0)
        s = n * inside / (below + inside + above)
        for j in np.flatnonzero(
            [int(row) in self.updates[int(r)] for r, row in zip(runs, rows, strict=True)]
        ):
            done = self.updates[int(runs[j])][int(rows[j])]
            s[j] = synthetic_count(self.probability, int(rows[j]), done, float(lo[j]), float(hi[j]), n)
        return s

    def answer(
        self, runs: np.ndarray, rows: np.ndarray, lo: np.ndarray, hi: np.ndarray, alpha: np.ndarray
    ) -> tuple[NoisyRelease, np.ndarray]:
        """One query for each of ``runs``: the release (flag, answer, count: the noisy count on a TOP,
        the synthetic count on a BOT, NaN once halted) and the synthetic count it was tested against."""
        p = self.params
        runs = np.asarray(runs, dtype=np.int64)
        alpha = np.asarray(alpha, dtype=np.float64)
        flags = np.full(runs.size, UNANSWERED, dtype=np.int8)
        answers = np.full(runs.size, UNANSWERED, dtype=np.int8)
        counts = np.full(runs.size, np.nan)
        s = self.synthetic(runs, rows, lo, hi)
        live = np.flatnonzero(self.count[runs] < p.c)
        if live.size == 0:
            return NoisyRelease(flags, answers, counts), s
        t = p.count_threshold
        yes = s[live] >= p.threshold
        q = np.where(yes, t - 1 - alpha[live], alpha[live] - t)
        nu = np.asarray(lattice_laplace(p.query_scale, 1.0, live.size, self.source), dtype=np.float64)
        top = q + nu >= p.margin + self.z[runs[live]]
        flags[live] = np.where(top, TOP, BOT)
        answers[live] = yes
        counts[live] = s[live]
        hit = live[top]
        if hit.size:
            v = alpha[hit] + np.asarray(lattice_laplace(p.release_scale, 1.0, hit.size, self.source))
            answers[hit] = v >= p.threshold
            counts[hit] = v
            for j, value in zip(hit, v, strict=True):
                r = int(runs[j])
                target = min(max(float(value) / p.n, 0.5 / p.n), 1.0 - 0.5 / p.n)
                self.updates[r].setdefault(int(rows[j]), []).append((float(lo[j]), float(hi[j]), target))
                self.count[r] += 1
        return NoisyRelease(flags, answers, counts), s

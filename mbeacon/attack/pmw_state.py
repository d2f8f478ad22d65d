"""Online PMW as the service keeps it: one synthetic distribution per probe, shared by every query there.

The evaluation's default model of ``online-pmw`` (:meth:`mbeacon.attack.defences.Defence.release`)
puts every query at a probe of its own. That is exact for streams that never ask twice at a probe;
an adaptive attacker (the tracker asks nested ranges at one probe) and a researcher zooming in do ask
twice, and after a TOP the mechanism answers nearby ranges from the moved histogram. This module
keeps that state per account, as the service does:

* per (account, probe), the updates made so far: ``(lo, hi, target)`` in value coordinates, ``target``
  the released count over N clipped into ``[0.5/N, 1 - 0.5/N]``
  (:func:`~mbeacon.privacy.online_pmw.update_target`, as the service does);
* a query ``[lo, hi]`` at the probe gets the service's own synthetic count
  (:func:`mbeacon.beacon.sanitisers.online_pmw_state.synthetic_count`: the segments of the probe's
  updates and the query, each starting at the prior's mass floored at half a patient, a point range
  a segment of its own). The test, the noisy release and the update are
  :func:`~mbeacon.privacy.online_pmw.online_pmw_step`'s.

Vectorised over accounts: an account with no update at the query's probe (most queries, with a
margin) is answered from its three segments (below, inside, above the range) in one array
expression, the service's rule for a probe without updates; the others one at a time through the
service's :func:`~mbeacon.beacon.sanitisers.online_pmw_state.synthetic_count`. The noise is drawn
in :func:`online_pmw_step`'s order (the threshold first; per query the query noise of every live
account, then a release noise per TOP), so one account fed one query at a time reproduces it
exactly (``tests/test_pmw_state.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mbeacon.beacon.sanitisers import online_pmw_state
from mbeacon.privacy.noise import RNGLike, as_source, lattice_laplace
from mbeacon.privacy.online_pmw import OnlinePMWParams, update_target
from mbeacon.privacy.sparse_vector import BOT, TOP, UNANSWERED
from mbeacon.privacy.svt2_noisy import NoisyRelease

#: ``probability(rows, lo, hi)``: the public prior's mass of ``[lo, hi]`` at prior rows, vectorised.
Probability = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def synthetic_count(
    probability: Probability,
    row: int,
    updates: list[tuple[float, float, float]],
    lo: float,
    hi: float,
    n: int,
) -> float:
    """N times the synthetic mass of ``[lo, hi]`` at prior ``row`` after ``updates`` (in order): the
    service's synthetic count, with the prior's rows as its probes."""

    def mass(probes: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        return probability(np.asarray(probes).astype(np.int64), starts, ends)

    recorded = [online_pmw_state.PMWUpdate(str(row), u_lo, u_hi, t) for u_lo, u_hi, t in updates]
    return online_pmw_state.synthetic_count(n, str(row), lo, hi, recorded, mass)


class PMWStreams:
    """``runs`` Online PMW accounts with their per-probe synthetic distributions (module docstring)."""

    def __init__(
        self,
        params: OnlinePMWParams,
        runs: int,
        probability: Probability,
        rng: RNGLike = None,
        *,
        halt_at: int | None = None,
    ) -> None:
        self.params = params
        #: positives after which a run answers nothing more (``c``; a ``cohort-pmw`` account's quota)
        self.halt_at = params.c if halt_at is None else int(halt_at)
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
        # a point range is a segment of its own, of no prior mass: floored, as every segment
        inside = np.maximum(np.nan_to_num(self.probability(rows, lo_c, hi_c)), floor)
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
        live = np.flatnonzero(self.count[runs] < self.halt_at)
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
                target = update_target(float(value), p.n)
                self.updates[r].setdefault(int(rows[j]), []).append((float(lo[j]), float(hi[j]), target))
                self.count[r] += 1
        return NoisyRelease(flags, answers, counts), s

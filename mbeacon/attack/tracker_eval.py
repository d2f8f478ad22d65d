"""The tracker (:mod:`mbeacon.attack.tracker`) against a simulated defence, vectorised over runs.

A run is one victim's attack through its own account (as the rarest-range attacker's repetitions
are): every step asks each active run's next query at once, counts it in the cohort, and answers it
through the defence with each run's own state (SVT²'s secret thresholds and positives spent; Online
PMW's threshold, positives and per-probe synthetic distributions, :mod:`mbeacon.attack.pmw_state`).

For the defences whose response carries more than the answer
(:data:`~mbeacon.attack.defences.FULL_OBSERVED`) the tracker sees all of it, as a CONTROLLED caller
with count granularity does: each test query is scored on its flag, answer and released count
(:func:`~mbeacon.attack.lrt.release_log_ratios`), against the count the query was compared with
(the prior's expectation; for Online PMW the synthetic count at that point of the stream, which the
earlier updates at the probe moved).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mbeacon.attack.boundary import BoundaryPlan, BoundarySearch, boundary_model, plan_boundary
from mbeacon.attack.defences import FULL_OBSERVED, Defence
from mbeacon.attack.lrt import release_log_ratios
from mbeacon.attack.pmw_state import PMWStreams, Probability
from mbeacon.attack.scenario import Scenario
from mbeacon.attack.tracker import (
    Targets,
    TrackerSearch,
    accumulate,
    choose_above,
    difference_probabilities,
    difference_scores,
)
from mbeacon.privacy.noise import as_source, lattice_laplace
from mbeacon.privacy.sparse_vector import BOT, TOP
from mbeacon.privacy.svt2 import svt2_release
from mbeacon.privacy.svt2_noisy import NoisyRelease


class DefenceStreams:
    """``runs`` accounts of one defence, answered one query per run at a time.

    Stateless defences answer through :meth:`Defence.release`. SVT² keeps each run's thresholds
    ``(z1, z2)`` and positives spent between calls, as :func:`mbeacon.privacy.svt2.svt2_step` does
    for one account: a TOP needs ``max(alpha, beta) + y >= T + z1`` and ``min(alpha, beta) + y' <
    T + z2``; after ``c`` TOPs the account answers nothing (-1); ``svt2-redraw`` draws new thresholds
    after each TOP. ``noisy-count``'s query cap is the tracker's budget, so it never binds here.
    """

    def __init__(
        self, defence: Defence, runs: int, rng: np.random.Generator, probability: Probability | None = None
    ) -> None:
        self.defence = defence
        self.rng = rng
        self.source = as_source(rng)
        if defence.is_pmw:
            if probability is None:
                raise ValueError("Online PMW's streams need the prior's probability (per-probe histograms)")
            # cohort-pmw: an account of its own per victim with its quota of fresh positives, which
            # favours the attacker (the cohort's c caps what all accounts get together)
            halt = defence.effective_quota if defence.name == "cohort-pmw" else None
            self.pmw = PMWStreams(defence.pmw_params, runs, probability, self.source, halt_at=halt)
        elif defence.is_svt2:
            p = defence.svt2_params
            self.params = p
            # margins (svt2-margin, svt2-noisy) move the two tests' thresholds apart
            self.low = float(getattr(p, "low_threshold", p.threshold))
            self.high = float(getattr(p, "high_threshold", p.threshold))
            self.z = self._thresholds(runs)
            self.positives = np.zeros(runs, dtype=np.int64)

    def _thresholds(self, runs: int) -> np.ndarray:
        p = self.params
        return np.asarray(lattice_laplace(p.threshold_scale, p.sensitivity, (runs, 2), self.source))

    def answer_full(
        self,
        runs: np.ndarray,
        alpha: np.ndarray,
        beta: np.ndarray,
        rows: np.ndarray | None = None,
        lo: np.ndarray | None = None,
        hi: np.ndarray | None = None,
    ) -> tuple[NoisyRelease, np.ndarray]:
        """A :data:`FULL_OBSERVED` defence's release of one query for each of ``runs`` and the count
        each was compared with (``beta``; Online PMW's synthetic count, which needs ``rows, lo, hi``)."""
        if self.defence.is_pmw:
            assert rows is not None and lo is not None and hi is not None
            return self.pmw.answer(runs, rows, lo, hi, alpha)
        release = self._answer_svt2(runs, alpha, beta)
        assert isinstance(release, NoisyRelease)
        return release, np.asarray(beta, dtype=np.float64)

    def answer(self, runs: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
        """Observations (``int8``: 1, 0, -1) of one query for each of ``runs`` (answers for the
        :data:`FULL_OBSERVED` defences, whose Online PMW needs :meth:`answer_full`)."""
        if self.defence.is_pmw:
            raise ValueError(
                f"{self.defence.name} answers through answer_full (its histograms need the ranges)"
            )
        if self.defence.name == "svt2-noisy":
            return self.answer_full(runs, alpha, beta)[0].answers
        if not self.defence.is_svt2:
            return self.defence.release(alpha[:, None], beta[:, None], self.rng)[:, 0]
        out = self._answer_svt2(runs, alpha, beta)
        assert isinstance(out, np.ndarray)
        return out

    def _answer_svt2(
        self, runs: np.ndarray, alpha: np.ndarray, beta: np.ndarray
    ) -> np.ndarray | NoisyRelease:
        if not self.defence.is_svt2:
            return self.defence.release(alpha[:, None], beta[:, None], self.rng)[:, 0]
        p = self.params
        noise = np.asarray(lattice_laplace(p.query_scale, p.sensitivity, (runs.size, 2), self.source))
        z = self.z[runs]
        top = (np.maximum(alpha, beta) + noise[:, 0] >= self.low + z[:, 0]) & (
            np.minimum(alpha, beta) + noise[:, 1] < self.high + z[:, 1]
        )
        halted = self.positives[runs] >= p.c
        top &= ~halted
        self.positives[runs] += top
        if p.redraw and top.any():
            self.z[runs[top]] = self._thresholds(int(top.sum()))
        if self.defence.name == "svt2-noisy":  # the answer: a noisy count on TOP, the prior's on BOT
            v = alpha + np.asarray(lattice_laplace(p.release_scale, p.sensitivity, runs.size, self.source))
            answer = np.where(top, v >= p.threshold, beta >= p.threshold).astype(np.int8)
            flags = np.where(halted, -1, np.where(top, TOP, BOT)).astype(np.int8)
            counts = np.where(top, v, np.nan)
            return NoisyRelease(flags, np.where(halted, -1, answer).astype(np.int8), counts)
        return np.where(halted, -1, top.astype(np.int8)).astype(np.int8)


def scenario_targets(scenario: Scenario, repetitions: int) -> Targets:
    """The planned probes (rarest interval first) of every victim, tiled over ``repetitions``."""
    assert scenario.prior is not None
    plan = scenario.plan
    rows = np.where(plan.probes >= 0, plan.probes, 0)
    above = choose_above(
        scenario.prior.probability(rows, plan.hi, 1.0), scenario.prior.probability(rows, 0.0, plan.lo)
    )

    def tile(a: np.ndarray) -> np.ndarray:
        return np.tile(a, (repetitions, 1))

    return Targets(tile(plan.probes), tile(plan.lo), tile(plan.hi), tile(plan.pi), tile(above))


def tracker_scores(
    scenario: Scenario, defence: Defence, *, repetitions: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative scores ``repetitions x victims x queries`` and the queries each run asked.

    The budget per victim is ``scenario.queries`` (the rarest-range attacker's), counted the same way:
    every query asked, answered or refused.
    """
    if scenario.cohort is None or scenario.cohort_rows is None or scenario.prior is None:
        raise ValueError("the tracker needs the scenario's cohort and prior (build_scenario keeps them)")
    cohort, cohort_rows, prior = scenario.cohort, scenario.cohort_rows, scenario.prior
    n, budget, t = scenario.n, scenario.queries, defence.threshold
    targets = scenario_targets(scenario, repetitions)
    runs = targets.rows.shape[0]
    search = TrackerSearch(targets, t, calibrate=defence.randomised)
    streams = DefenceStreams(defence, runs, rng, prior.probability)
    full = defence.name in FULL_OBSERVED
    # only SVT² and the prior-only beacon look at the prior's expected count (most of a step's time)
    uses_beta = defence.is_svt2 or defence.name in ("prior-only", "online-pmw", "cohort-pmw")

    def expected(rows: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        if not uses_beta:
            return np.zeros(rows.shape)
        return n * np.nan_to_num(prior.probability(rows, lo, hi))

    def ask(who: np.ndarray, rows: np.ndarray, lo: np.ndarray, hi: np.ndarray):
        where = cohort_rows[rows]
        values = cohort[np.maximum(where, 0)]
        inside = (values >= lo[:, None]) & (values <= hi[:, None])
        alpha = np.where(where >= 0, inside.sum(axis=1), 0)
        beta = expected(rows, lo, hi)
        if full:  # the observation: rows of (flag, answer, count, the count compared with)
            release, compared = streams.answer_full(who, alpha, beta, rows, lo, hi)
            observed = np.column_stack([release.flags, release.answers, release.counts, compared])
            return release.answers, observed
        observations = streams.answer(who, alpha, beta)
        answers = svt2_release(observations, beta, t) if defence.flags_observed else observations
        return answers, observations

    for _ in range(budget):
        if search.step(ask) == 0:
            break
    tests = search.differences()
    column = tests.column
    pi = targets.pi[tests.run, column]
    if full:
        obs = np.asarray(tests.observation, dtype=np.float64).reshape(-1, 4)
        release = NoisyRelease(obs[:, 0].astype(np.int8), obs[:, 1].astype(np.int8), obs[:, 2])
        step = release_log_ratios(
            defence, pi, obs[:, 3], release, n, scenario.miss, use_counts=True, shift=tests.believed
        )
        scores = accumulate(tests, step, runs, budget)
        return scores.reshape(repetitions, scenario.victims, budget), search.asked.reshape(repetitions, -1)
    beta = expected(targets.rows[tests.run, column], tests.lo, tests.hi)
    p_member, p_non = difference_probabilities(defence, pi, beta, tests.believed, n, scenario.miss)
    scores = difference_scores(tests, p_member, p_non, runs, budget)
    return scores.reshape(repetitions, scenario.victims, budget), search.asked.reshape(repetitions, -1)


def boundary_search(
    scenario: Scenario, defence: Defence, *, repetitions: int, rng: np.random.Generator
) -> BoundarySearch | None:
    """The boundary attacker's asking (:mod:`mbeacon.attack.boundary`) against ``defence`` through
    ``repetitions x victims`` accounts of its own, or None where it does not apply (a defence whose
    response carries no flag and count, or a scenario without the victims' profiles)."""
    if defence.name not in FULL_OBSERVED or scenario.profiles is None or scenario.prior is None:
        return None
    assert scenario.cohort is not None and scenario.cohort_rows is not None
    cohort, cohort_rows, prior, n = scenario.cohort, scenario.cohort_rows, scenario.prior, scenario.n
    rows_of_column = np.full(cohort.shape[0], -1, dtype=np.int64)
    rows_of_column[cohort_rows[cohort_rows >= 0]] = np.flatnonzero(cohort_rows >= 0)
    plan = plan_boundary(
        scenario.profiles,
        rows_of_column,
        prior.probability,
        model=boundary_model(defence, n, scenario.queries),
        below=defence.threshold,
        noise_sd=float(scenario.noise_sd or 0.0),
        missing=scenario.missing,
    )
    tiled = BoundaryPlan(*(np.tile(a, (repetitions, 1)) for a in dataclasses.astuple(plan)))
    search = BoundarySearch(tiled)
    streams = DefenceStreams(defence, tiled.rows.shape[0], rng, prior.probability)
    for _ in range(scenario.queries):
        who, rows, lo, hi = search.queries()
        if who.size == 0:
            break
        where = cohort_rows[rows]
        values = cohort[np.maximum(where, 0)]
        alpha = np.where(where >= 0, np.sum((values >= lo[:, None]) & (values <= hi[:, None]), axis=1), 0)
        beta = n * np.nan_to_num(prior.probability(rows, lo, hi))
        release, compared = streams.answer_full(who, alpha, beta, rows, lo, hi)
        search.update(who, release, compared)
    return search


def boundary_scores(
    scenario: Scenario, defence: Defence, *, repetitions: int, rng: np.random.Generator
) -> np.ndarray | None:
    """The boundary attacker's cumulative scores ``repetitions x victims x queries`` against
    ``defence`` (:func:`boundary_search`), or None where it does not apply."""
    search = boundary_search(scenario, defence, repetitions=repetitions, rng=rng)
    if search is None:
        return None
    scores = search.scores(defence, scenario.n, scenario.queries)
    return scores.reshape(repetitions, scenario.victims, scenario.queries)

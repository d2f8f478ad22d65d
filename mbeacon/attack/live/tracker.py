"""The tracker (:mod:`mbeacon.attack.tracker`) over HTTP: adaptive, one query per profile per round.

Every round asks each profile's next query (bound search, calibration or test) in batch POSTs of at
most the server's ``max_batch``, the profiles in a shuffled order, and feeds the answers back to the
search: a profile's next query depends on its answers so far. The budget handling is the rarest-range
attacker's (:func:`mbeacon.attack.live.questions.ask_all`): a batch the server finds too large is
split; a refused answer, an answer flagged ``budgetExhausted`` or a 429 for the budget ends the
asking for every profile (later answers could say nothing about the data).

The search reads the released yes/no answer (for SVT², the prior's answer revealed by the response,
negated when ``answeredFrom = data``); the scoring reads the observation (the answer, or SVT²'s flag)
of each test query, with ``beta`` as :func:`~mbeacon.attack.live.scoring.attacker_beta` models it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mbeacon.attack.defences import FULL_OBSERVED, Defence
from mbeacon.attack.live.answers import FLAGGED, BatchAnswers, parse_answers
from mbeacon.attack.live.client import BeaconClient
from mbeacon.attack.live.errors import BatchTooLarge, BeaconBudgetRefused, LiveAttackError
from mbeacon.attack.live.parameters import DatasetParams
from mbeacon.attack.live.questions import LiveAnswers, granularity
from mbeacon.attack.live.scoring import attacker_beta
from mbeacon.attack.lrt import release_log_ratios
from mbeacon.attack.planning import LIVE_ATTACKERS, QueryPlan
from mbeacon.attack.tracker import (
    DONE,
    Targets,
    TrackerSearch,
    accumulate,
    choose_above,
    difference_probabilities,
    difference_scores,
)
from mbeacon.privacy.svt2_noisy import NoisyRelease
from mbeacon.store.priors import Prior


def live_targets(plan: QueryPlan, askable: np.ndarray, prior: Prior) -> Targets:
    """Every profile's planned probes (rarest interval first) as the tracker's targets."""
    rows = np.where(askable, plan.probes, -1)
    safe = np.maximum(rows, 0)
    above = choose_above(prior.probability(safe, plan.hi, 1.0), prior.probability(safe, 0.0, plan.lo))
    return Targets(rows, plan.lo, plan.hi, plan.pi, above)


def released_answers(mechanism: str, observations: np.ndarray, prior_answers: np.ndarray) -> np.ndarray:
    """The yes/no answers (1, 0, -1) behind the observations: SVT²'s flag XOR the prior's answer (the
    other mechanisms' observation is the answer)."""
    if mechanism not in FLAGGED:
        return observations
    known = (observations >= 0) & (prior_answers >= 0)
    return np.where(known, observations ^ prior_answers, -1).astype(np.int8)


class _Asker:
    """The search's ``ask`` callback: one round's queries over HTTP, recorded per profile and step."""

    def __init__(
        self,
        client: BeaconClient,
        params: DatasetParams,
        prior: Prior,
        search: TrackerSearch,
        answers: LiveAnswers,
        rank: np.ndarray,
        max_batch: int,
    ) -> None:
        self.client, self.params, self.prior, self.search = client, params, prior, search
        self.answers, self.rank, self.batch = answers, rank, max(1, int(max_batch))

    def __call__(self, runs: np.ndarray, rows: np.ndarray, lo: np.ndarray, hi: np.ndarray):
        got_all = LiveAnswers.empty((1, runs.size))
        order = np.argsort(self.rank[runs], kind="stable")
        queries = [
            {"probeId": str(p), "minValue": float(a), "maxValue": float(b), "datasetIds": [self.params.id]}
            for p, a, b in zip(self.prior.probe_ids[rows], lo, hi, strict=True)
        ]
        pending = [order[i : i + self.batch] for i in range(0, order.size, self.batch)]
        while pending and not self.answers.exhausted:
            chunk = pending.pop(0)
            try:
                body = self.client.ask([queries[i] for i in chunk], granularity(self.params))
            except BatchTooLarge as error:
                if chunk.size == 1:
                    raise LiveAttackError(f"the server refuses even one query per request: {error}") from None
                self.batch = min(error.limit or chunk.size // 2, chunk.size - 1)
                pending = [chunk[i : i + self.batch] for i in range(0, chunk.size, self.batch)] + pending
                continue
            except BeaconBudgetRefused:
                self.answers.exhausted = True
                break
            got = parse_answers(body, chunk.size, self.params.id, self.params.mechanism)
            got_all.store((0, chunk), got)
            self.answers.exhausted = self.answers.exhausted or got.exhausted
        step = self.search.asked[runs]
        exhausted = self.answers.exhausted
        self.answers.store((runs, step), _row(got_all))
        self.answers.exhausted = exhausted
        observations, prior_answers = got_all.observations[0], got_all.prior_answers[0]
        answered = released_answers(self.params.mechanism, observations, prior_answers)
        return answered, observations


def _row(answers: LiveAnswers) -> BatchAnswers:
    """The first row of ``answers`` as one batch's answers."""
    first = (answers.flags, answers.yes, answers.released)
    flags, yes, released = (None if a is None else a[0] for a in first)
    return BatchAnswers(
        answers.observations[0],
        answers.prior_answers[0],
        answers.sources[0],
        answers.exhausted,
        flags,
        yes,
        released,
    )


def ask_tracker(
    client: BeaconClient,
    params: DatasetParams,
    targets: Targets,
    prior: Prior,
    *,
    queries: int,
    randomised: bool,
    max_batch: int,
    order: np.ndarray,
    on_progress: Callable[[int], None] | None = None,
) -> tuple[TrackerSearch, LiveAnswers, np.ndarray]:
    """Run the tracker for up to ``queries`` queries per profile; the search, the answers (people x
    queries, by step) and which steps were asked or would have been (``askable``)."""
    people = targets.rows.shape[0]
    search = TrackerSearch(targets, params.threshold, calibrate=randomised)
    answers = LiveAnswers.empty((people, queries))
    rank = np.empty(people, dtype=np.int64)
    rank[np.asarray(order)] = np.arange(people)
    asker = _Asker(client, params, prior, search, answers, rank, max_batch)
    for _ in range(queries):
        asked = search.step(asker)
        if on_progress is not None and asked:
            on_progress(asked)
        if asked == 0 or answers.exhausted:
            break
    steps = np.arange(queries)
    askable = steps[None, :] < search.asked[:, None]
    if answers.exhausted:  # every profile still searching would have gone on to its budget
        askable |= (search.phase != DONE)[:, None]
    answers.max_batch = asker.batch
    return search, answers, askable


def tracker_scores(
    search: TrackerSearch,
    answers: LiveAnswers,
    defence: Defence,
    prior: Prior,
    patients: int,
    miss: float,
    queries: int,
    *,
    prior_is_public: bool,
) -> np.ndarray:
    """Cumulative scores, people x queries, of the test queries asked (see :mod:`mbeacon.attack.tracker`)."""
    tests = search.differences()
    rows = search.targets.rows[tests.run, tests.column]
    pi = search.targets.pi[tests.run, tests.column]
    prior_pi = prior.probability(rows, tests.lo, tests.hi)
    plan = QueryPlan(rows[None], tests.lo[None], tests.hi[None], pi[None], prior_pi[None])
    revealed = answers.prior_answers[tests.run, tests.step]
    beta = attacker_beta(plan, patients, defence.threshold, revealed[None], prior_is_public=prior_is_public)[
        0
    ]
    people = search.targets.rows.shape[0]
    if defence.name in FULL_OBSERVED:  # the whole response of each test: flag, answer, released count
        release = answers.release()
        flags = release.flags[tests.run, tests.step]
        counts = release.counts[tests.run, tests.step]
        step = release_log_ratios(
            defence,
            pi,
            np.nan_to_num(beta),
            NoisyRelease(flags, release.answers[tests.run, tests.step], counts),
            patients,
            miss,
            use_counts=bool(np.isfinite(counts[flags == 1]).any()),
            shift=tests.believed,
        )
        return accumulate(tests, step, people, queries)
    p_member, p_non = difference_probabilities(
        defence, pi, np.nan_to_num(beta), tests.believed, patients, miss
    )
    return difference_scores(tests, p_member, p_non, people, queries)


#: ``--attacker``: ``auto`` picks the one the evaluation finds strongest against the dataset's defence.
#: (The evaluation's ``flag`` and ``count`` are the rarest plan read whole, which the live ``rarest``
#: attacker always does where the response carries more than the answer.)
ATTACKER_CHOICES = ("auto", *LIVE_ATTACKERS)


def choose_attacker(choice: str, defence: Defence) -> str:
    """``rarest`` or ``tracker``: ``auto`` takes the tracker against a threshold answered exactly
    (suppression, T > 1), where the rarest-range attacker's ranges hold fewer than T patients, and the
    rarest-range attacker otherwise (T = 1, and SVT², whose flags the tracker's search burns)."""
    if choice not in ATTACKER_CHOICES:
        raise LiveAttackError(f"unknown attacker {choice!r}; choose from {', '.join(ATTACKER_CHOICES)}")
    if choice != "auto":
        return choice
    return "tracker" if defence.name == "suppression" else "rarest"

"""What the beacon's answers tell the attacker: a batch's result sets read into observations.

An observation is 1, 0 or -1 (no information about the cohort); for SVT² an answer also reveals the
prior's side of the threshold, which lets an attacker without the public prior correct its ``beta``.

For the mechanisms whose flag the answer does not determine (``svt2-noisy``, ``online-pmw``,
``cohort-pmw``) the
observation is the answer, and the batch also keeps the whole response: the flag (``answeredFrom =
data``: a TOP), the answer and, when the server returned count granularity (a CONTROLLED key), the
released count (``resultsCount``: the noisy count of a TOP, the public prior or synthetic count of a
BOT). Online PMW's BOTs are answered from the key's synthetic distribution (``answeredFrom`` ``prior``
or ``synthetic``; ``cohort-pmw``'s is the cohort's); either reveals which side of T that distribution
puts the range on. Past a key's quota ``cohort-pmw`` answers from the synthetic state with
``budgetExhausted``: no information, as any spent budget's answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: Mechanisms whose observation is SVT²'s flag (a TOP flips the prior's answer).
FLAGGED = ("svt2", "svt2-margin")
#: Mechanisms whose TOP answers from a noisy count: the flag and the answer are both observed.
NOISY_RELEASE = ("svt2-noisy", "online-pmw", "cohort-pmw")
#: ``answeredFrom`` values of a BOT (Online PMW may name its synthetic distribution).
FROM_PRIOR = ("prior", "synthetic")


def observation(mechanism: str, exists: bool, answered_from: str, exhausted: bool = False) -> int:
    """What one answer tells the attacker: 1, 0, or -1 (no information about the data).

    For ``none`` and the noisy-release mechanisms the answer itself; for SVT² and ``svt2-margin`` the
    flag (1: ``answeredFrom = data``), from which the attacker's model (:meth:`Defence.p_observe_one`)
    reasons. Refused answers, and answers from the prior because the budget is spent
    (``budgetExhausted``), say nothing about the cohort.
    """
    if exhausted or answered_from not in ("data", *FROM_PRIOR):
        return -1
    if mechanism in FLAGGED:
        return 1 if answered_from == "data" else 0
    return int(bool(exists))


def revealed_prior_answer(mechanism: str, exists: bool, answered_from: str) -> int:
    """The prior's answer (``beta >= T``) a response reveals: 1, 0, or -1 (not revealed).

    SVT²: ``answeredFrom = prior`` releases the prior's answer; ``data`` releases its negation. The
    noisy-release mechanisms reveal it on a BOT only (a TOP answers from a noisy count).
    """
    if mechanism not in (*FLAGGED, *NOISY_RELEASE):
        return -1
    if answered_from in FROM_PRIOR:
        return int(bool(exists))
    if answered_from == "data" and mechanism in FLAGGED:
        return int(not exists)
    return -1


@dataclass(frozen=True)
class BatchAnswers:
    """One batch's answers, in the order asked.

    ``sources``: ``data``, ``prior``, ``refused``, ``exhausted`` (from the prior because the budget is
    spent) or ``unasked`` (no result set came back for the query). ``exhausted``: the account ran out.
    """

    observations: np.ndarray
    prior_answers: np.ndarray
    sources: np.ndarray
    exhausted: bool
    #: The whole response: flag (1 TOP, 0 BOT, -1 none), answer (1, 0, -1) and released count (NaN:
    #: none, or the server returned boolean granularity).
    flags: np.ndarray | None = None
    answers: np.ndarray | None = None
    counts: np.ndarray | None = None


def parse_answers(body: Any, size: int, dataset: str, mechanism: str) -> BatchAnswers:
    """A ``beaconResultsetsResponse`` to a batch of ``size`` queries into observations.

    Result sets of other datasets, malformed entries and indices out of range are skipped (those
    queries stay unanswered, -1): a response the client cannot read is never guessed at.
    """
    observations = np.full(size, -1, dtype=np.int8)
    prior_answers = np.full(size, -1, dtype=np.int8)
    sources = np.full(size, "unasked", dtype="<U9")
    flags = np.full(size, -1, dtype=np.int8)
    answers = np.full(size, -1, dtype=np.int8)
    counts = np.full(size, np.nan)
    exhausted = False
    try:
        result_sets = body["response"]["resultSets"]
    except (KeyError, TypeError):
        result_sets = []
    try:
        with_counts = body["meta"]["returnedGranularity"] == "count"
    except (KeyError, TypeError):
        with_counts = False
    for item in result_sets if isinstance(result_sets, list) else []:
        if not isinstance(item, dict) or item.get("id") != dataset or not isinstance(item.get("info"), dict):
            continue
        info = item["info"]
        index = info.get("queryIndex", 0 if size == 1 else None)
        exists, source = item.get("exists"), info.get("answeredFrom")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < size:
            continue
        if not isinstance(exists, bool) or source not in ("data", *FROM_PRIOR, "refused"):
            continue
        spent = info.get("budgetExhausted") is True
        exhausted = exhausted or spent or source == "refused"
        observations[index] = observation(mechanism, exists, source, spent)
        prior_answers[index] = revealed_prior_answer(mechanism, exists, source)
        sources[index] = "exhausted" if spent and source in FROM_PRIOR else source
        if observations[index] >= 0:
            flags[index] = 1 if source == "data" else 0
            answers[index] = int(exists)
            count = item.get("resultsCount")
            if with_counts and isinstance(count, int) and not isinstance(count, bool):
                counts[index] = count
    return BatchAnswers(observations, prior_answers, sources, exhausted, flags, answers, counts)

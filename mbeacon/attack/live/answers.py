"""What the beacon's answers tell the attacker: a batch's result sets read into observations.

An observation is 1, 0 or -1 (no information about the cohort); for SVT² an answer also reveals the
prior's side of the threshold, which lets an attacker without the public prior correct its ``beta``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


def observation(mechanism: str, exists: bool, answered_from: str, exhausted: bool = False) -> int:
    """What one answer tells the attacker: 1, 0, or -1 (no information about the data).

    For ``none`` the answer itself; for SVT² the flag (1: ``answeredFrom = data``), from which the
    attacker's model (:meth:`Defence.p_observe_one`) reasons. Refused answers, and answers from the
    prior because the budget is spent (``budgetExhausted``), say nothing about the cohort.
    """
    if exhausted or answered_from not in ("data", "prior"):
        return -1
    if mechanism == "svt2":
        return 1 if answered_from == "data" else 0
    return int(bool(exists))


def revealed_prior_answer(mechanism: str, exists: bool, answered_from: str) -> int:
    """The prior's answer (``beta >= T``) an SVT² response reveals: 1, 0, or -1 (not revealed).

    ``answeredFrom = prior`` releases the prior's answer; ``data`` releases its negation.
    """
    if mechanism != "svt2":
        return -1
    if answered_from == "prior":
        return int(bool(exists))
    if answered_from == "data":
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


def parse_answers(body: Any, size: int, dataset: str, mechanism: str) -> BatchAnswers:
    """A ``beaconResultsetsResponse`` to a batch of ``size`` queries into observations.

    Result sets of other datasets, malformed entries and indices out of range are skipped (those
    queries stay unanswered, -1): a response the client cannot read is never guessed at.
    """
    observations = np.full(size, -1, dtype=np.int8)
    prior_answers = np.full(size, -1, dtype=np.int8)
    sources = np.full(size, "unasked", dtype="<U9")
    exhausted = False
    try:
        result_sets = body["response"]["resultSets"]
    except (KeyError, TypeError):
        result_sets = []
    for item in result_sets if isinstance(result_sets, list) else []:
        if not isinstance(item, dict) or item.get("id") != dataset or not isinstance(item.get("info"), dict):
            continue
        info = item["info"]
        index = info.get("queryIndex", 0 if size == 1 else None)
        exists, source = item.get("exists"), info.get("answeredFrom")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < size:
            continue
        if not isinstance(exists, bool) or source not in ("data", "prior", "refused"):
            continue
        spent = info.get("budgetExhausted") is True
        exhausted = exhausted or spent or source == "refused"
        observations[index] = observation(mechanism, exists, source, spent)
        prior_answers[index] = revealed_prior_answer(mechanism, exists, source)
        sources[index] = "exhausted" if spent and source == "prior" else source
    return BatchAnswers(observations, prior_answers, sources, exhausted)

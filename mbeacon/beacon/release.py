"""How one dataset's prepared work becomes released answers, and the names the ledger files them under.

The engine (:mod:`mbeacon.beacon.engine`) resolves a request, prepares per dataset a :class:`Work`
(alpha, beta, cache keys and audit texts, all outside any lock) and then, inside its one ledger
transaction, hands each locked account and its cached answers to :func:`release`. Here the cached
answers are reused, the account's sanitiser (:mod:`mbeacon.beacon.sanitisers`) is run over the rest
from the saved state, and
each flag becomes an answer from the data or the prior, with a noisy count where the caller gets
counts. Kept apart from the engine so that what is released is decided by functions of the account
and the work alone: nothing here opens the store or writes the ledger, and the engine's transaction
reads as lock, release, save.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from mbeacon.beacon.answers import Answer
from mbeacon.beacon.budget import Account, AccountParams
from mbeacon.beacon.ledger.ledger import CachedAnswer
from mbeacon.beacon.query import MethylationQuery
from mbeacon.beacon.sanitisers import Fresh, PMWSource, Run, sanitiser_of
from mbeacon.beacon.sanitisers.online_pmw_state import PMWUpdate
from mbeacon.beacon.sanitisers.policy import PolicyBase
from mbeacon.privacy.noise import lattice_laplace
from mbeacon.privacy.sparse_vector import TOP, UNANSWERED
from mbeacon.privacy.svt2 import SVT2State

__all__ = ["PMWSource", "Work", "audit_text", "query_key", "release"]


@dataclass
class Work:
    """Per dataset: the queries that target it and their alpha/beta, prepared by the engine before the
    ledger lock is taken."""

    dataset: str
    policy: PolicyBase
    query_index: list[int]
    keys: list[str]
    probes: list[str | None]
    alpha: list[float]
    beta: list[float]
    audit_texts: list[str]  # each query as the audit log records it, built before the ledger lock
    ranges: list[tuple[float, float]] = field(default_factory=list)  # [lo, hi] of each query


_json_str = json.encoder.encode_basestring_ascii  # what json.dumps writes for a str (ensure_ascii)


def _json_scalar(value: str | float | None) -> str:
    return "null" if value is None else _json_str(value) if isinstance(value, str) else repr(value)


def audit_text(q: MethylationQuery, probe: str | None, granularity: str) -> str:
    """The query as the audit log records it: as sent, with the probe it resolved to.

    The text of ``json.dumps({**q.describe(), "probe": probe, "granularity": granularity},
    sort_keys=True)``, written out directly (keys in sorted order; a float as ``repr`` writes it, as
    json does): the encoder's set-up cost more than the text, once per query of a 1,000-query batch.
    ``tests/test_api_behaviour.py`` checks the identity.
    """
    return (
        f'{{"granularity": {_json_str(granularity)}, "maxValue": {q.hi!r}, "minValue": {q.lo!r}, '
        f'"probe": {_json_scalar(probe)}, "probeId": {_json_str(q.probe_id)}}}'
    )


def query_key(version: str, probe: str | None, q: MethylationQuery, granularity: str) -> str:
    """Cache key; ``version`` (the cohort file's checksum) keeps answers of replaced data apart."""
    return f"{version}|{probe}|{q.lo!r}|{q.hi!r}|{granularity}"


def _decide(account: Account, w: Work, fresh: list[int], pmw: PMWSource | None, limit: int | None) -> Run:
    """The account's sanitiser run from its state over the fresh queries ``fresh`` (indices into
    ``w``) in order, halting at ``limit`` positives."""
    queries = Fresh(
        alpha=[w.alpha[j] for j in fresh],
        beta=[w.beta[j] for j in fresh],
        probes=[str(w.probes[j]) for j in fresh],
        ranges=[w.ranges[j] for j in fresh] if w.ranges else [],
    )
    return sanitiser_of(account.params.mechanism).decide(account.params, account.state, queries, pmw, limit)


def release(
    account: Account, w: Work, cached: dict[str, CachedAnswer], granularity: str,
    pmw: PMWSource | None = None, cohort: Account | None = None,
) -> tuple[list[Answer], list[tuple[str, CachedAnswer]], SVT2State, Sequence[PMWUpdate]]:  # fmt: skip
    """The answers of ``w`` on ``account``, locked by the caller: each from ``cached`` where its key is
    there, the rest from the account's mechanism run from its saved state (a query asked twice in
    the batch is run once). Returns the answers in ``w``'s order, the new cache rows, the state after
    the run and what a learning sanitiser's run learnt, to record; ``pmw`` is required for such an
    account (:class:`~mbeacon.beacon.sanitisers.PMWSource`).

    A shared sanitiser's mechanism runs from the ``cohort``'s state (locked by the caller too), and
    stops where ``account``'s quota or the cohort's positives end; the state returned is the
    cohort's, and ``account`` has spent the positives the cohort's state gained."""
    released: list[Answer | None] = [None] * len(w.keys)
    fresh: list[int] = []
    first_of: dict[str, int] = {}
    for j, key in enumerate(w.keys):
        hit = cached.get(key)
        if hit is not None:
            released[j] = Answer(w.query_index[j], w.dataset, w.probes[j], hit.exists, hit.answered_from,
                                 hit.count, cached=True)  # fmt: skip
        elif key in first_of:
            continue  # the same query twice in one batch: answered once, below
        else:
            first_of[key] = j
            fresh.append(j)
    state = account.state
    new_rows: list[tuple[str, CachedAnswer]] = []
    pmw_new: Sequence[PMWUpdate] = ()
    if fresh:
        alpha, beta = [w.alpha[j] for j in fresh], [w.beta[j] for j in fresh]
        runs_on = cohort or account
        limit = None
        if cohort is not None:  # the holder's quota left, on top of the cohort's positives so far
            limit = cohort.state.count + max(account.limit - account.state.count, 0)
        decided = _decide(runs_on, w, fresh, pmw, limit)
        flags, state, pmw_new = decided.flags, decided.state, decided.updates
        noisy = _noisy_counts(account.params, alpha) if granularity == "count" else None
        for n, j in enumerate(fresh):
            exists, source, exhausted = _outcome(account.params, w.policy, flags[n], alpha[n], beta[n])
            if decided.answers[n] is not None and source != "refused":
                exists = bool(decided.answers[n])  # svt2-noisy's TOP, online-pmw's every answer
            count = None
            if granularity == "count" and source != "refused":
                count = noisy[n] if (source == "data" and noisy is not None) else round(beta[n])
                if decided.counts[n] is not None:
                    count = decided.counts[n]
            released[j] = Answer(
                w.query_index[j], w.dataset, w.probes[j], exists, source, count, False, exhausted
            )
            if source != "refused":
                new_rows.append((w.keys[j], CachedAnswer(exists, source, count)))
    for j, key in enumerate(w.keys):  # duplicates within the batch share the first answer
        if released[j] is None:
            first = released[first_of[key]]
            assert first is not None
            released[j] = Answer(w.query_index[j], w.dataset, w.probes[j], first.exists,
                                 first.answered_from, first.count, cached=True)  # fmt: skip
    return [a for a in released if a is not None], new_rows, state, pmw_new


def _outcome(
    params: AccountParams, policy: PolicyBase, flag: int, alpha: float, beta: float
) -> tuple[bool, str, bool]:
    """``(exists, answered_from, exhausted)`` of one fresh answer from its SVT² flag."""
    prior_yes = beta >= params.threshold
    if not params.sanitised:
        return alpha >= params.threshold, "data", False
    if flag == UNANSWERED:
        if policy.on_exhausted == "prior":
            return prior_yes, "prior", True
        return False, "refused", True
    if flag == TOP:
        return not prior_yes, "data", False
    return prior_yes, "prior", False


def _noisy_counts(params: AccountParams, alpha: list[float]) -> list[int] | None:
    """Noisy counts for ``data`` answers when the account pays for them, else None."""
    if params.count_epsilon <= 0:
        return None
    scale = params.c * params.sensitivity / params.count_epsilon  # a count moves by the bound
    noise = lattice_laplace(scale, 1.0, len(alpha), None)
    return np.maximum(np.array(alpha) + noise, 0).astype(np.int64).tolist()

"""The coalition of keys over HTTP: every key's released answers pooled, the cohort reconstructed.

The per-profile scores read each profile's answers alone. A coalition of ``K`` keys pools what all of
them were released and solves for the whole membership vector at once, as the evaluation's coalition
attacker does (:mod:`mbeacon.attack.coalition`):

* **Candidates**: every profile given, victims and non-members.
* **Rows**: every answered query of every profile, through whichever key asked it: ``a_q[i] = 1`` when
  candidate ``i``'s measured value at the query's probe lies in the query's range (a missing value
  counts 0).
* **Targets** (:func:`mbeacon.attack.coalition.targets_of`): the released count where the response
  carries one (a CONTROLLED key's count granularity: a TOP's noisy count, and for Online PMW a BOT's
  synthetic count); otherwise the yes/no answer as a censored row (``T`` for a yes, ``(T - 1) / 2``
  for a no). ``none`` answers exactly. Unanswered queries and answers past a budget or quota
  (``budgetExhausted``) are dropped.
* **Solve**: :func:`mbeacon.attack.coalition.reconstruct` (damped least squares clipped to
  ``[0, 1]``); each candidate's score is its reconstructed membership.

It runs when there are non-members and the dataset's answers carry counts: ``none`` (exact) and, with
released counts, ``svt2-noisy``, ``online-pmw`` and ``cohort-pmw``. The provable bound beside it is
:func:`mbeacon.privacy.tradeoff.best_attack` of the coalition's epsilon
(:func:`mbeacon.attack.coalition.coalition_epsilon`): the cohort's epsilon for ``cohort-pmw`` however
many keys, ``K`` times the epsilon for the per-key mechanisms, none for ``none``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import sparse

from mbeacon.attack.coalition import coalition_epsilon, range_rows, reconstruct, targets_of
from mbeacon.attack.defences import Defence
from mbeacon.attack.live.answers import NOISY_RELEASE
from mbeacon.attack.live.profiles import Profiles
from mbeacon.attack.live.questions import LiveAnswers
from mbeacon.attack.metrics import auc, tpr_at_fpr
from mbeacon.attack.planning import QueryPlan
from mbeacon.privacy.tradeoff import best_attack
from mbeacon.store.priors import Prior


def pools_counts(mechanism: str, answers: LiveAnswers) -> bool:
    """Whether the answers carry counts to pool: ``none`` (exact), or a noisy release with counts."""
    if mechanism == "none":
        return True
    released = answers.released
    return mechanism in NOISY_RELEASE and released is not None and bool(np.isfinite(released).any())


def pooled_rows(
    profiles: Profiles, plan: QueryPlan, prior: Prior, people: np.ndarray, queries: np.ndarray
) -> sparse.csr_matrix:
    """The rows ``a_q`` (queries x candidates) of the planned queries ``(people[j], queries[j])``."""
    rows = prior.index(profiles.probe_ids)  # the prior's row of each profile column (-1: none)
    column = np.full(len(prior.probe_ids), -1, dtype=np.int64)
    column[rows[rows >= 0]] = np.flatnonzero(rows >= 0)
    probes = plan.probes[people, queries]
    cols = np.where(probes >= 0, column[np.maximum(probes, 0)], -1)
    return range_rows(profiles.values, cols, plan.lo[people, queries], plan.hi[people, queries])


def pooled_targets(
    defence: Defence, answers: LiveAnswers, people: np.ndarray, queries: np.ndarray
) -> np.ndarray:
    """Each row's target: the released count (a TOP's; Online PMW's BOT's synthetic count too, as the
    evaluation pools it), else the censored yes/no; NaN where the query told nothing."""
    answered = answers.observations[people, queries] >= 0
    yes = answers.observations[people, queries] if answers.yes is None else answers.yes[people, queries]
    counts = None
    if answers.released is not None and answers.flags is not None:
        flags = answers.flags[people, queries]
        usable = (flags == 1) | ((flags == 0) & defence.is_pmw)
        counts = np.where(usable, answers.released[people, queries], np.nan)
    return np.where(answered, targets_of(defence, counts, np.where(answered, yes, -1)), np.nan)


def coalition_summary(
    defence: Defence,
    profiles: Profiles,
    plan: QueryPlan,
    prior: Prior,
    answers: LiveAnswers,
    askable: np.ndarray,
    keys: int,
) -> tuple[dict[str, Any], np.ndarray]:
    """The coalition's figures for ``metrics.json`` (reconstruction AUC and TPRs over all profiles, the
    rows pooled, and the bound at the coalition's epsilon) and each profile's reconstructed membership."""
    people, queries = np.nonzero(askable & (answers.observations >= 0))
    targets = pooled_targets(defence, answers, people, queries)
    scores = reconstruct(pooled_rows(profiles, plan, prior, people, queries), targets)
    labels = profiles.labels
    epsilon = coalition_epsilon(defence, keys, shared=False)
    bound = best_attack(epsilon) if math.isfinite(epsilon) else None
    summary = {
        "keys": keys,
        "accounting": "none" if bound is None else "cohort" if defence.name == "cohort-pmw" else "key",
        "rows": int(np.isfinite(targets).sum()),
        "counted_rows": 0
        if answers.released is None
        else int(np.isfinite(answers.released[people, queries]).sum()),
        "auc": auc(scores, labels),
        "tpr_at_0_1pct_fpr": tpr_at_fpr(scores, labels, 0.001),
        "tpr_at_1pct_fpr": tpr_at_fpr(scores, labels, 0.01),
        "bound": None if bound is None else bound.to_json(),
    }
    return summary, scores

"""The answers scored: the attacker's ``beta``, cumulative likelihood ratios, and the metrics by queries."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mbeacon.attack.defences import PMW, Defence
from mbeacon.attack.live.parameters import DatasetParams
from mbeacon.attack.lrt import lrt_scores, observation_probabilities, release_log_ratios
from mbeacon.attack.metrics import auc, tpr_at_fpr
from mbeacon.attack.planning import QueryPlan
from mbeacon.privacy.svt2_noisy import NoisyRelease

#: Query counts at which the metrics are reported (plus the total asked).
CHECKPOINTS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)


def attacker_beta(
    plan: QueryPlan, patients: int, threshold: int, prior_answers: np.ndarray, *, prior_is_public: bool
) -> np.ndarray:
    """``beta = N * prior_pi`` as the attacker models it, people x queries.

    With the public prior that is the beacon's own ``beta``. With the stand-in prior, each answer
    that revealed the prior's side of the threshold (:func:`revealed_prior_answer`) moves ``beta``
    onto that side: up to ``T``, or down to ``T - 1/2``. SVT²'s noise is integer, so every ``beta`` in
    ``(T - 1, T)`` acts alike; ``T - 1/2`` stays clear of the model's rounding tolerance at ``T``.
    """
    beta = patients * np.nan_to_num(plan.prior_pi, nan=0.0)
    if prior_is_public:
        return beta
    beta = np.where(prior_answers == 1, np.maximum(beta, threshold), beta)
    return np.where(prior_answers == 0, np.minimum(beta, threshold - 0.5), beta)


def trusts_prior(params: DatasetParams, public: bool) -> bool:
    """Whether ``beta`` is the public prior's as it stands: not for Online PMW, whose BOTs compare
    with the key's (``cohort-pmw``: the cohort's) synthetic distribution, moved by earlier TOPs at the
    probe, other profiles' and other keys' included; its answers reveal the side, which
    :func:`attacker_beta` then follows."""
    return public and params.mechanism not in PMW


def prior_agreement(beta: np.ndarray, threshold: int, prior_answers: np.ndarray) -> float | None:
    """Share of revealed prior answers that ``beta >= T`` predicts (None: none revealed).

    A diagnostic of ``--prior``: well below 1, the prior given is not the one the beacon uses.
    """
    revealed = prior_answers >= 0
    if not revealed.any():
        return None
    return float(np.mean((beta[revealed] >= threshold) == (prior_answers[revealed] == 1)))


def score(
    defence: Defence, plan: QueryPlan, beta: np.ndarray, patients: int, miss: float, observations: np.ndarray
) -> np.ndarray:
    """Cumulative log-likelihood ratios, people x queries (column k: after the first k+1 planned queries)."""
    known = np.isfinite(plan.pi) & np.isfinite(beta)
    pi = np.where(known, plan.pi, 0.5)  # queries never asked: any finite value, they add nothing
    p_member, p_non = observation_probabilities(defence, pi, np.where(known, beta, 0.0), patients, miss)
    return lrt_scores(np.where(known, observations, -1), p_member, p_non)


def score_release(
    defence: Defence, plan: QueryPlan, beta: np.ndarray, patients: int, miss: float, release: NoisyRelease
) -> np.ndarray:
    """:func:`score` on the whole response of a noisy-release mechanism (flag, answer and, when the
    server returned them, the released counts), with :func:`~mbeacon.attack.lrt.release_log_ratios`."""
    known = np.isfinite(plan.pi) & np.isfinite(beta)
    flags = np.where(known, release.flags, -1).astype(np.int8)
    use_counts = bool(np.isfinite(release.counts[flags == 1]).any())
    steps = release_log_ratios(
        defence,
        np.where(known, plan.pi, 0.5),
        np.where(known, beta, 0.0),
        NoisyRelease(flags, release.answers, release.counts),
        patients,
        miss,
        use_counts=use_counts,
    )
    return np.cumsum(steps, axis=1)


def checkpoints(queries: int) -> list[int]:
    """The query counts the metrics are reported at."""
    return sorted({k for k in CHECKPOINTS if k < queries} | {queries})


def metrics_by_queries(scores: np.ndarray, labels: np.ndarray, counts: Sequence[int]) -> list[dict]:
    """AUC and TPR at 1% FPR after each of ``counts`` queries (victims are the positives)."""
    rows = []
    for k in counts:
        at_k = scores[:, k - 1]
        rows.append(
            {"queries": int(k), "auc": auc(at_k, labels), "tpr_at_1pct_fpr": tpr_at_fpr(at_k, labels, 0.01)}
        )
    return rows


def empirical_p_values(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """For each profile, ``(1 + non-members scoring at least as high) / (1 + non-members)``.

    What a real attacker reports: how often a person known to be outside the cohort looks this much
    like a member. NaN without non-members.
    """
    non = np.sort(scores[~labels])
    if non.size == 0:
        return np.full(scores.shape, np.nan)
    at_least = non.size - np.searchsorted(non, scores, side="left")
    return (1.0 + at_least) / (1.0 + non.size)

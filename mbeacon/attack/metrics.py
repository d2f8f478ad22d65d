"""Attack metrics: ROC AUC and the true-positive rate at a fixed false-positive rate."""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata


def auc(scores: np.ndarray, members: np.ndarray) -> float:
    """Area under the ROC curve of ``scores`` (higher: more likely a member); ties count half.

    The Mann-Whitney form: the probability that a random member outscores a random non-member.
    """
    scores = np.asarray(scores, dtype=np.float64)
    members = np.asarray(members, dtype=bool)
    n1, n0 = int(members.sum()), int((~members).sum())
    if n1 == 0 or n0 == 0:
        raise ValueError("AUC needs at least one member and one non-member")
    ranks = rankdata(scores)
    return float((ranks[members].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def tpr_at_fpr(scores: np.ndarray, members: np.ndarray, fpr: float = 0.01) -> float:
    """The share of members caught when at most ``fpr`` of the non-members are flagged."""
    scores = np.asarray(scores, dtype=np.float64)
    members = np.asarray(members, dtype=bool)
    negatives = np.sort(scores[~members])[::-1]
    allowed = int(np.floor(fpr * negatives.size))
    # flag scores strictly above the (allowed+1)-th highest non-member score
    cut = negatives[allowed] if allowed < negatives.size else -np.inf
    return float(np.mean(scores[members] > cut))


def roc_curve(scores: np.ndarray, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(fpr, tpr)`` at every distinct threshold, from (0, 0) to (1, 1)."""
    scores = np.asarray(scores, dtype=np.float64)
    members = np.asarray(members, dtype=bool)
    order = np.argsort(-scores, kind="stable")
    s, m = scores[order], members[order]
    distinct = np.r_[np.flatnonzero(np.diff(s)), s.size - 1]
    tp = np.cumsum(m)[distinct]
    fp = np.cumsum(~m)[distinct]
    tpr = np.r_[0.0, tp / max(1, m.sum())]
    fpr = np.r_[0.0, fp / max(1, (~m).sum())]
    return fpr, tpr

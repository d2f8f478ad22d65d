"""Hypothesis tests for "the mechanism is epsilon-DP" from event counts (Ding et al., CCS 2018).

For one pair of neighbouring inputs ``(D, D')`` and one output event ``E``, DP promises
``p1 = P[M(D) in E] <= e^eps * P[M(D') in E] = e^eps * p2``. We observe ``c1 ~ Bin(n1, p1)`` and
``c2 ~ Bin(n2, p2)``.

StatDP's test: thin ``c1`` by keeping each hit with probability ``e^-eps``; under H0 the thinned
count is ``Bin(n1, p1 e^-eps)`` with ``p1 e^-eps <= p2``, so Fisher's exact (hypergeometric) test of
"no larger than" is valid for it. The thinning is random, so StatDP averages the p-value over many
thinnings; an average of valid p-values is only valid up to a factor 2 (Vovk and Wang, 2020), so we
report ``min(1, 2 * mean)``: conservative, never anti-conservative.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

THINNING_SAMPLES = 500


def dp_test_pvalue(c1: int, c2: int, n1: int, n2: int, epsilon: float, rng: np.random.Generator) -> float:
    """p-value of H0 ``p1 <= e^epsilon * p2`` given the hit counts (small p = violation)."""
    if c1 == 0:
        return 1.0
    thinned = rng.binomial(c1, math.exp(-epsilon), size=THINNING_SAMPLES)  # noise-ok: test
    # P(X >= thinned) for X ~ Hypergeom(total = n1 + n2, successes = thinned + c2, draws = n1)
    pvals = stats.hypergeom.sf(thinned - 1, n1 + n2, thinned + c2, n1)
    return float(min(1.0, 2.0 * pvals.mean()))


def search_scores(
    c1: np.ndarray, c2: np.ndarray, n_search: int, n_test: int, epsilon: float, confidence: float = 0.99
) -> np.ndarray:
    """Rank candidate events by how likely the final test is to reject on them (event search only).

    Picking the event with the best raw score among hundreds overrates rare events (winner's curse).
    So we take pessimistic proportions (Clopper-Pearson: ``p1`` low, ``p2`` high, at ``confidence``),
    predict the normal-approximation z of the thinned-count test at the test sample size, and return
    it (larger = more promising; unlike a p-value it does not saturate when nothing is significant,
    so the search still finds the event with the largest ratio for the epsilon lower bound). The
    reported p-value always comes from the exact test on a fresh sample.
    """
    c1 = np.asarray(c1, dtype=np.float64)
    c2 = np.asarray(c2, dtype=np.float64)
    tail = 1.0 - confidence
    p1 = np.where(c1 > 0, stats.beta.ppf(tail, np.maximum(c1, 1), n_search - c1 + 1), 0.0)
    p2 = np.where(c2 < n_search, stats.beta.ppf(1 - tail, c2 + 1, np.maximum(n_search - c2, 1)), 1.0)
    shrink = math.exp(-epsilon)
    mean = n_test * (p1 * shrink - p2)
    sd = np.sqrt(n_test * (p1 * shrink**2 + p2) + 1.0)
    return mean / sd


def epsilon_lower_bound(c1: int, c2: int, n1: int, n2: int, confidence: float = 0.95) -> float:
    """Empirical epsilon lower bound ``ln(p1_low / p2_high)`` from Clopper-Pearson intervals.

    Each interval is one-sided at ``(1 + confidence) / 2`` so that both hold together with
    probability ``confidence`` (Bonferroni). Returns 0 when the data show no excess.
    """
    alpha = (1.0 - confidence) / 2.0
    p1_low = stats.beta.ppf(alpha, c1, n1 - c1 + 1) if c1 > 0 else 0.0
    p2_high = stats.beta.ppf(1.0 - alpha, c2 + 1, n2 - c2) if c2 < n2 else 1.0
    if p1_low <= 0 or p2_high <= 0:
        return 0.0
    return max(0.0, math.log(p1_low / p2_high))

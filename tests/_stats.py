"""Statistical helpers shared by the distribution tests."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats


def pooled_chisquare(observed: np.ndarray, probs: np.ndarray, min_expected: float = 5.0) -> float:
    """Chi-square goodness-of-fit p-value, pooling the bins that expect fewer than 5 counts."""
    observed = np.asarray(observed, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    assert probs.sum() == pytest.approx(1.0, abs=1e-9)
    expected = probs * observed.sum()
    small = expected < min_expected
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] < min_expected:
        j = int(np.argmin(exp[:-1]))
        obs[j] += obs[-1]
        exp[j] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    assert exp.size >= 2
    return float(stats.chisquare(obs, exp).pvalue)

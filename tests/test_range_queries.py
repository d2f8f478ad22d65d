"""Range queries worth answering (mbeacon.privacy.research.range_queries): the counts, the cost rule, and the
claim that the cost, and so the accuracy at a given epsilon, do not depend on the number of queries."""

from __future__ import annotations

import numpy as np
import pytest

from mbeacon.privacy import accounting
from mbeacon.privacy.research.range_queries import (
    range_counts,
    range_query_split,
    range_query_svt,
    range_query_svt_batch,
)
from mbeacon.privacy.sparse_vector import BOT, TOP, UNANSWERED


def test_range_counts():
    x = np.array([0.1, 0.2, 0.2, 0.5, 0.9])
    assert range_counts(x, [0.0, 0.2, 0.95], [0.2, 0.5, 1.0]).tolist() == [3, 3, 0]
    with pytest.raises(ValueError):
        range_counts(x, [0.5], [0.1])


@pytest.mark.parametrize("c", [1, 5, 20])
def test_cost_is_twice_the_sparse_part_and_independent_of_k(c):
    eps_sparse, eps_answers, scale = range_query_split(1.0, c)
    assert eps_sparse == eps_answers == 0.5 and scale == pytest.approx(2 * c)
    assert accounting.range_query_svt_epsilon(eps_sparse, scale, c) == pytest.approx(1.0)
    assert accounting.range_query_svt_epsilon(*range_query_split(1.0, c, 0.2)[::2], c) == pytest.approx(1.0)


def test_flags_values_and_halting():
    counts = np.array([3, 5000, 2, 6000, 7000, 1, 9000])
    result = range_query_svt(counts, 1000, 1.0, 2, rng=3)
    assert result.flags.tolist() == [BOT, TOP, BOT, TOP, UNANSWERED, UNANSWERED, UNANSWERED]
    released = result.values[result.flags == TOP]
    assert np.all(released == np.round(released)) and np.all(np.abs(released - [5000, 6000]) < 200)
    assert np.all(np.isnan(result.values[result.flags != TOP]))
    with pytest.raises(ValueError):
        range_query_svt(np.array([1.5, 2.0]), 1, 1.0, 1)


def test_answer_error_does_not_grow_with_the_number_of_queries():
    """The claim, at eps = 1 and c = 5: among k = 10 ... 10,000 queries with 5 large ones, the released
    answers' mean absolute error stays at the Laplace scale 2c/eps = 10 (within 20 %), all five large
    queries are found in at least 95 % of the runs, while answering every query at the same epsilon
    would have error k/eps."""
    rng = np.random.default_rng(5)
    c, eps, runs = 5, 1.0, 400
    maes = []
    for k in (10, 100, 1000, 10_000):
        counts = rng.integers(0, 50, k)
        large = rng.choice(k, c, replace=False)
        counts[large] = rng.integers(2000, 5000, c)
        result = range_query_svt_batch(counts, 1000, eps, c, runs=runs, rng=k)
        top = result.flags == TOP
        assert np.mean(np.all(top[:, large], axis=1)) >= 0.95
        err = np.abs(result.values - counts)[top]
        maes.append(err.mean())
        assert err.mean() == pytest.approx(2 * c / eps, rel=0.2)
    assert max(maes) / min(maes) < 1.3


def test_audit_passes_range_queries():
    from mbeacon.privacy.audit import all_targets, audit_target

    result = audit_target(all_targets(0.5)["range-queries"], runs=20_000, seed=19)
    assert result.verdict == "pass" and result.p_value > 0.05, result

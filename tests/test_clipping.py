"""The automatic clipping bound (mbeacon.privacy.research.clipping): its queries, its cost, and the claim that
the bound lands near the data's scale whatever the scale and the grid length."""

from __future__ import annotations

import numpy as np
import pytest

from mbeacon.privacy import accounting
from mbeacon.privacy.research.clipping import (
    auto_clip_batch,
    auto_clip_bound,
    auto_mean,
    clip_difference_queries,
    clip_split,
    default_threshold,
    geometric_grid,
)


def test_difference_queries_are_sensitivity_one_on_any_grid():
    rng = np.random.default_rng(0)
    grid = geometric_grid(50, 1e-2, 1e4)
    x = rng.lognormal(2, 2, 300)
    q = clip_difference_queries(x, grid)
    assert q.shape == (49,) and np.all(q <= 0) and np.all(q >= -x.size)
    for new in (0.0, 1e-3, 7.5, 1e6):
        replaced = x.copy()
        replaced[0] = new
        assert np.max(np.abs(clip_difference_queries(replaced, grid) - q)) <= 1 + 1e-9
        assert np.max(np.abs(clip_difference_queries(np.r_[x, new], grid) - q)) <= 1 + 1e-9


def test_textbook_query_on_the_integer_grid():
    x = np.array([3.0, 10, 10, 42])
    grid = np.arange(1.0, 60.0)
    expected = [np.clip(x, 0, b).sum() - np.clip(x, 0, b + 1).sum() for b in grid[:-1]]
    assert np.allclose(clip_difference_queries(x, grid), expected)


def test_split_and_cost():
    assert clip_split(0.9) == pytest.approx((0.3, 0.3, 0.3))
    e = clip_split(1.0, (2, 1, 1))
    assert e == pytest.approx((0.5, 0.25, 0.25))
    assert accounting.auto_clip_epsilon(*e) == pytest.approx(1.0)
    assert default_threshold(1 / 3) == pytest.approx(-36.0)
    with pytest.raises(ValueError):
        clip_split(float("nan"))
    with pytest.raises(ValueError):
        clip_split(1.0, (1, 0, 1))


def test_reproducible_and_refuses_bad_input():
    x = np.arange(100.0)
    a = auto_clip_batch(x, 1.0, runs=5, rng=7)
    b = auto_clip_batch(x, 1.0, runs=5, rng=7)
    assert np.array_equal(a.bound, b.bound) and np.array_equal(a.noisy_sum, b.noisy_sum)
    with pytest.raises(ValueError):
        auto_clip_batch(np.r_[x, np.nan], 1.0)
    with pytest.raises(ValueError):
        auto_clip_batch(x, 1.0, grid=np.array([1.0, 0.5]))
    assert isinstance(auto_mean(x, 1.0, rng=1), float)
    assert auto_clip_bound(x, 1.0, rng=1) > 0


@pytest.mark.parametrize("scale", [1e-2, 1.0, 1e3, 1e5])
@pytest.mark.parametrize("grid_size", [10, 100, 1000, 10_000])
def test_bound_lands_near_the_data_scale_whatever_the_grid_length(scale, grid_size):
    """The claim: for 10,000 lognormal rows at any scale, the median bound over 50 runs lies within
    one grid step of [p99, max] (and within a factor 3 of it on grids of 100 or more), and the DP
    mean is within 5 % of the true mean in at least 90 % of the runs."""
    rng = np.random.default_rng(11)
    x = scale * rng.lognormal(0.0, 0.75, 10_000)
    grid = geometric_grid(grid_size)
    step = grid[1] / grid[0]
    release = auto_clip_batch(x, 1.0, grid=grid, runs=50, rng=12)
    p99, top = np.quantile(x, 0.99), x.max()
    median = np.median(release.bound)
    slack = step if grid_size == 10 else max(step, 3.0)
    assert p99 / slack <= median <= top * slack
    rel = np.abs(release.mean / x.mean() - 1)
    assert np.mean(rel <= 0.05) >= 0.9


def test_audit_passes_auto_clip_and_flags_its_broken_twin():
    from mbeacon.privacy.audit import all_targets, audit_target

    targets = all_targets(0.5)
    ok = audit_target(targets["auto-clip"], runs=20_000, seed=19)
    assert ok.verdict == "pass" and ok.p_value > 0.05, ok
    bad = audit_target(targets["auto-clip-exact-bound"], runs=20_000, seed=19)
    assert bad.verdict == "violation" and bad.p_value < 0.01, bad

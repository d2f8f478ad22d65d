"""The automatic clipping bound: a DP sum and mean of a column with no bound given (the textbook's
``auto_avg``, seeds/svt-textbook-chapter).

A DP sum needs a clipping bound ``b`` (each value clipped to ``[0, b]``, sensitivity ``b``); a bound
far above the data wastes accuracy on noise, one below it throws the data's tail away. AboveThreshold
picks one from a public grid ``b_0 < b_1 < ... < b_{m-1}`` of candidates. Query ``i`` asks how much
the clipped sum still grows between ``b_i`` and ``b_{i+1}``, per unit of bound:

    q_i(D) = (S(D, b_i) - S(D, b_{i+1})) / (b_{i+1} - b_i),      S(D, b) = sum_x clip(x, 0, b)

Each row contributes ``-(clip(x, 0, b_{i+1}) - clip(x, 0, b_i)) / (b_{i+1} - b_i)``, a number in
``[-1, 0]``, so ``q_i`` has sensitivity 1 whether one row is added, removed or replaced, on any grid
(on the textbook's integer grid with step 1 it is the textbook's query exactly). ``q_i`` is minus
(roughly) the number of rows above ``b_i`` and rises to 0 once the bound passes the data: the first
noisy ``q_i`` at or above the threshold marks where the sum stops growing. A
geometric grid makes the search scale-free: the same grid finds bounds for betas in ``[0, 1]`` and
for read depths in the thousands, and AboveThreshold's cost does not depend on its length.

The threshold defaults to three query-noise scales below 0 (``-12/eps_svt``; AboveThreshold's query
noise is ``Lap(4/eps_svt)``). The textbook's threshold 0 fires with probability about 1/2 at each
candidate past the data, so on a coarse grid a run walks on for several steps, each a large factor
(``mbeacon experiment auto-clip`` shows it); three scales below 0 it fires at the first or second
candidate past the data, at the price of ignoring the top few dozen rows (``12/eps_svt`` of them).

Then the sum is released with ``Lap(b/eps_sum)`` and the row count with lattice ``Lap(1/eps_count)``;
the mean is their ratio (post-processing).

Privacy cost: ``eps_svt + eps_sum + eps_count = epsilon`` by sequential composition (AboveThreshold is
``eps_svt``-DP for any grid length; the clipped sum has sensitivity ``b`` and the count 1). The split
is configurable, thirds by default as in the textbook. It holds for one row added, removed or
replaced. Values below 0 are clipped to 0: the mechanism is for non-negative columns, as the
textbook's. If no candidate fires, the largest grid value is the bound (still post-processing of
AboveThreshold's output).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbeacon.privacy import validation
from mbeacon.privacy.noise import RNGLike, as_source, laplace, lattice_laplace
from mbeacon.privacy.sparse_vector import TOP, above_threshold_batch
from mbeacon.privacy.validation import integer, positive

__all__ = [
    "AutoClipRelease",
    "auto_clip_batch",
    "auto_clip_bound",
    "auto_mean",
    "auto_sum",
    "clip_difference_queries",
    "clip_split",
    "clipped_sums",
    "default_threshold",
    "geometric_grid",
]

DEFAULT_GRID_MIN = 1e-3
DEFAULT_GRID_MAX = 1e7
DEFAULT_GRID_SIZE = 1000
THRESHOLD_SCALES = 3.0  # the default threshold, in AboveThreshold query-noise scales below 0


def default_threshold(epsilon_svt: float) -> float:
    """``-3 * 4/eps_svt``: three of AboveThreshold's query-noise scales below 0 (see the module)."""
    return -THRESHOLD_SCALES * 4.0 / positive(epsilon_svt, "epsilon_svt")


@dataclass(frozen=True)
class AutoClipRelease:
    """What one or many runs release: the chosen bound, the noisy clipped sum and the noisy count.

    Arrays have one entry per run (length 1 for the single-run functions); ``index`` is the position
    of the bound in the grid.
    """

    index: np.ndarray
    bound: np.ndarray
    noisy_sum: np.ndarray
    noisy_count: np.ndarray

    @property
    def mean(self) -> np.ndarray:
        """The DP mean: noisy sum over noisy count (a count below 1 is read as 1)."""
        return self.noisy_sum / np.maximum(self.noisy_count, 1.0)


def geometric_grid(
    size: int = DEFAULT_GRID_SIZE, low: float = DEFAULT_GRID_MIN, high: float = DEFAULT_GRID_MAX
) -> np.ndarray:
    """``size`` candidate bounds spaced evenly in log scale from ``low`` to ``high`` (public)."""
    size = integer(size, "size", minimum=2)
    low, high = positive(low, "low"), positive(high, "high")
    if not low < high:
        raise ValueError(f"low must be below high, got {low} and {high}")
    return np.geomspace(low, high, size)


def _check_grid(grid: np.ndarray) -> np.ndarray:
    grid = np.asarray(grid, dtype=np.float64)
    if grid.ndim != 1 or grid.size < 2:
        raise ValueError("grid must be a 1-D array of at least 2 candidate bounds")
    if not np.all(np.isfinite(grid)) or grid[0] <= 0 or np.any(np.diff(grid) <= 0):
        raise ValueError("grid must be finite, positive and strictly increasing")
    return grid


def _check_values(values: np.ndarray) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64).ravel()
    if not np.all(np.isfinite(x)):
        raise ValueError("values must be finite numbers (drop missing values first)")
    return x


def clip_split(
    epsilon: float, split: tuple[float, float, float] = (1.0, 1.0, 1.0)
) -> tuple[float, float, float]:
    """``(eps_svt, eps_sum, eps_count)``: ``epsilon`` divided in proportion to ``split``."""
    epsilon = positive(epsilon, "epsilon")
    if len(split) != 3:
        raise ValueError(f"split must have three weights (svt, sum, count), got {len(split)}")
    weights = [positive(w, name) for w, name in zip(split, ("split[0]", "split[1]", "split[2]"), strict=True)]
    total = sum(weights)
    eps_svt, eps_sum = epsilon * weights[0] / total, epsilon * weights[1] / total
    return eps_svt, eps_sum, epsilon - eps_svt - eps_sum


def clipped_sums(sorted_x: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """``S(b) = sum clip(x, 0, b)`` for every ``b``, from the sorted non-negative values."""
    prefix = np.concatenate([[0.0], np.cumsum(sorted_x)])
    below = np.searchsorted(sorted_x, bounds, side="left")
    return prefix[below] + bounds * (sorted_x.size - below)


def clip_difference_queries(values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The ``m - 1`` sensitivity-1 queries ``q_i = (S(b_i) - S(b_{i+1})) / (b_{i+1} - b_i)`` (each <= 0).

    Computed from one sort and prefix sums: ``O((n + m) log n)``, not ``O(n m)``.
    """
    grid = _check_grid(grid)
    x = np.sort(np.clip(_check_values(values), 0.0, None))
    sums = clipped_sums(x, grid)
    return (sums[:-1] - sums[1:]) / np.diff(grid)


def auto_clip_batch(
    values: np.ndarray,
    epsilon: float,
    *,
    grid: np.ndarray | None = None,
    threshold: float | None = None,
    split: tuple[float, float, float] = (1.0, 1.0, 1.0),
    runs: int = 1,
    rng: RNGLike = None,
) -> AutoClipRelease:
    """``runs`` independent runs of the automatic clipping bound, sum and count (see the module).

    Privacy cost of each run: ``epsilon`` (= ``eps_svt + eps_sum + eps_count``, :func:`clip_split`).
    """
    eps_svt, eps_sum, eps_count = clip_split(epsilon, split)
    runs = integer(runs, "runs")
    threshold = default_threshold(eps_svt) if threshold is None else validation.finite(threshold, "threshold")
    grid = geometric_grid() if grid is None else _check_grid(grid)
    x = np.clip(_check_values(values), 0.0, None)
    source = as_source(rng)
    queries = clip_difference_queries(x, grid)
    flags = above_threshold_batch(queries, threshold, eps_svt, runs=runs, rng=source)
    fired = (flags == TOP).any(axis=1)
    index = np.where(fired, np.argmax(flags == TOP, axis=1), grid.size - 1)
    bound = grid[index]
    sorted_x = np.sort(x)
    true_sums = clipped_sums(sorted_x, bound)
    noisy_sum = true_sums + np.asarray(laplace(1.0, runs, source)) * bound / eps_sum
    noisy_count = x.size + np.asarray(lattice_laplace(1.0 / eps_count, 1.0, runs, source), dtype=np.float64)
    return AutoClipRelease(index, bound, noisy_sum, noisy_count)


def auto_clip_bound(
    values: np.ndarray,
    epsilon: float,
    *,
    grid: np.ndarray | None = None,
    threshold: float | None = None,
    rng: RNGLike = None,
) -> float:
    """Only the clipping bound, by AboveThreshold over the grid.

    Privacy cost: ``epsilon``, whatever the grid length.
    """
    epsilon = positive(epsilon, "epsilon")
    threshold = default_threshold(epsilon) if threshold is None else validation.finite(threshold, "threshold")
    grid = geometric_grid() if grid is None else _check_grid(grid)
    flags = above_threshold_batch(clip_difference_queries(values, grid), threshold, epsilon, rng=rng)[0]
    tops = np.flatnonzero(flags == TOP)
    return float(grid[tops[0]] if tops.size else grid[-1])


def auto_sum(
    values: np.ndarray,
    epsilon: float,
    *,
    grid: np.ndarray | None = None,
    threshold: float | None = None,
    split: tuple[float, float, float] = (1.0, 1.0, 1.0),
    rng: RNGLike = None,
) -> AutoClipRelease:
    """One run: the bound, the DP sum clipped to it and the DP count (``.mean`` is the DP mean).

    Privacy cost: ``epsilon`` (``eps_svt + eps_sum + eps_count``; thirds by default).
    """
    return auto_clip_batch(values, epsilon, grid=grid, threshold=threshold, split=split, runs=1, rng=rng)


def auto_mean(
    values: np.ndarray,
    epsilon: float,
    *,
    grid: np.ndarray | None = None,
    threshold: float | None = None,
    split: tuple[float, float, float] = (1.0, 1.0, 1.0),
    rng: RNGLike = None,
) -> float:
    """The textbook's ``auto_avg``: a DP mean with no clipping bound given. Privacy cost: ``epsilon``."""
    release = auto_sum(values, epsilon, grid=grid, threshold=threshold, split=split, rng=rng)
    return float(release.mean[0])

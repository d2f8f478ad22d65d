"""Population priors: what a general population looks like at each CpG probe, and P_prior for many queries.

SVT² compares a cohort's count ``alpha`` with ``beta = N * P_prior(value in [lo, hi])``, the count a
general population of the same size predicts. A :class:`Prior` holds, per probe, the population mean and
sd, the Beta(a, b) fitted to them by moments and, when it was built from a reference cohort, an empirical
quantile sketch. Priors are public knowledge: nothing here is private.

Where priors come from:

* :func:`prior_from_matrix` / :func:`prior_from_table_file`: a reference cohort (probes x samples beta
  values), e.g. healthy blood. Mean, sd, Beta by moments and a quantile sketch per probe.
* :func:`prior_from_means` / :func:`import_means_file`: published per-probe means only (the shipped 450K
  means). The sd is predicted from the mean by an :class:`SdModel` learned on a real reference table.

Stored as ``STORE/priors/<name>/v<k>.h5``: named, versioned (``k = 1, 2, ...``, a version is never
overwritten), each file published atomically (:mod:`mbeacon.store.atomic`).

The hot path, :meth:`Prior.probability`, is vectorised over (probe, lo, hi) triples, processed in
cache-sized chunks on a few threads (``scipy.special.betainc`` and numpy release the GIL).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import fcntl
import functools
import os
import re
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pandas as pd
from scipy import special

from mbeacon.store.atomic import publish
from mbeacon.store.errors import DataError

__all__ = [
    "DEFAULT_QUANTILES",
    "MEAN_CLIP",
    "VAR_FLOOR",
    "VAR_FRACTION",
    "Prior",
    "SdModel",
    "beta_moments",
    "check_name",
    "import_means_file",
    "learn_sd_model",
    "list_priors",
    "load_prior",
    "prior_from_matrix",
    "prior_from_means",
    "prior_from_table_file",
    "save_prior",
]

#: Beta by moments: means are clipped to ``[MEAN_CLIP, 1 - MEAN_CLIP]`` ...
MEAN_CLIP = 1e-4
#: ... and variances to ``[VAR_FLOOR, VAR_FRACTION * m (1 - m)]``.
VAR_FLOOR = 1e-8
VAR_FRACTION = 0.999
#: Default size of the empirical quantile sketch (levels 0, 0.01, ..., 1).
DEFAULT_QUANTILES = 101

PRIORS_DIR = "priors"
FILE_FORMAT = "mbeacon-prior"
FILE_FORMAT_VERSION = 1
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_VERSION_FILE = re.compile(r"^v([1-9][0-9]*)\.h5$")

#: Pairs per chunk of :meth:`Prior.probability`: the rows a chunk touches stay in cache during the
#: binary search of the empirical method, and chunks are the unit of work of the thread pool.
CHUNK = 16_384
#: :meth:`Prior.index` uses a hash table from this many ids on (a binary search below).
HASH_LOOKUP_MIN = 65_536
#: Threads for large :meth:`Prior.probability` calls (``None``: the CPUs this process may use, at most 8).
#: A service with one worker process per core should set 1.
THREADS: int | None = None


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _readonly(array: Any, dtype: Any) -> np.ndarray:
    """A read-only view of ``array`` as ``dtype`` (no copy when it already is one; the caller's array
    keeps its own flags)."""
    out = np.asarray(array, dtype=dtype).view()
    out.flags.writeable = False
    return out


def beta_moments(mean: Any, sd: Any) -> tuple[np.ndarray, np.ndarray]:
    """Beta(a, b) with the given mean and sd, by the method of moments.

    For mean ``m`` and variance ``v < m (1 - m)``: ``k = m (1 - m) / v - 1``, ``a = m k``,
    ``b = (1 - m) k``. Edge cases are handled by clipping first:

    * ``m`` is clipped to ``[1e-4, 1 - 1e-4]`` (a mean at or beyond 0 or 1 has no Beta);
    * ``v = sd**2`` is clipped to ``[1e-8, 0.999 m (1 - m)]``: ``v = 0`` (all values equal) becomes a
      very narrow Beta around ``m`` (sd 1e-4), and ``v >= m (1 - m)`` (more spread than any Beta with
      that mean allows, the two-point limit) becomes the widest Beta, ``a + b = 1/999``, a U shape
      with its mass at 0 and 1 split as ``1 - m : m``.

    NaN in, NaN out.
    """
    m = np.clip(np.asarray(mean, dtype=np.float64), MEAN_CLIP, 1.0 - MEAN_CLIP)
    spread = m * (1.0 - m)
    v = np.clip(np.square(np.asarray(sd, dtype=np.float64)), VAR_FLOOR, VAR_FRACTION * spread)
    k = spread / v - 1.0
    return m * k, (1.0 - m) * k


# --- the sd model ------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class SdModel:
    """Per-probe sd as a function of the probe's mean: binned medians, linearly interpolated.

    Knots: the probes of a reference table are binned by mean (bins of width ``bin_width``); each bin
    with enough probes gives one knot at (median mean, median sd) of its probes. Between knots the sd is
    linear in the mean. Beyond the outer knots (0.035 and 0.962 on the blood table) it falls linearly to
    0 at mean 0 and at mean 1: a power law fitted to the blood table's bin medians is
    ``sd = 0.25 m^0.98 (1 - m)^1.08``, proportional to the distance from the boundary, and the table's
    own extreme probes agree (median sd / min(m, 1 - m) stays 0.2-0.3 down to means of 0.02 and up to
    0.99). The shipped 450K means reach 0.005 and 0.992, beyond the blood table's range.

    Why binned medians and not a parametric curve: the relation is not symmetric (median sd 0.015 for
    means below 0.1, 0.011 above 0.9). Per README bin, the median predicted sd is within 5% of the
    measured median (0.0160 vs 0.0153 below 0.1, 0.0631 vs 0.0632 in [0.4, 0.5), 0.0119 vs 0.0114 above
    0.9), where the power law is off by up to 17% (0.0134 above 0.9). Medians, not means, because a few
    probes with huge spread (sex-chromosome and SNP-affected probes) would otherwise inflate every
    probe's predicted sd: the model describes a typical probe, so a means-only prior is, if anything,
    narrower than the population (smaller P_prior for ranges away from the mean).
    """

    knot_mean: np.ndarray
    knot_sd: np.ndarray
    source: str = ""

    def __post_init__(self) -> None:
        km = np.asarray(self.knot_mean, dtype=np.float64)
        ks = np.asarray(self.knot_sd, dtype=np.float64)
        if km.ndim != 1 or km.shape != ks.shape or km.size == 0:
            raise ValueError("SdModel needs two 1-d arrays of the same, non-zero length")
        if not (np.all(np.diff(km) > 0) and km[0] > 0 and km[-1] < 1 and np.all(ks >= 0)):
            raise ValueError("SdModel knots must have increasing means inside (0, 1) and sd >= 0")
        object.__setattr__(self, "knot_mean", _readonly(km, np.float64))
        object.__setattr__(self, "knot_sd", _readonly(ks, np.float64))

    def predict(self, mean: Any) -> np.ndarray:
        """The predicted sd at each mean (any shape; NaN stays NaN)."""
        m = np.asarray(mean, dtype=np.float64)
        xs = np.concatenate(([0.0], self.knot_mean, [1.0]))
        ys = np.concatenate(([0.0], self.knot_sd, [0.0]))
        out = np.interp(np.clip(m, 0.0, 1.0), xs, ys)
        return np.where(np.isnan(m), np.nan, out)

    def describe(self) -> str:
        return f"sd model: binned medians, {self.knot_mean.size} knots" + (
            f", from {self.source}" if self.source else ""
        )


def _read_matrix_frame(table_or_path: Any) -> tuple[np.ndarray, np.ndarray, str]:
    """(probe ids, float64 matrix, description) of a DataFrame, an array or a CSV/TSV file."""
    if isinstance(table_or_path, pd.DataFrame):
        frame = table_or_path
        try:
            matrix = frame.to_numpy(dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise DataError(f"the reference table has non-numeric values: {exc}") from None
        return frame.index.to_numpy().astype(str), matrix, "a DataFrame"
    if isinstance(table_or_path, np.ndarray):
        matrix = np.asarray(table_or_path, dtype=np.float64)
        return np.array([f"row{i}" for i in range(matrix.shape[0])]), matrix, "an array"
    path = Path(table_or_path)
    parts = list(iter_table_file(path))
    ids = np.concatenate([p for p, _ in parts]) if parts else np.array([], dtype=str)
    matrix = np.concatenate([m for _, m in parts]) if parts else np.empty((0, 0))
    return ids, matrix, path.name


def learn_sd_model(table_or_path: Any = None, *, bin_width: float = 0.05, min_probes: int = 20) -> SdModel:
    """Learn how a probe's sd depends on its mean from a reference table (probes x samples).

    ``table_or_path``: a DataFrame (probes x samples), a 2-d array, a CSV/TSV file, or ``None`` for
    the shipped real table (20,000 probes x 10 whole-blood samples, GSE41169). The per-probe sd is the
    sample sd (``ddof = 1``, as in the data README), over the probe's non-missing values; probes with
    fewer than 3 values are ignored. See :class:`SdModel` for the form.
    """
    if table_or_path is None:
        return _default_sd_model()
    _, matrix, what = _read_matrix_frame(table_or_path)
    return _fit_sd_model(matrix, source=what, bin_width=bin_width, min_probes=min_probes)


def _fit_sd_model(matrix: np.ndarray, *, source: str, bin_width: float, min_probes: int) -> SdModel:
    if matrix.ndim != 2:
        raise DataError("a reference table must be 2-d (probes x samples)")
    counts = np.count_nonzero(~np.isnan(matrix), axis=1)
    keep = counts >= 3
    if not np.any(keep):
        raise DataError("the reference table has no probe with 3 or more values: cannot learn an sd model")
    with np.errstate(all="ignore"):
        means = np.nanmean(matrix[keep], axis=1)
        sds = np.nanstd(matrix[keep], axis=1, ddof=1)
    n_bins = max(1, round(1.0 / bin_width))
    bins = np.clip((means * n_bins).astype(np.int64), 0, n_bins - 1)
    knot_mean, knot_sd = [], []
    for b in range(n_bins):
        sel = bins == b
        if np.count_nonzero(sel) >= min_probes:
            knot_mean.append(float(np.median(means[sel])))
            knot_sd.append(float(np.median(sds[sel])))
    if not knot_mean:
        raise DataError(f"no bin of width {bin_width} holds {min_probes} probes: cannot learn an sd model")
    return SdModel(np.array(knot_mean), np.array(knot_sd), source=source)


@functools.lru_cache(maxsize=1)
def _default_sd_model() -> SdModel:
    from mbeacon import data

    path = data.path(data.BLOOD_REFERENCE)
    frame = pd.read_csv(path, index_col=0)
    model = _fit_sd_model(frame.to_numpy(dtype=np.float64), source="", bin_width=0.05, min_probes=20)
    return dataclasses.replace(model, source=f"{path.name} (GSE41169 whole blood, 20k probes x 10)")


# --- the prior ---------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Prior:
    """A population prior: per probe (sorted ids), mean, sd, Beta(a, b) and an optional quantile sketch.

    ``quantiles`` (probes x Q, float32, levels ``linspace(0, 1, Q)``) are the empirical quantiles of the
    reference values of each probe (numpy's default "linear" definition); float32 halves the memory of a
    450K sketch (196 MB instead of 392 MB at Q = 101) at an error of 6e-8, far below measurement noise.
    The arrays are read-only views: a prior can be shared between threads.
    """

    name: str
    version: int | None
    probe_ids: np.ndarray
    mean: np.ndarray
    sd: np.ndarray
    a: np.ndarray
    b: np.ndarray
    quantiles: np.ndarray | None
    n_reference: int
    source: str = ""
    created: str = ""

    def __post_init__(self) -> None:
        ids = np.asarray(self.probe_ids)
        if ids.dtype.kind != "U":
            ids = ids.astype(str)
        n = ids.shape[0] if ids.ndim == 1 else -1
        if n < 0:
            raise ValueError("probe_ids must be 1-d")
        if n > 1 and not np.all(ids[1:] > ids[:-1]):
            raise ValueError("probe_ids must be sorted and unique")
        object.__setattr__(self, "probe_ids", _readonly(ids, ids.dtype))
        for field in ("mean", "sd", "a", "b"):
            arr = _readonly(getattr(self, field), np.float64)
            if arr.shape != (n,):
                raise ValueError(f"{field} has shape {arr.shape}, expected ({n},)")
            object.__setattr__(self, field, arr)
        if self.quantiles is not None:
            q = _readonly(self.quantiles, np.float32)
            if q.ndim != 2 or q.shape[0] != n or q.shape[1] < 2:
                raise ValueError(f"quantiles has shape {q.shape}, expected ({n}, Q) with Q >= 2")
            object.__setattr__(self, "quantiles", np.ascontiguousarray(q))
        check_name(self.name)
        if not self.created:
            object.__setattr__(self, "created", _now())

    def __len__(self) -> int:
        return int(self.probe_ids.shape[0])

    def __repr__(self) -> str:
        sketch = f", sketch Q={self.quantiles.shape[1]}" if self.quantiles is not None else ""
        return (
            f"Prior({self.name!r}, version={self.version}, {len(self)} probes, "
            f"n_reference={self.n_reference}{sketch})"
        )

    @property
    def levels(self) -> np.ndarray | None:
        """The quantile levels of the sketch (``linspace(0, 1, Q)``), or None."""
        return None if self.quantiles is None else np.linspace(0.0, 1.0, self.quantiles.shape[1])

    def index(self, probe_ids: Any) -> np.ndarray:
        """Positions of ``probe_ids`` (any shape) in this prior, ``-1`` for probes it does not know.

        A binary search (``searchsorted``) in the sorted ids; for large inputs (at least
        :data:`HASH_LOOKUP_MIN` ids) a hash lookup instead, about twice as fast on numpy strings (its
        table is built once per prior, on first use). Hot paths should resolve ids once and pass the
        positions to :meth:`probability`.
        """
        ids = np.asarray(probe_ids)
        if ids.dtype.kind == "S":
            ids = np.char.decode(ids, "ascii")
        elif ids.dtype.kind != "U":
            ids = ids.astype(str)
        n = len(self)
        if n == 0:
            return np.full(ids.shape, -1, dtype=np.int64)
        if ids.size >= HASH_LOOKUP_MIN:
            found = self._hash_index.get_indexer(ids.ravel().astype(object))
            return found.astype(np.int64, copy=False).reshape(ids.shape)
        pos = np.minimum(np.asarray(np.searchsorted(self.probe_ids, ids), dtype=np.int64), n - 1)
        return np.asarray(np.where(self.probe_ids[pos] == ids, pos, -1))

    @functools.cached_property
    def _hash_index(self) -> pd.Index:
        return pd.Index(self.probe_ids.astype(object))

    def _positions(self, probes: Any) -> np.ndarray:
        arr = np.asarray(probes)
        if arr.size == 0 and arr.dtype.kind == "f":  # an empty list
            arr = arr.astype(np.int64)
        if arr.dtype.kind in "iu":
            pos = arr.astype(np.int64, copy=False)
            return np.where((pos >= 0) & (pos < len(self)), pos, -1)
        if arr.dtype.kind in "USO":
            return self.index(arr)
        raise TypeError(f"probes must be integer positions or probe ids, not {arr.dtype}")

    def resolve_method(self, method: str = "auto") -> str:
        """``"beta"`` or ``"empirical"``: what ``method`` means for this prior."""
        if method == "auto":
            return "empirical" if self.quantiles is not None else "beta"
        if method == "beta":
            return method
        if method == "empirical":
            if self.quantiles is None:
                raise ValueError(f"prior {self.name!r} has no quantile sketch: use method 'beta'")
            return method
        raise ValueError(f"unknown method {method!r}: choose auto, beta or empirical")

    def probability(
        self, probes: Any, lo: Any, hi: Any, *, method: str = "auto", threads: int | None = None
    ) -> np.ndarray:
        """P_prior(value in [lo, hi]) for every (probe, lo, hi), broadcast together; float64 array.

        ``probes``: integer positions (see :meth:`index`) or probe ids. ``method``: ``"beta"`` (the
        fitted Beta's CDF, the regularised incomplete beta function), ``"empirical"`` (the piecewise-
        linear CDF through the quantile sketch; a point mass, e.g. a probe whose reference values are
        all equal, counts fully in a closed range that contains it), or ``"auto"`` (empirical when a
        sketch exists, else beta).

        Edges: the range is closed and clipped to [0, 1], so ``lo <= 0`` and ``hi >= 1`` are the open
        ends; ``lo > hi`` gives 0. NaN for unknown probes and for NaN bounds.

        ``threads``: worker threads for large inputs (default :data:`THREADS`, i.e. the usable CPUs).
        """
        kind = self.resolve_method(method)
        pos = self._positions(probes)
        if len(self) == 0:
            pos = np.full(pos.shape, -1, dtype=np.int64)
        lo_arr = np.asarray(lo, dtype=np.float64)
        hi_arr = np.asarray(hi, dtype=np.float64)
        pos, lo_arr, hi_arr = np.broadcast_arrays(pos, lo_arr, hi_arr)
        shape = pos.shape
        pos, lo_arr, hi_arr = pos.ravel(), lo_arr.ravel(), hi_arr.ravel()
        out = np.empty(pos.size, dtype=np.float64)
        kernel = self._beta_chunk if kind == "beta" else self._empirical_chunk

        def work(start: int) -> None:
            s = slice(start, min(start + CHUNK, pos.size))
            out[s] = kernel(pos[s], lo_arr[s], hi_arr[s])

        starts = range(0, pos.size, CHUNK)
        n_threads = _threads(threads, len(starts))
        if n_threads <= 1:
            for start in starts:
                work(start)
        else:
            with ThreadPoolExecutor(n_threads) as pool:
                for _ in pool.map(work, starts):
                    pass
        return out.reshape(shape)

    def _beta_chunk(self, pos: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        known = pos >= 0
        if len(self) == 0:
            return np.full(pos.shape, np.nan)
        safe = np.where(known, pos, 0)
        a, b = self.a[safe], self.b[safe]
        mean = a / (a + b)
        tail_scale = 2.0 * (a + b + 1.0)
        p = _beta_cdf(a, b, mean, tail_scale, np.clip(hi, 0.0, 1.0))
        p -= _beta_cdf(a, b, mean, tail_scale, np.clip(lo, 0.0, 1.0))
        return _finish(p, known, lo, hi)

    def _empirical_chunk(self, pos: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        assert self.quantiles is not None
        known = pos >= 0
        if len(self) == 0:
            return np.full(pos.shape, np.nan)
        q_count = self.quantiles.shape[1]
        base = np.where(known, pos, 0) * q_count
        flat = self.quantiles.reshape(-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            p = _sketch_cdf(flat, base, q_count, hi, right=True)
            p -= _sketch_cdf(flat, base, q_count, lo, right=False)
        return _finish(p, known, lo, hi)


#: Endpoints ``x`` with ``2 (a + b + 1) (x - mean)^2 > TAIL_EXPONENT`` are in a tail of mass below
#: ``exp(-TAIL_EXPONENT) = 4.2e-18``: Beta(a, b) is sub-Gaussian with variance proxy ``1 / (4 (a + b + 1))``
#: (Elder 2016; Marchal and Arbel 2017), so ``P(X <= mean - t) <= exp(-2 (a + b + 1) t^2)`` and likewise
#: above. There the CDF is set to 0 or 1 without calling ``betainc`` (an absolute error below 4.2e-18,
#: below float64 resolution next to 1); on uniformly random ranges this skips about half the calls.
TAIL_EXPONENT = 40.0


def _beta_cdf(
    a: np.ndarray, b: np.ndarray, mean: np.ndarray, tail_scale: np.ndarray, x: np.ndarray
) -> np.ndarray:
    """The Beta(a, b) CDF at ``x`` in [0, 1]: ``betainc`` except far in the tails (see TAIL_EXPONENT)."""
    dev = x - mean
    out = (dev > 0).astype(np.float64)
    near = np.flatnonzero(tail_scale * dev * dev <= TAIL_EXPONENT)
    if near.size:
        out[near] = special.betainc(a[near], b[near], x[near])
    return out


def _finish(p: np.ndarray, known: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    np.clip(p, 0.0, 1.0, out=p)
    p[lo > hi] = 0.0
    p[~known | np.isnan(lo) | np.isnan(hi)] = np.nan
    return p


def _sketch_cdf(
    flat: np.ndarray, base: np.ndarray, q_count: int, x: np.ndarray, *, right: bool
) -> np.ndarray:
    """Piecewise-linear CDF through the sketch rows starting at ``flat[base]``, evaluated at ``x``.

    ``right=True``: F(x) = P(X <= x); ``right=False``: the left limit F(x-) = P(X < x), which differs
    where quantiles tie (a point mass). Branchless binary search for ``j`` = the number of quantiles
    ``<= x`` (or ``< x``), then interpolation between levels ``j-1`` and ``j``; 0 below the sketch,
    1 above it.
    """
    # Search in the sketch's own precision: a bound equal to a reference value (0.2, stored as the
    # float32 nearest to 0.2) must compare equal to it.
    x32 = np.clip(x, -1.0, 2.0).astype(np.float32)
    j = np.zeros(x.shape, dtype=np.int64)
    step = 1 << (q_count.bit_length() - 1)
    while step:
        cand = j + step
        value = flat[base + np.minimum(cand, q_count) - 1]
        ok = (value <= x32) if right else (value < x32)
        ok &= cand <= q_count
        j = np.where(ok, cand, j)
        step >>= 1
    k = np.clip(j - 1, 0, q_count - 2)
    q0 = flat[base + k].astype(np.float64)
    q1 = flat[base + k + 1].astype(np.float64)
    frac = np.clip((x - q0) / (q1 - q0), 0.0, 1.0)
    cdf = (k + frac) / (q_count - 1)
    cdf[j == 0] = 0.0
    cdf[j == q_count] = 1.0
    return cdf


def _threads(requested: int | None, n_chunks: int) -> int:
    n = requested if requested is not None else THREADS
    if n is None:
        try:
            n = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not Linux
            n = os.cpu_count() or 1
        n = min(n, 8)
    return max(1, min(int(n), n_chunks))


# --- building priors ---------------------------------------------------------------------------------


def _sort_order(probe_ids: np.ndarray) -> tuple[np.ndarray | None, tuple[int, int] | None]:
    """(argsort of ``probe_ids`` or None when already strictly increasing, the rows of a duplicate)."""
    if probe_ids.size < 2 or np.all(probe_ids[1:] > probe_ids[:-1]):
        return None, None
    order = np.argsort(probe_ids, kind="stable")
    dup = np.flatnonzero(probe_ids[order][1:] == probe_ids[order][:-1])
    if dup.size:
        return order, (int(order[dup[0]]), int(order[dup[0] + 1]))
    return order, None


def _sorted_unique(probe_ids: np.ndarray, what: str) -> np.ndarray | None:
    """The argsort of ``probe_ids`` (None: already sorted); DataError naming a duplicate."""
    order, dup = _sort_order(probe_ids)
    if dup is not None:
        raise DataError(f"{what}: probe {probe_ids[dup[0]]} appears more than once")
    return order


def _row_quantiles(block: np.ndarray, counts: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """numpy's "linear" quantiles of each row over its non-NaN values (rows with >= 1 value)."""
    ordered = np.sort(block, axis=1)  # NaN sorts last
    position = levels[None, :] * (counts[:, None] - 1)
    below = np.floor(position).astype(np.int64)
    above = np.minimum(below + 1, counts[:, None] - 1)
    frac = position - below
    rows = np.arange(block.shape[0])[:, None]
    low, high = ordered[rows, below], ordered[rows, above]
    return low + frac * (high - low)


def _matrix_stats(
    block: np.ndarray, levels: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """(counts, mean, sd with NaN for < 2 values, quantiles) of each row of a probes x samples block."""
    counts = np.count_nonzero(~np.isnan(block), axis=1)
    with np.errstate(all="ignore"):
        total = np.nansum(block, axis=1)
        mean = total / counts
        dev = np.where(np.isnan(block), 0.0, block - mean[:, None])
        sd = np.sqrt(np.einsum("ij,ij->i", dev, dev) / (counts - 1))
    sd[counts < 2] = np.nan
    quant = None
    if levels is not None:
        quant = np.full((block.shape[0], levels.size), np.nan, dtype=np.float32)
        has = counts > 0
        if np.any(has):
            quant[has] = _row_quantiles(block[has], counts[has], levels)
    return counts, mean, sd, quant


def _check_range(matrix: np.ndarray, what: str, first_line: int | None = None) -> None:
    bad = (matrix < 0) | (matrix > 1)
    if np.any(bad):
        row, col = np.argwhere(bad)[0]
        where = f"row {row + 1}" if first_line is None else f"line {first_line + row}"
        raise DataError(
            f"{what}: beta value {matrix[row, col]:g} at {where}, sample {col + 1} is outside [0, 1] "
            "(M-values? convert with beta = 2^M / (1 + 2^M))"
        )


def _levels(quantiles: int | None) -> np.ndarray | None:
    if not quantiles:
        return None
    if quantiles < 2:
        raise ValueError("a quantile sketch needs at least 2 levels (or 0 for none)")
    return np.linspace(0.0, 1.0, int(quantiles))


def _assemble(
    name: str,
    ids: np.ndarray,
    counts: np.ndarray,
    mean: np.ndarray,
    sd: np.ndarray,
    quant: np.ndarray | None,
    *,
    n_reference: int,
    sd_model: SdModel | None,
    source: str,
    what: str,
) -> Prior:
    """Drop probes without any value, fill missing sds from the sd model, sort, fit the Betas."""
    keep = counts > 0
    ids, mean, sd = ids[keep], mean[keep], sd[keep]
    quant = None if quant is None else quant[keep]
    missing_sd = np.isnan(sd)
    if np.any(missing_sd):
        sd = sd.copy()
        sd[missing_sd] = (sd_model or learn_sd_model()).predict(mean[missing_sd])
    order = _sorted_unique(ids, what)
    if order is not None:
        ids, mean, sd = ids[order], mean[order], sd[order]
        quant = None if quant is None else quant[order]
    a, b = beta_moments(mean, sd)
    return Prior(name, None, ids, mean, sd, a, b, quant, n_reference, source, _now())


def prior_from_blocks(
    blocks: Iterable[tuple[Any, Any]],
    *,
    name: str,
    quantiles: int | None = DEFAULT_QUANTILES,
    source: str = "",
    sd_model: SdModel | None = None,
    what: str = "reference matrix",
    first_line: int | None = None,
) -> Prior:
    """A prior from a reference cohort streamed as ``(probe_ids, values)`` blocks of rows.

    Per probe: mean and sample sd (``ddof = 1``) of its non-missing values, Beta by moments
    (:func:`beta_moments`), and a quantile sketch of ``quantiles`` levels (0 or None: no sketch).
    Probes with a single value get their sd from the sd model (``sd_model``, default
    :func:`learn_sd_model`); probes with no value at all are left out (unknown to the prior).
    ``n_reference`` is the number of samples (columns). Values outside [0, 1] and duplicate probe ids
    raise :class:`DataError`. Memory: one block plus the prior (the statistics are per probe).
    """
    levels = _levels(quantiles)
    parts, ids_parts = [], []
    n_samples = 0
    line = first_line
    for ids, block in blocks:
        ids = np.asarray(ids).astype(str)
        block = np.asarray(block, dtype=np.float64)
        if block.ndim != 2 or block.shape[0] != ids.shape[0]:
            raise DataError(f"matrix of shape {block.shape} does not match {ids.shape[0]} probe ids")
        _check_range(block, what, first_line=line)
        if line is not None:
            line += block.shape[0]
        n_samples = block.shape[1]
        ids_parts.append(ids)
        for start in range(0, block.shape[0], 50_000):  # bounded temporaries (sort, deviations)
            parts.append(_matrix_stats(block[start : start + 50_000], levels))
    if not parts:
        raise DataError("no probe rows", path=what)
    quant = None if levels is None else np.concatenate([p[3] for p in parts])
    return _assemble(
        name,
        np.concatenate(ids_parts),
        np.concatenate([p[0] for p in parts]),
        np.concatenate([p[1] for p in parts]),
        np.concatenate([p[2] for p in parts]),
        quant,
        n_reference=n_samples,
        sd_model=sd_model,
        source=source,
        what=what,
    )


def prior_from_matrix(
    probe_ids: Any,
    matrix: Any,
    *,
    name: str,
    quantiles: int | None = DEFAULT_QUANTILES,
    source: str = "",
    sd_model: SdModel | None = None,
) -> Prior:
    """A prior from an in-memory probes x samples matrix (see :func:`prior_from_blocks`)."""
    return prior_from_blocks(
        [(probe_ids, matrix)],
        name=name,
        quantiles=quantiles,
        source=source,
        sd_model=sd_model,
        what=source or "reference matrix",
    )


def prior_from_cohort(cohort: Any, *, name: str, quantiles: int | None = DEFAULT_QUANTILES) -> Prior:
    """A prior from a cohort already in the store (``Cohort.blocks`` streams it)."""
    return prior_from_blocks(
        cohort.blocks(),
        name=name,
        quantiles=quantiles,
        source=f"dataset {cohort.info.id}",
        what=f"dataset {cohort.info.id}",
    )


def _open_text(path: Path):
    import gzip

    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def _header(path: Path) -> tuple[str, list[str]]:
    """The separator (tab or comma) and the header fields of a plain CSV/TSV table."""
    try:
        with _open_text(path) as handle:
            line = handle.readline()
    except FileNotFoundError:
        raise DataError("no such file", path=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read: {exc}", path=str(path)) from None
    if not line.strip():
        raise DataError("empty file: expected a header line", path=str(path), line=1)
    sep = "\t" if "\t" in line else ","
    return sep, [field.strip().strip('"') for field in line.rstrip("\r\n").split(sep)]


def iter_table_file(path: Path, *, chunk_rows: int = 50_000) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Stream a plain probes x samples CSV/TSV (gz ok): blocks of (probe ids, float64 values).

    First column: probe ids; header: one name per sample. Missing values: empty, NA, NaN. A cell that
    is not a number raises :class:`DataError` with its line and column.
    """
    path = Path(path)
    sep, header = _header(path)
    if len(header) < 2:
        raise DataError("expected a probe id column and at least one sample column", path=str(path), line=1)
    line = 2
    try:
        reader = pd.read_csv(path, sep=sep, index_col=0, chunksize=chunk_rows)
        for chunk in reader:
            values = np.empty(chunk.shape, dtype=np.float64)
            for col in range(chunk.shape[1]):
                column = chunk.iloc[:, col]
                if column.dtype.kind in "fiu":
                    values[:, col] = column.to_numpy(dtype=np.float64)
                    continue
                numbers = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)
                bad = np.flatnonzero(np.isnan(numbers) & column.notna().to_numpy())
                if bad.size:
                    row = int(bad[0])
                    raise DataError(
                        f"not a number: {column.iat[row]!r}", path=str(path), line=line + row, column=col + 2
                    )
                values[:, col] = numbers
            yield chunk.index.to_numpy().astype(str), values
            line += len(chunk)
    except (pd.errors.ParserError, ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot parse as a CSV/TSV matrix: {exc}", path=str(path)) from None


def prior_from_table_file(
    path: Any,
    *,
    name: str,
    quantiles: int | None = DEFAULT_QUANTILES,
    source: str = "",
    sd_model: SdModel | None = None,
    chunk_rows: int = 50_000,
) -> Prior:
    """:func:`prior_from_blocks` from a plain probes x samples CSV/TSV, streamed in blocks of rows."""
    path = Path(path)
    return prior_from_blocks(
        iter_table_file(path, chunk_rows=chunk_rows),
        name=name,
        quantiles=quantiles,
        source=source or path.name,
        sd_model=sd_model,
        what=str(path),
        first_line=2,
    )


def prior_from_means(
    probe_ids: Any, means: Any, *, name: str, sd_model: SdModel | None = None, source: str = ""
) -> Prior:
    """A prior from per-probe population means only: sd predicted by ``sd_model`` (default
    :func:`learn_sd_model`, the real blood table), Beta by moments, no quantile sketch, n_reference 0.

    NaN means are left out (unknown probes); means outside [0, 1] and duplicate ids raise
    :class:`DataError`.
    """
    ids = np.asarray(probe_ids).astype(str)
    m = np.asarray(means, dtype=np.float64)
    if m.shape != ids.shape or m.ndim != 1:
        raise DataError(f"{m.shape[0] if m.ndim else 1} means for {ids.size} probe ids")
    bad = np.flatnonzero((m < 0) | (m > 1))
    if bad.size:
        raise DataError(f"mean {m[bad[0]]:g} of probe {ids[bad[0]]} is outside [0, 1]")
    model = sd_model or learn_sd_model()
    counts = (~np.isnan(m)).astype(np.int64)
    text = source or "population means"
    return _assemble(
        name,
        ids,
        counts,
        m,
        np.full(m.shape, np.nan),
        None,
        n_reference=0,
        sd_model=model,
        source=f"{text}; {model.describe()}",
        what=text,
    )


def import_means_file(path: Any = None, *, name: str, sd_model: SdModel | None = None) -> Prior:
    """:func:`prior_from_means` from a ``probe_id,mean_beta`` CSV or TSV (gz ok).

    ``path`` None: the shipped 450K population means (485,577 probes). Empty or NA means are left out;
    a mean that is not a number or lies outside [0, 1], a duplicate probe or a missing column raise
    :class:`DataError` with the line.
    """
    if path is None:
        from mbeacon import data

        path = data.path(data.POPULATION_MEANS)
    path = Path(path)
    sep, header = _header(path)
    if header[:2] != ["probe_id", "mean_beta"]:
        raise DataError(
            f"expected the columns probe_id,mean_beta; found {','.join(header[:2]) or 'nothing'}",
            path=str(path),
            line=1,
        )
    try:
        # Only the id column as strings: pandas infers floats for a clean mean column (fast) and falls
        # back to strings when a cell is not a number, which is then located below.
        frame = pd.read_csv(path, sep=sep, usecols=[0, 1], dtype={header[0]: str})
    except (pd.errors.ParserError, ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot parse: {exc}", path=str(path)) from None
    ids = frame.iloc[:, 0]
    if ids.isna().any():
        row = int(np.flatnonzero(ids.isna().to_numpy())[0])
        raise DataError("missing probe id", path=str(path), line=row + 2, column="probe_id")
    column = frame.iloc[:, 1]
    if column.dtype.kind in "fiu":
        means = column.to_numpy(dtype=np.float64)
        not_number = np.zeros(0, dtype=np.int64)
    else:
        means = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)
        not_number = np.flatnonzero(np.isnan(means) & column.notna().to_numpy())
    if not_number.size:
        row = int(not_number[0])
        raise DataError(
            f"not a number: {frame.iat[row, 1]!r}", path=str(path), line=row + 2, column="mean_beta"
        )
    out_of_range = np.flatnonzero((means < 0) | (means > 1))
    if out_of_range.size:
        row = int(out_of_range[0])
        raise DataError(
            f"mean {means[row]:g} is outside [0, 1]", path=str(path), line=row + 2, column="mean_beta"
        )
    id_array = ids.to_numpy().astype(str)
    _, dup = _sort_order(id_array)
    if dup is not None:
        raise DataError(
            f"probe {id_array[dup[0]]} appears again (first on line {dup[0] + 2})",
            path=str(path),
            line=dup[1] + 2,
            column="probe_id",
        )
    return prior_from_means(id_array, means, name=name, sd_model=sd_model, source=path.name)


# --- the store ---------------------------------------------------------------------------------------


def check_name(name: str) -> None:
    """DataError unless ``name`` is a valid prior name (it becomes a directory name)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise DataError(
            f"invalid prior name {name!r}: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )


def _prior_dir(store_dir: Any, name: str) -> Path:
    check_name(name)
    return Path(store_dir) / PRIORS_DIR / name


def _versions(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    found = (_VERSION_FILE.match(entry.name) for entry in directory.iterdir())
    return sorted(int(m.group(1)) for m in found if m)


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive advisory lock on the prior's directory: two writers never pick the same version."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _write_h5(path: Path, prior: Prior, version: int) -> None:
    with h5py.File(path, "w") as h5:
        h5.attrs.update(
            {
                "format": FILE_FORMAT,
                "format_version": FILE_FORMAT_VERSION,
                "name": prior.name,
                "version": version,
                "n_reference": int(prior.n_reference),
                "source": prior.source,
                "created": prior.created,
            }
        )
        ids = prior.probe_ids
        width = max(1, int(np.char.str_len(ids).max())) if ids.size else 1
        try:
            encoded = ids.astype(f"S{width}")
        except UnicodeEncodeError:
            raise DataError("probe ids must be ASCII") from None
        h5.create_dataset("probe_ids", data=encoded)
        for field in ("mean", "sd", "a", "b"):
            h5.create_dataset(field, data=getattr(prior, field))
        if prior.quantiles is not None:
            h5.create_dataset("quantiles", data=prior.quantiles)


def save_prior(store_dir: Any, prior: Prior) -> Prior:
    """Save ``prior`` as the next version of its name; returns it with ``version`` set.

    Writes ``STORE/priors/<name>/v<k>.h5``, ``k`` = 1 + the latest existing version (never reusing or
    overwriting one, even with concurrent writers: the choice is made under a file lock). The file is
    written in ``STORE/.staging`` and renamed into place only once complete: a failure at any point
    leaves no new version behind.
    """
    directory = _prior_dir(store_dir, prior.name)
    with _locked(directory):
        existing = _versions(directory)
        version = (existing[-1] if existing else 0) + 1
        destination = directory / f"v{version}.h5"
        with publish(Path(store_dir), destination) as temp:
            _write_h5(temp, prior, version)
    return dataclasses.replace(prior, version=version)


def load_prior(store_dir: Any, name: str, version: int | None = None) -> Prior:
    """Load a stored prior (the latest version when ``version`` is None). Unknown name or version:
    :class:`DataError` listing what exists."""
    directory = _prior_dir(store_dir, name)
    versions = _versions(directory)
    if not versions:
        known = [entry["name"] for entry in list_priors(store_dir)]
        hint = f"; known: {', '.join(sorted(set(known)))}" if known else "; the store has no priors"
        raise DataError(f"no prior named {name!r}{hint}")
    if version is None:
        version = versions[-1]
    elif version not in versions:
        raise DataError(f"prior {name!r} has no version {version}; versions: {', '.join(map(str, versions))}")
    path = directory / f"v{version}.h5"
    try:
        with h5py.File(path, "r") as h5:
            attrs = dict(h5.attrs)
            if attrs.get("format") != FILE_FORMAT:
                raise DataError("not an mbeacon prior file", path=str(path))
            ids = h5["probe_ids"][()].astype(str)
            fields = {f: h5[f][()] for f in ("mean", "sd", "a", "b")}
            quant = h5["quantiles"][()] if "quantiles" in h5 else None
    except (OSError, KeyError) as exc:
        raise DataError(f"cannot read prior file: {exc}", path=str(path)) from None
    return Prior(
        name=str(attrs["name"]),
        version=version,
        probe_ids=ids,
        quantiles=quant,
        n_reference=int(attrs["n_reference"]),
        source=str(attrs["source"]),
        created=str(attrs["created"]),
        **fields,
    )


def list_priors(store_dir: Any) -> list[dict[str, Any]]:
    """Every stored version of every prior, by name then version: dicts with ``name``, ``version``,
    ``latest``, ``probes``, ``n_reference``, ``sketch`` (quantile levels, 0 for none), ``source``,
    ``created``, ``path``. Reads only the files' headers."""
    root = Path(store_dir) / PRIORS_DIR
    if not root.is_dir():
        return []
    out = []
    for directory in sorted(p for p in root.iterdir() if p.is_dir() and _NAME.match(p.name)):
        versions = _versions(directory)
        for version in versions:
            path = directory / f"v{version}.h5"
            try:
                with h5py.File(path, "r") as h5:
                    attrs = dict(h5.attrs)
                    probes = int(h5["probe_ids"].shape[0])
                    sketch = int(h5["quantiles"].shape[1]) if "quantiles" in h5 else 0
            except (OSError, KeyError) as exc:
                raise DataError(f"cannot read prior file: {exc}", path=str(path)) from None
            out.append(
                {
                    "name": directory.name,
                    "version": version,
                    "latest": version == versions[-1],
                    "probes": probes,
                    "n_reference": int(attrs.get("n_reference", 0)),
                    "sketch": sketch,
                    "source": str(attrs.get("source", "")),
                    "created": str(attrs.get("created", "")),
                    "path": str(path),
                }
            )
    return out

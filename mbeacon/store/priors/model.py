"""The :class:`Prior` model: per-probe population statistics and the vectorised P_prior.

A :class:`Prior` holds, per probe (sorted ids), the population mean and sd, the Beta(a, b) fitted to
them and, optionally, an empirical quantile sketch. Its hot path, :meth:`Prior.probability`, is
vectorised over (probe, lo, hi) triples, processed in cache-sized chunks (:data:`CHUNK`) on a few threads
(:data:`THREADS`; ``scipy.special.betainc`` and numpy release the GIL). The CDF kernels themselves live in
:mod:`.beta_distribution` and :mod:`.quantile_sketch`.

Settings, read at call time: ``CHUNK``, ``HASH_LOOKUP_MIN``, ``THREADS``. They live here, in the module
that reads them: set them here (``mbeacon.store.priors.model.THREADS = 1``).
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from mbeacon.store.id_hash import IdHash
from mbeacon.store.priors.beta_distribution import _beta_cdf
from mbeacon.store.priors.names import check_name
from mbeacon.store.priors.quantile_sketch import _sketch_cdf, _sketch_cdf_scalar
from mbeacon.store.probe_ids import loci, locus
from mbeacon.store.sorted_search import search

__all__ = ["CHUNK", "HASH_LOOKUP_MIN", "THREADS", "Prior"]


#: Pairs per chunk of :meth:`Prior.probability`: the rows a chunk touches stay in cache during the
#: binary search of the empirical method, and chunks are the unit of work of the thread pool.
CHUNK = 16_384
#: At most this many (probe, lo, hi) triples take the plain-Python path of the empirical CDF.
SMALL = 8
#: :meth:`Prior.index` uses a hash table from this many ids on (a binary search below, where the
#: table's one-off build would cost more than the lookups save).
HASH_LOOKUP_MIN = 64
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


@dataclass(frozen=True, eq=False)
class Prior:
    """A population prior: per probe (sorted ids), mean, sd, Beta(a, b) and an optional quantile sketch.

    ``quantiles`` (probes x Q, float32, levels ``linspace(0, 1, Q)``) are the empirical quantiles of the
    reference values of each probe (numpy's default "linear" definition); float32 halves the memory of a
    450K sketch (196 MB instead of 392 MB at Q = 101) at an error of 6e-8, far below measurement noise.
    The arrays are read-only views: a prior can be shared between threads.

    A prior is keyed by CpG: its builders store EPIC v2 ids as their locus, and :meth:`index` and
    :meth:`probability_one` look any spelling up by its locus (:mod:`mbeacon.store.probe_ids`), so a
    prior built on one array serves datasets of every array where the CpG is shared.
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

        A binary search (``searchsorted``) in the sorted ids for a few ids; from
        :data:`HASH_LOOKUP_MIN` ids on, a hash lookup (:mod:`mbeacon.store.id_hash`, its table built
        once per prior, on first use), which on a large prior takes a fraction of a binary search's
        cache misses. Hot paths should resolve ids once and pass the positions to :meth:`probability`.
        """
        ids = np.asarray(probe_ids)
        if ids.dtype.kind == "S":  # bytes as a cohort stores ids: UTF-8, nearly always ASCII
            try:
                ids = ids.astype(f"U{max(ids.dtype.itemsize, 1)}")  # ASCII, in one step
            except UnicodeDecodeError:
                ids = np.char.decode(ids, "utf-8")
        elif ids.dtype.kind != "U":
            ids = ids.astype(str)
        ids = loci(ids)  # a prior is keyed by CpG: cg00000029_TC21 finds cg00000029
        n = len(self)
        if n == 0:
            return np.full(ids.shape, -1, dtype=np.int64)
        if ids.size >= HASH_LOOKUP_MIN:
            return self._hash_index.find(ids)
        # Searched in the ids' own dtype: a longer string dtype would make numpy cast all of the
        # prior's ids per call (milliseconds for an EPIC v2 prior). An id longer than every known one
        # is truncated here but cannot match: the equality below compares the full ids.
        needles = (
            ids.astype(self.probe_ids.dtype) if ids.dtype.itemsize > self.probe_ids.dtype.itemsize else ids
        )
        pos = np.minimum(search(self.probe_ids, needles.reshape(-1)).reshape(ids.shape), n - 1)
        return np.asarray(np.where(self.probe_ids[pos] == ids, pos, -1))

    @functools.cached_property
    def _hash_index(self) -> IdHash:
        return IdHash(self.probe_ids)

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
        if (
            kind == "empirical"
            and pos.size <= SMALL
            and np.isfinite(lo_arr).all()
            and np.isfinite(hi_arr).all()
        ):
            return self._empirical_small(pos, lo_arr, hi_arr).reshape(shape)
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

    def probability_one(self, probe_id: str, lo: float, hi: float) -> float:
        """:meth:`probability` of one (probe id, lo, hi) with the default method, the same float.

        The service answers most requests one query at a time; this path does it in plain Python
        (a binary search in the ids, :func:`_sketch_cdf_scalar` for the CDF), where the array path's
        set-up cost several times the arithmetic.
        """
        if self.quantiles is None or not (math.isfinite(lo) and math.isfinite(hi)):
            return float(self.probability(np.array([probe_id]), lo, hi)[0])
        ids = self.probe_ids
        probe_id = locus(probe_id)
        if len(probe_id) > ids.dtype.itemsize // 4:  # longer than every known id (see index)
            return math.nan
        pos = int(ids.searchsorted(probe_id))
        if pos >= len(ids) or ids[pos] != probe_id:
            return math.nan
        if lo > hi:
            return 0.0
        row = self.quantiles[pos].tolist()
        p = _sketch_cdf_scalar(row, hi, right=True) - _sketch_cdf_scalar(row, lo, right=False)
        return min(max(p, 0.0), 1.0)

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

    def _empirical_small(self, pos: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """:meth:`_empirical_chunk` for a handful of queries, without numpy's per-call overhead."""
        assert self.quantiles is not None
        p = np.zeros(pos.size, dtype=np.float64)
        known = pos >= 0
        for i in np.flatnonzero(known):
            row = self.quantiles[pos[i]].tolist()
            upper = _sketch_cdf_scalar(row, float(hi[i]), right=True)
            p[i] = upper - _sketch_cdf_scalar(row, float(lo[i]), right=False)
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


def _finish(p: np.ndarray, known: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    np.clip(p, 0.0, 1.0, out=p)
    p[lo > hi] = 0.0
    p[~known | np.isnan(lo) | np.isnan(hi)] = np.nan
    return p


def _threads(requested: int | None, n_chunks: int) -> int:
    n = requested if requested is not None else THREADS
    if n is None:
        try:
            n = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not Linux
            n = os.cpu_count() or 1
        n = min(n, 8)
    return max(1, min(int(n), n_chunks))

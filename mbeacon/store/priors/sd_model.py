"""The sd model: a probe's population sd predicted from its mean, learned on a real reference table.

Priors built from published means only (:func:`~.build.prior_from_means`) have no measured sd, and
reference probes with a single value have none either; :class:`SdModel` fills it in. It is learned by
:func:`learn_sd_model` from a reference table, by default the shipped whole-blood table.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mbeacon.store.errors import DataError
from mbeacon.store.priors.model import _readonly
from mbeacon.store.priors.table_files import _read_matrix_frame

__all__ = ["SdModel", "learn_sd_model"]


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

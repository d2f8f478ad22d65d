"""The real data the model is built on, and the sd distribution learned from it.

Two shipped tables (``mbeacon.data``): the population mean of every Illumina 450K probe (bimodal: a
quarter below 0.07, half above 0.62), and the beta values of 20,000 probes x 10 whole-blood samples
(GSE41169). From the blood table, :func:`learn_sd_distribution` learns a probe's sd given its mean:
the real median sd at that mean, times a log-normal probe-to-probe factor whose width is also learned
(with the sampling noise of a 10-sample sd taken out). Both tables are read once per process.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import special

from mbeacon import data

from ..errors import DataError
from ..priors import SdModel, import_means_file, learn_sd_model

__all__ = ["SdDistribution", "learn_sd_distribution", "load_blood_reference", "load_population_means"]


# --- the real reference tables -----------------------------------------------------------------------


def _readonly(array: np.ndarray) -> np.ndarray:
    out = np.asarray(array).view()
    out.flags.writeable = False
    return out


@functools.lru_cache(maxsize=1)
def load_population_means() -> tuple[np.ndarray, np.ndarray]:
    """(probe ids, mean beta) of the shipped 450K population means, in the order of the id list
    (read-only arrays, read once per process)."""
    prior = import_means_file(name="population-means")
    keep = np.isfinite(prior.mean)
    return _readonly(prior.probe_ids[keep]), _readonly(prior.mean[keep])


@functools.lru_cache(maxsize=1)
def load_blood_reference() -> tuple[np.ndarray, np.ndarray]:
    """(probe ids, values) of the shipped real table: beta values of 20,000 probes x 10 whole-blood
    samples (GSE41169), in the order of its id list (read-only arrays, read once per process)."""
    path = data.path(data.BLOOD_REFERENCE)
    try:
        frame = pd.read_csv(path, index_col=0)
        values = frame.to_numpy(dtype=np.float64)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise DataError(f"cannot read the real blood table: {exc}", path=str(path)) from None
    if values.shape[0] < 100 or values.shape[1] < 3 or not np.all(np.isfinite(values)):
        raise DataError(
            f"the real blood table should be complete, >= 100 x 3 (is {values.shape})", path=str(path)
        )
    return _readonly(frame.index.to_numpy().astype(str)), _readonly(values)


# --- the sd model ------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class SdDistribution:
    """The sd of a probe given its mean: ``median(m) / bias * exp(spread(m) * deviation)``.

    ``median`` is the real binned-median relation (:class:`~mbeacon.store.priors.SdModel`); ``bias``
    the ratio of the median 10-sample sd to the true sd (0.96: the real medians come from 10 samples);
    ``spread`` the probe-to-probe sd of log sd at each knot, with the sampling noise of a 10-sample sd
    (``psi'((n - 1) / 2) / 4`` in variance) taken out; ``deviation`` a probe's standard normal draw.
    """

    median: SdModel
    knot_mean: np.ndarray
    knot_spread: np.ndarray
    bias: float

    def typical(self, mean: Any) -> np.ndarray:
        """The population median sd at each mean."""
        return self.median.predict(mean) / self.bias

    def sd(self, mean: Any, deviation: Any) -> np.ndarray:
        spread = np.interp(mean, self.knot_mean, self.knot_spread)
        return self.typical(mean) * np.exp(spread * np.asarray(deviation))


def learn_sd_distribution(
    values: np.ndarray, *, bin_width: float = 0.05, min_probes: int = 20
) -> SdDistribution:
    """Learn the sd-versus-mean relation and its probe-to-probe spread from a real probes x samples table."""
    values = np.asarray(values, dtype=np.float64)
    n = values.shape[1]
    median = learn_sd_model(values, bin_width=bin_width, min_probes=min_probes)
    means = values.mean(axis=1)
    log_sd = np.log(np.maximum(values.std(axis=1, ddof=1), 1e-6))
    sampling_var = float(special.polygamma(1, (n - 1) / 2.0)) / 4.0
    bias = float(np.sqrt(special.chdtri(n - 1, 0.5) / (n - 1)))
    edges = np.arange(0.0, 1.0 + bin_width / 2, bin_width)
    knot_mean, knot_spread = [], []
    for lo, hi in itertools.pairwise(edges):
        sel = (means >= lo) & (means < hi)
        if np.count_nonzero(sel) < min_probes:
            continue
        q10, q90 = np.percentile(log_sd[sel], [10, 90])
        robust_var = ((q90 - q10) / (2 * special.ndtri(0.9))) ** 2
        knot_mean.append(float(np.median(means[sel])))
        knot_spread.append(float(np.sqrt(max(robust_var - sampling_var, 0.1**2))))
    return SdDistribution(median, np.array(knot_mean), np.array(knot_spread), bias)

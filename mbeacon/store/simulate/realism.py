"""Realism statistics: how a simulated general-population sample compares with the real blood table.

:class:`RealismStats` accumulates, block by block in probe order, the summaries that show whether
simulated data look like real data: per-probe mean and sd, the correlation of neighbouring probes, the
value histogram, the gapped (bimodal) probes and the residual components of sets of 10 samples. The
first 10 samples are also summarised alone, like for like with the real 10-sample table.
:func:`realism_summary` turns the simulated and the real statistics into the numbers of
``report.json`` (drawn by :func:`mbeacon.store.simulate.report.write_report`).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from .model import Population, SimulationConfig

__all__ = ["FIRST", "SD_BINS", "RealismStats", "realism_summary"]

#: The bins of the data README's sd-versus-mean table.
SD_BINS = np.round(np.arange(0.0, 1.01, 0.1), 1)
FIRST = 10  # samples used for the like-for-like comparison with the real 10-sample table


def _row_standardise(x: np.ndarray) -> np.ndarray:
    centred = x - x.mean(axis=1, keepdims=True)
    norm = np.sqrt(np.sum(centred**2, axis=1, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        return centred / norm


class RealismStats:
    """Summaries of a general-population sample (probes x samples), accumulated block by block in probe
    order: per-probe mean and sd, the across-sample correlation of neighbouring probes, the value
    histogram and the gap (bimodality) flags, all also on the first 10 samples alone (like for like with
    the real 10-sample table), and the residual covariance of each disjoint set of 10 samples. Meant for
    complete values (the true values of a simulation): a probe with a missing value drops out of the
    statistics that need all its values."""

    def __init__(self, n_probes: int) -> None:
        self.mean = np.full(n_probes, np.nan)
        self.sd = np.full(n_probes, np.nan)
        self.mean10 = np.full(n_probes, np.nan)
        self.sd10 = np.full(n_probes, np.nan)
        self.lag1 = np.full(max(n_probes - 1, 0), np.nan)
        self.lag1_10 = np.full(max(n_probes - 1, 0), np.nan)
        self.gap10 = np.zeros(n_probes, dtype=bool)
        self.hist10 = np.zeros((100, 100), dtype=np.int64)  # probe-mean bin x value bin
        self.grams: np.ndarray | None = None  # one residual Gram matrix per set of 10 samples
        self.disease_mean = np.full(n_probes, np.nan)
        self._last: tuple[np.ndarray, np.ndarray] | None = None

    def add(self, start: int, general: np.ndarray, disease: np.ndarray | None = None) -> None:
        rows = slice(start, start + general.shape[0])
        first = general[:, :FIRST]
        self.mean[rows] = general.mean(axis=1)
        self.mean10[rows] = first.mean(axis=1)
        if general.shape[1] > 1:
            self.sd[rows] = general.std(axis=1, ddof=1)
            self.sd10[rows] = first.std(axis=1, ddof=1)
        if disease is not None and disease.shape[1]:
            self.disease_mean[rows] = disease.mean(axis=1)
        std_all, std_10 = _row_standardise(general), _row_standardise(first)
        if self._last is not None and start > 0:
            std_all = np.concatenate([self._last[0], std_all])
            std_10 = np.concatenate([self._last[1], std_10])
            lag = slice(start - 1, start - 1 + general.shape[0])
        else:
            lag = slice(start, start + general.shape[0] - 1)
        self.lag1[lag] = np.sum(std_all[1:] * std_all[:-1], axis=1)
        self.lag1_10[lag] = np.sum(std_10[1:] * std_10[:-1], axis=1)
        self._last = (std_all[-1:], std_10[-1:])
        width = min(FIRST, general.shape[1])
        windows = [general[:, k : k + width] for k in range(0, general.shape[1] - width + 1, width)]
        grams = []
        for window in windows:
            residual = _row_standardise(window)
            residual = residual[np.all(np.isfinite(residual), axis=1)]
            grams.append(residual.T @ residual)
        self.grams = np.array(grams) if self.grams is None else self.grams + np.array(grams)
        counted = np.isfinite(first) & np.isfinite(self.mean10[rows])[:, None]
        mean_bin = np.clip((np.broadcast_to(self.mean10[rows][:, None], first.shape)[counted] * 100), 0, 99)
        cell = mean_bin.astype(np.intp) * 100 + np.clip(first[counted] * 100, 0, 99).astype(np.intp)
        self.hist10 += np.bincount(cell, minlength=100 * 100).reshape(100, 100)
        if first.shape[1] >= 4:
            ordered = np.sort(first, axis=1)
            gaps = np.diff(ordered, axis=1)[:, 1:-1]  # at least two values on each side
            self.gap10[rows] = gaps.max(axis=1) > 0.2

    def sd_bins(self, *, ten: bool = True, like: np.ndarray | None = None) -> list[dict[str, float]]:
        """Median and 90th percentile of the per-probe sd in the README's mean bins.

        ``like``: probe means of another table (the real one). Probes are then weighted so that their
        means are distributed within each bin like ``like``'s (sub-bins of 0.01): the real 20k table
        holds few probes near 0 where the 450K array has many, and within the bin [0, 0.1) the sd
        grows fivefold, so unweighted medians of the two would compare different probes.
        """
        mean, sd = (self.mean10, self.sd10) if ten else (self.mean, self.sd)
        ok = np.isfinite(sd) & np.isfinite(mean)
        mean, sd = mean[ok], sd[ok]
        weight = np.ones(mean.size)
        if like is not None:
            sub = np.linspace(0.0, 1.0, 101)
            own = np.histogram(mean, sub)[0]
            target = np.histogram(like[np.isfinite(like)], sub)[0]
            cell = np.clip(np.searchsorted(sub, mean, side="right") - 1, 0, 99)
            with np.errstate(divide="ignore", invalid="ignore"):
                weight = np.where(own[cell] > 0, target[cell] / own[cell], 0.0)
        out = []
        for lo, hi in itertools.pairwise(SD_BINS):
            sel = (mean >= lo) & (mean < hi if hi < 1 else mean <= hi) & (weight > 0)
            s, w = sd[sel], weight[sel]
            out.append(
                {
                    "bin": f"[{lo:.1f},{hi:.1f})",
                    "probes": int(s.size),
                    "median_sd": _weighted_quantile(s, w, 0.5),
                    "p90_sd": _weighted_quantile(s, w, 0.9),
                }
            )
        return out

    def eigen_shares(self) -> np.ndarray:
        """Shares of the residual variance of each set of 10 samples along its principal components
        (sets x components, largest first; residuals: values minus the probe's mean over the set,
        divided by their norm, so each probe counts once)."""
        if self.grams is None:
            return np.empty((0, 0))
        ev = np.sort(np.linalg.eigvalsh(self.grams), axis=1)[:, ::-1][:, :-1]  # the last is 0: centred
        return ev / ev.sum(axis=1, keepdims=True)

    def value_density(self, like: np.ndarray | None = None) -> np.ndarray:
        """Density of the first 10 samples' values on 100 bins of [0, 1]. ``like``: probe means of
        another table; probes are weighted so that their means are distributed like those."""
        hist = self.hist10.astype(np.float64)
        if like is not None:
            own = np.bincount(
                np.clip((self.mean10[np.isfinite(self.mean10)] * 100).astype(np.intp), 0, 99), minlength=100
            )
            target = np.bincount(
                np.clip((like[np.isfinite(like)] * 100).astype(np.intp), 0, 99), minlength=100
            )
            with np.errstate(divide="ignore", invalid="ignore"):
                hist *= np.where(own > 0, target / own, 0.0)[:, None]
        total = hist.sum(axis=0)
        return total / total.sum() * 100


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    if values.size == 0 or not np.any(weights > 0):
        return float("nan")
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cumulative, q * cumulative[-1])])


def _real_stats(real: np.ndarray) -> RealismStats:
    stats = RealismStats(real.shape[0])
    stats.add(0, real)
    return stats


def _finite_mean(x: np.ndarray) -> float:
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else float("nan")


def realism_summary(
    sim: RealismStats,
    real: RealismStats,
    real_means: np.ndarray,
    population: Population,
    config: SimulationConfig,
) -> dict[str, Any]:
    """The numbers behind the report: simulated versus real, like for like where possible."""
    mid = (sim.mean10 >= 0.2) & (sim.mean10 <= 0.8)
    real_mid = (real.mean10 >= 0.2) & (real.mean10 <= 0.8)
    observed = sim.disease_mean - sim.mean
    return {
        "sd_by_mean": {
            "real_10_samples": real.sd_bins(),
            "simulated_10_samples": sim.sd_bins(),
            "simulated_all_reference": sim.sd_bins(ten=False),
            "simulated_10_samples_mean_matched": sim.sd_bins(like=real.mean10),
            "simulated_all_reference_mean_matched": sim.sd_bins(ten=False, like=real.mean10),
        },
        "neighbour_correlation": {
            "real_10_samples_id_order": _finite_mean(real.lag1_10),
            "simulated_10_samples": _finite_mean(sim.lag1_10),
            "simulated_all_reference": _finite_mean(sim.lag1),
            "latent_target": config.neighbour_correlation,
        },
        "probe_means": {
            "real_450k_fraction_below_0.07": float(np.mean(real_means < 0.07)),
            "simulated_fraction_below_0.07": float(np.mean(sim.mean < 0.07)),
            "real_450k_fraction_above_0.62": float(np.mean(real_means > 0.62)),
            "simulated_fraction_above_0.62": float(np.mean(sim.mean > 0.62)),
            "real_450k_median": float(np.median(real_means)),
            "simulated_median": float(np.median(sim.mean)),
        },
        "residual_eigen_shares_10_samples": {
            "real": real.eigen_shares()[0].round(4).tolist(),
            "simulated_mean": sim.eigen_shares().mean(axis=0).round(4).tolist(),
            "simulated_sd": sim.eigen_shares().std(axis=0).round(4).tolist(),
            "simulated_sets_of_10": int(sim.eigen_shares().shape[0]),
        },
        "gapped_fraction_mean_0.2_0.8": {
            "real": float(np.mean(real.gap10[real_mid])),
            "simulated": float(np.mean(sim.gap10[mid])),
        },
        "dmp_effects": {
            "count": int(population.dmp.sum()),
            "mean_abs_delta": float(np.mean(np.abs(population.delta[population.dmp])))
            if population.dmp.any()
            else None,
            "observed_abs_difference_at_dmps": _finite_mean(np.abs(observed[population.dmp])),
            "observed_abs_difference_elsewhere": _finite_mean(np.abs(observed[~population.dmp])),
        },
    }

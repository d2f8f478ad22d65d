"""Generating the cohorts' values from a :class:`~.model.Population`, probe block by probe block.

For each block of :data:`GENERATION_BLOCK` probes: every individual's latent values (the factors plus
an AR(1) process along the probe order, carried over from the previous block), their beta values
through the probe's marginal (:mod:`.beta_quantile`; the disease population's marginal at the DMPs for
members and non-members), then the measured copies with missing values and the noisy re-measurements
of members and non-members. Each block has its own random streams, so the values do not depend on how
the output is buffered or written, and memory stays bounded at any size.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from scipy import signal

from ..priors import beta_moments
from .beta_quantile import _mixture_quantile_of_normal, beta_quantile_of_normal
from .model import (
    _STREAM_LATENT,
    _STREAM_MISSING,
    _STREAM_NOISE,
    Population,
    SimulationConfig,
    _prepare,
    _rng,
    sample_ids,
)

__all__ = [
    "GENERATION_BLOCK",
    "VALUE_FLOOR",
    "SimulatedBlock",
    "SimulatedCohorts",
    "iter_blocks",
    "simulate_arrays",
]

#: Probes per generation block. Fixed: each block has its own random streams, so the values do not
#: depend on how the output is buffered or written.
GENERATION_BLOCK = 4096
#: Simulated (measured) values are clipped to [VALUE_FLOOR, 1 - VALUE_FLOOR]: in (0, 1) at 6 decimals.
VALUE_FLOOR = 1e-6


def _general_values(population: Population, rows: slice, z: np.ndarray) -> np.ndarray:
    """General-population beta values of the probes ``rows`` from their latent values."""
    out = np.empty_like(z)
    bimodal = population.bimodal[rows]
    uni = ~bimodal
    if np.any(uni):
        a, b = beta_moments(population.mean[rows][uni], population.sd[rows][uni])
        out[uni] = beta_quantile_of_normal(z[uni], a, b)
    if np.any(bimodal):
        pick = np.flatnonzero(bimodal) + rows.start
        a1, b1 = beta_moments(population.low_mean[pick], population.low_sd[pick])
        a2, b2 = beta_moments(population.high_mean[pick], population.high_sd[pick])
        out[bimodal] = _mixture_quantile_of_normal(z[bimodal], population.weight[pick], a1, b1, a2, b2)
    return out


# --- generation, block by block ----------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class SimulatedBlock:
    """Probes ``start:stop`` of every group. ``values``: true values of all individuals, columns
    [members | non-members | reference]; ``measured``: the same with missing values (NaN);
    ``remeasured``: noisy re-measurements of the members and non-members (no missing values)."""

    start: int
    stop: int
    values: np.ndarray
    measured: np.ndarray
    remeasured: np.ndarray
    patients: int
    nonmembers: int

    def group(self, name: str) -> np.ndarray:
        n, m = self.patients, self.nonmembers
        return {
            "members": self.measured[:, :n],
            "nonmembers": self.measured[:, n : n + m],
            "reference": self.measured[:, n + m :],
            "members_remeasured": self.remeasured[:, :n],
            "nonmembers_remeasured": self.remeasured[:, n:],
        }[name]


def iter_blocks(population: Population, config: SimulationConfig) -> Iterator[SimulatedBlock]:
    """Generate the cohorts probe block by probe block (blocks of :data:`GENERATION_BLOCK`)."""
    n_disease = config.patients + config.nonmembers
    n = config.individuals
    ar = population.ar_coefficient
    innovation = np.sqrt(1.0 - ar**2)
    own = np.sqrt(1.0 - np.sum(population.loadings**2, axis=1))
    previous: np.ndarray | None = None
    for block, start in enumerate(range(0, len(population), GENERATION_BLOCK)):
        stop = min(start + GENERATION_BLOCK, len(population))
        rows = slice(start, stop)
        e = _rng(config.seed, _STREAM_LATENT, block).standard_normal((stop - start, n))  # noise-ok
        if previous is None:
            e[0] /= innovation  # the first probe starts the AR(1) process in its stationary law
            state = np.zeros((1, n))
        else:
            state = ar * previous[None, :]
        chain, _ = signal.lfilter([innovation], [1.0, -ar], e, axis=0, zi=state)
        previous = chain[-1].copy()
        z = own[rows, None] * chain + population.loadings[rows] @ population.scores.T

        values = _general_values(population, rows, z)
        dmp = np.flatnonzero(population.dmp[rows])
        if dmp.size and n_disease:
            a, b = beta_moments(population.disease_mean[start + dmp], population.disease_sd[start + dmp])
            values[dmp, :n_disease] = beta_quantile_of_normal(z[dmp, :n_disease], a, b)
        np.clip(values, VALUE_FLOOR, 1.0 - VALUE_FLOOR, out=values)

        measured = values.copy()
        if config.missing > 0:
            missing_draws = _rng(config.seed, _STREAM_MISSING, block)  # noise-ok
            measured[missing_draws.random(values.shape) < config.missing] = np.nan  # noise-ok
        noise = _rng(config.seed, _STREAM_NOISE, block).standard_normal((stop - start, n_disease))  # noise-ok
        remeasured = np.clip(values[:, :n_disease] + config.noise * noise, 0.0, 1.0)
        yield SimulatedBlock(start, stop, values, measured, remeasured, config.patients, config.nonmembers)


@dataclass(frozen=True, eq=False)
class SimulatedCohorts:
    """Everything :func:`simulate` writes, in memory (probes x samples matrices)."""

    config: SimulationConfig
    population: Population
    sample_ids: dict[str, list[str]]
    values: np.ndarray  # true values, [members | non-members | reference]
    members: np.ndarray
    nonmembers: np.ndarray
    reference: np.ndarray
    members_remeasured: np.ndarray
    nonmembers_remeasured: np.ndarray

    @property
    def probe_ids(self) -> np.ndarray:
        return self.population.probe_ids


def simulate_arrays(config: SimulationConfig | None = None) -> SimulatedCohorts:
    """Simulate in memory (small and medium sizes; :func:`simulate` streams to files at any size)."""
    config = config or SimulationConfig()
    population = _prepare(config)
    blocks = list(iter_blocks(population, config))

    def stack(name: str) -> np.ndarray:
        return np.concatenate([b.group(name) for b in blocks])

    return SimulatedCohorts(
        config=config,
        population=population,
        sample_ids=sample_ids(config),
        values=np.concatenate([b.values for b in blocks]),
        members=stack("members"),
        nonmembers=stack("nonmembers"),
        reference=stack("reference"),
        members_remeasured=stack("members_remeasured"),
        nonmembers_remeasured=stack("nonmembers_remeasured"),
    )

"""The synthetic world: a cohort, its disease and the victims, drawn from the public prior, and the
evaluation scenario on it (the steps are in :mod:`mbeacon.attack.advisor`'s docstring)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mbeacon.attack.advisor.config import AdvisorConfig
from mbeacon.attack.advisor.inputs import PublicInputs
from mbeacon.attack.advisor.synthetic_prior import estimated_prior
from mbeacon.attack.scenario import Scenario, build_scenario
from mbeacon.store.errors import DataError
from mbeacon.store.priors import Prior, beta_moments
from mbeacon.store.simulate.model import DISEASE_MEAN_RANGE, MIN_CONCENTRATION

#: Probes per block when drawing people (bounds the temporary arrays).
DRAW_BLOCK = 2048


def usable_rows(prior: Prior, probe_ids: np.ndarray | None = None) -> np.ndarray:
    """Prior positions a person can be drawn at (finite mean, sd and Beta), restricted to ``probe_ids``."""
    ok = np.isfinite(prior.mean) & np.isfinite(prior.sd) & np.isfinite(prior.a) & np.isfinite(prior.b)
    ok &= (prior.a > 0) & (prior.b > 0)
    if probe_ids is not None:
        wanted = np.zeros(len(prior), dtype=bool)
        found = prior.index(np.asarray(probe_ids).astype(str))
        wanted[found[found >= 0]] = True
        ok &= wanted
    return np.flatnonzero(ok)


def sd_by_mean(prior: Prior, bins: int = 40) -> Callable[[np.ndarray], np.ndarray]:
    """The prior's median sd as a function of the mean (binned at quantiles of the means).

    Public (the prior's own statistics); used for a DMP's spread at its shifted mean, the way the
    simulation takes a probe's sd from the sd-by-mean relation of real data.
    """
    ok = np.isfinite(prior.mean) & np.isfinite(prior.sd)
    mean, sd = prior.mean[ok], prior.sd[ok]
    if mean.size == 0:
        return lambda m: np.full(np.shape(m), 0.05)
    bins = max(1, min(bins, mean.size // 25))
    edges = np.quantile(mean, np.linspace(0.0, 1.0, bins + 1))
    which = np.clip(np.searchsorted(edges, mean, side="right") - 1, 0, bins - 1)
    centres, medians = [], []
    for b in range(bins):
        inside = which == b
        if inside.any():
            centres.append(float(np.median(mean[inside])))
            medians.append(float(np.median(sd[inside])))
    x, y = np.array(centres), np.maximum(np.array(medians), 1e-4)
    return lambda m: np.interp(m, x, y)


def _sketch_draw(quantiles: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse of the piecewise-linear CDF through each sketch row (probes x Q) at ``u`` (people x probes)."""
    q_count = quantiles.shape[1]
    position = u * (q_count - 1)
    k = np.minimum(position.astype(np.int64), q_count - 2)
    frac = position - k
    cols = np.arange(quantiles.shape[0])[None, :]
    low, high = quantiles[cols, k], quantiles[cols, k + 1]
    return low + frac * (high - low)


def draw_from_prior(prior: Prior, rows: np.ndarray, people: int, rng: np.random.Generator) -> np.ndarray:
    """``people x len(rows)`` independent draws from the prior's marginals (float64).

    Inverse CDF through the quantile sketch where the prior has one (the same piecewise-linear CDF
    :meth:`Prior.probability` evaluates), Beta(a, b) elsewhere.
    """
    rows = np.asarray(rows, dtype=np.int64)
    out = np.empty((people, rows.size), dtype=np.float64)
    for start in range(0, rows.size, DRAW_BLOCK):
        block = rows[start : start + DRAW_BLOCK]
        values = out[:, start : start + block.size]
        beta_only = np.ones(block.size, dtype=bool)
        if prior.quantiles is not None:
            sketch = prior.quantiles[block].astype(np.float64)
            beta_only = ~np.all(np.isfinite(sketch), axis=1)
            u = rng.random((people, block.size))  # noise-ok: simulation
            values[:] = _sketch_draw(np.nan_to_num(sketch), u)
        if beta_only.any():
            a, b = prior.a[block[beta_only]], prior.b[block[beta_only]]
            values[:, beta_only] = rng.beta(a, b, size=(people, a.size))  # noise-ok: simulation
    return np.clip(out, 0.0, 1.0)


@dataclass(frozen=True, eq=False)
class Disease:
    """The synthetic disease: which columns are DMPs, and each DMP's Beta in the disease population."""

    columns: np.ndarray
    delta: np.ndarray
    a: np.ndarray
    b: np.ndarray


def draw_disease(prior: Prior, rows: np.ndarray, config: AdvisorConfig, rng: np.random.Generator) -> Disease:
    """DMPs as in the simulation: a fraction of probes, mean shifted by ``delta`` (``|delta|`` uniform in
    ``effect_range``, random sign, flipped when the shifted mean would leave [0.01, 0.99]); the sd at
    the shifted mean follows the prior's sd-by-mean relation, scaled by the probe's own deviation
    from it."""
    count = min(rows.size, round(config.dmp_fraction * rows.size))
    columns = np.sort(rng.choice(rows.size, size=count, replace=False))  # noise-ok: simulation
    magnitude = rng.uniform(*config.effect_range, size=count)  # noise-ok: simulation
    sign = np.where(rng.random(count) < 0.5, -1.0, 1.0)  # noise-ok: simulation
    mean = prior.mean[rows[columns]]
    lo, hi = DISEASE_MEAN_RANGE
    outside = (mean + sign * magnitude < lo) | (mean + sign * magnitude > hi)
    delta = np.where(outside, -sign, sign) * magnitude
    shifted = np.clip(mean + delta, lo, hi)
    curve = sd_by_mean(prior)
    sd = prior.sd[rows[columns]] * curve(shifted) / curve(mean)
    sd = np.minimum(sd, np.sqrt(shifted * (1.0 - shifted) / (1.0 + MIN_CONCENTRATION)))
    a, b = beta_moments(shifted, sd)
    return Disease(columns, shifted - mean, a, b)


@dataclass(frozen=True, eq=False)
class SyntheticCohort:
    """The synthetic world of one advice: the cohort (probes x N), the victims and their labels, and
    the beacon's prior (the public prior re-estimated from ``reference`` synthetic reference people;
    the public prior itself when ``reference`` is 0)."""

    probe_ids: np.ndarray
    cohort: np.ndarray  # probes x N, NaN missing
    victims: np.ndarray  # 2V x probes, re-measured
    labels: np.ndarray
    disease: Disease
    prior: Prior
    reference: int


def synthetic_cohort(inputs: PublicInputs, config: AdvisorConfig) -> SyntheticCohort:
    """Draw the synthetic cohort and victims from the public inputs (see :mod:`mbeacon.attack.advisor`)."""
    prior, n = inputs.prior, inputs.patients
    usable = usable_rows(prior, inputs.probe_ids)
    if usable.size == 0:
        raise DataError(
            f"prior {prior.name!r} has no usable statistics for any probe of dataset {inputs.dataset!r}"
        )
    rng = np.random.default_rng([config.seed, 5])  # noise-ok: simulation, seeded
    size = min(usable.size, config.probes, max(1, config.max_values // max(1, n)))
    rows = np.sort(rng.choice(usable, size=size, replace=False))  # noise-ok: simulation
    if config.queries > rows.size:
        why = (
            f"at most {config.max_values:,} values for N = {n}"
            if rows.size < min(usable.size, config.probes)
            else f"the probes prior {prior.name!r} and dataset {inputs.dataset!r} share"
        )
        raise DataError(
            f"{config.queries} queries per victim need as many probes, but the synthetic cohort has "
            f"{rows.size} ({why}): lower --queries"
        )
    v = min(n, config.victims)
    people = draw_from_prior(prior, rows, n + v, rng)
    disease = draw_disease(prior, rows, config, rng)
    dmp = rng.beta(disease.a, disease.b, size=(n + v, disease.columns.size))  # noise-ok: simulation
    people[:, disease.columns] = dmp
    cohort = people[:n].T.copy()
    cohort[rng.random(cohort.shape) < config.missing] = np.nan  # noise-ok: simulation
    attacked = np.vstack([people[:v], people[n : n + v]])
    victims = np.clip(attacked + rng.normal(0.0, config.noise, attacked.shape), 0.0, 1.0)  # noise-ok
    labels = np.r_[np.ones(v, bool), np.zeros(v, bool)]
    # drawn last, so that the people above are the same whether the prior is re-estimated or not
    estimated = estimated_prior(prior, rows, rng, draw_from_prior)
    beacon_prior = prior if estimated is None else estimated
    reference = 0 if estimated is None else estimated.n_reference
    return SyntheticCohort(prior.probe_ids[rows], cohort, victims, labels, disease, beacon_prior, reference)


def synthetic_scenario(inputs: PublicInputs, config: AdvisorConfig) -> Scenario:
    """The evaluation scenario on a fresh synthetic cohort: the pooled attack and both workloads."""
    return scenario_for(synthetic_cohort(inputs, config), inputs, config)


def scenario_for(world: SyntheticCohort, inputs: PublicInputs, config: AdvisorConfig) -> Scenario:
    """The evaluation scenario on ``world``, with the world's prior (:attr:`SyntheticCohort.prior`) as
    the beacon's and the attacker's prior."""
    estimated = (
        f"prior re-estimated from {world.reference} reference people"
        if world.reference
        else "the prior itself as the beacon's"
    )
    return build_scenario(
        world.cohort,
        world.probe_ids,
        world.victims,
        world.labels,
        world.prior,
        queries=config.queries,
        noise_sd=config.noise,
        missing=config.missing,
        strategy="pooled",
        seed=config.seed,
        description=(
            f"synthetic cohort for {inputs.dataset}: N = {inputs.patients}, {world.cohort.shape[0]:,} probes "
            f"of prior {inputs.prior.name} ({estimated}), {world.disease.columns.size} DMPs, "
            f"{int(world.labels.sum())} + {int((~world.labels).sum())} victims, seed {config.seed}"
        ),
    )

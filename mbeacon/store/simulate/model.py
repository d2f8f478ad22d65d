"""The statistical model: what to simulate, and every probe-level parameter drawn from the seed.

:class:`SimulationConfig` holds the parameters of a run (sizes, DMP fraction, noise, missingness,
seed). :func:`draw_population` turns a config into a :class:`Population`: which 450K probes, each
probe's mean and sd in the general and the disease population, the bimodal (two-component) probes,
the DMPs and their effects, and the latent dependence (individual-level factor loadings and scores,
the AR(1) coefficient along the probe order). The calibration constants below say what each choice
was matched to; ``docs/simulation.md`` has the measured comparison with real data.

Random draws come from numpy's seeded Generator, one independent stream per purpose
(:func:`_rng`): the parameters here, and per generation block the latent values, the missing-value
mask and the re-measurement noise (:mod:`.generation`). The lines that draw are marked ``# noise-ok``:
this is simulation, not privacy noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import DataError
from .real_data import SdDistribution, learn_sd_distribution, load_blood_reference, load_population_means

__all__ = [
    "BIMODAL_FRACTION",
    "BIMODAL_MEAN_RANGE",
    "BIMODAL_MIN_SEPARATION",
    "BIMODAL_SEPARATION_RANGE",
    "BIMODAL_WEIGHT_RANGE",
    "COMPONENT_MEAN_RANGE",
    "DEFAULT_SEED",
    "DISEASE_MEAN_RANGE",
    "EFFECT_RANGE",
    "FACTOR_VARIANCES",
    "MAX_NEIGHBOUR_CORRELATION",
    "MAX_SHARED_VARIANCE",
    "MEAN_RANGE",
    "MIN_CONCENTRATION",
    "Population",
    "SimulationConfig",
    "draw_population",
    "sample_ids",
    "series_accession",
]

DEFAULT_SEED = 20_240_611

#: Individual-level latent factors (variance of the latent value each explains, on average over
#: probes): cell-type composition and the like. Calibrated so that the eigenvalue shares of 10 samples'
#: standardised residuals match the real table's: real 0.28 0.14 0.12 0.10 0.08 0.08 0.07 0.07 0.07,
#: simulated (mean over 20 sets of 10, seed 3) 0.28 0.15 0.12 0.09 0.08 0.07 0.07 0.07 0.07 (0.11
#: each for independent samples).
FACTOR_VARIANCES = (0.28, 0.07, 0.06, 0.04, 0.03)
#: The latent neighbour correlation reachable next to the factors (about half of the latent variance
#: is the probe's own, so its AR(1) coefficient must be about twice the target; it stays below 0.99).
MAX_NEIGHBOUR_CORRELATION = 0.45
#: At most this much of a probe's latent variance is shared through the factors.
MAX_SHARED_VARIANCE = 0.9
#: Fraction of probes with a mean in [0.2, 0.8] drawn as a two-component mixture. Calibrated on the
#: fraction of probes (mean in [0.2, 0.8]) whose 10 values split into two groups of >= 2 with a gap
#: > 0.2: 0.78% of the real table's, 0.82% of simulated ones (20 sets of 10, seed 3; 0.1% without
#: mixtures).
BIMODAL_FRACTION = 0.01
BIMODAL_MEAN_RANGE = (0.2, 0.8)
BIMODAL_WEIGHT_RANGE = (0.15, 0.85)
BIMODAL_SEPARATION_RANGE = (0.35, 0.65)
BIMODAL_MIN_SEPARATION = 0.25
COMPONENT_MEAN_RANGE = (0.03, 0.97)
#: DMP effects: |delta| uniform in this range, random sign; the shifted mean stays in DISEASE_MEAN_RANGE.
EFFECT_RANGE = (0.1, 0.3)
DISEASE_MEAN_RANGE = (0.01, 0.99)
#: Probe means are clipped to this range (real means span 0.005 to 0.992).
MEAN_RANGE = (0.005, 0.995)
#: a + b of every Beta is at least this: an sd above sqrt(m (1 - m) / (1 + MIN_CONCENTRATION)) is cut.
MIN_CONCENTRATION = 2.0

#: The seed's independent random streams: probe parameters here; per block (:mod:`.generation`) the
#: latent values, the re-measurement noise and the missing-value mask.
_STREAM_PARAMETERS, _STREAM_LATENT, _STREAM_NOISE, _STREAM_MISSING = 0, 1, 2, 3


# --- configuration -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimulationConfig:
    """What to simulate. Defaults suit an attack evaluation: 20,000 probes, 100 members, 100
    non-members, 200 reference samples, 2% DMPs, re-measurement noise sd 0.02, 0.5% missing."""

    probes: int = 20_000
    patients: int = 100
    nonmembers: int = 100
    reference: int = 200
    dmp_fraction: float = 0.02
    noise: float = 0.02
    missing: float = 0.005
    seed: int = DEFAULT_SEED
    #: Average correlation of the latent values of neighbouring probes (across individuals).
    neighbour_correlation: float = 0.3
    bimodal_fraction: float = BIMODAL_FRACTION

    def validate(self, available_probes: int | None = None) -> None:
        """Raise :class:`ValueError` naming the first bad parameter."""
        if self.probes < 2:
            raise ValueError(f"probes must be at least 2 (got {self.probes})")
        if available_probes is not None and self.probes > available_probes:
            raise ValueError(f"probes must be at most {available_probes:,} (the 450K array has no more)")
        if self.patients < 1:
            raise ValueError(f"patients must be at least 1 (got {self.patients})")
        for name in ("nonmembers", "reference"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be at least 0 (got {getattr(self, name)})")
        if not 0.0 <= self.dmp_fraction <= 1.0:
            raise ValueError(f"dmp_fraction must be in [0, 1] (got {self.dmp_fraction})")
        if not 0.0 <= self.noise <= 1.0:
            raise ValueError(f"noise must be in [0, 1] (got {self.noise})")
        if not 0.0 <= self.missing < 1.0:
            raise ValueError(f"missing must be in [0, 1) (got {self.missing})")
        if not 0.0 <= self.neighbour_correlation <= MAX_NEIGHBOUR_CORRELATION:
            raise ValueError(
                f"neighbour_correlation must be in [0, {MAX_NEIGHBOUR_CORRELATION}] "
                f"(got {self.neighbour_correlation})"
            )
        if not 0.0 <= self.bimodal_fraction <= 1.0:
            raise ValueError(f"bimodal_fraction must be in [0, 1] (got {self.bimodal_fraction})")
        if self.seed < 0:
            raise ValueError(f"seed must be non-negative (got {self.seed})")

    @property
    def individuals(self) -> int:
        return self.patients + self.nonmembers + self.reference


def sample_ids(config: SimulationConfig) -> dict[str, list[str]]:
    """Made-up sample ids: GEO-style GSM ids for the members (far above any real GSM number), NM/REF
    numbers for the non-members and the reference sample. A re-measurement keeps its person's id."""
    base = 90_000_000 + (config.seed % 1000) * 10_000
    width = max(4, len(str(max(config.nonmembers, config.reference, 1))))
    return {
        "members": [f"GSM{base + k}" for k in range(1, config.patients + 1)],
        "nonmembers": [f"NM{k:0{width}d}" for k in range(1, config.nonmembers + 1)],
        "reference": [f"REF{k:0{width}d}" for k in range(1, config.reference + 1)],
    }


def series_accession(config: SimulationConfig) -> str:
    """A made-up GSE id (7 digits: no real series has one yet)."""
    return f"GSE{9_000_000 + config.seed % 1_000_000}"


# --- the population model ----------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Population:
    """Per-probe parameters of the general and the disease population (arrays of length ``probes``)."""

    probe_ids: np.ndarray
    mean: np.ndarray  # general-population mean
    sd: np.ndarray  # general-population sd (of the mixture for bimodal probes)
    dmp: np.ndarray  # bool: differentially methylated in the disease population
    delta: np.ndarray  # disease mean - general mean (0 off the DMPs)
    disease_sd: np.ndarray
    bimodal: np.ndarray  # bool: a two-component mixture
    weight: np.ndarray  # weight of the high component (bimodal probes; 0 elsewhere)
    low_mean: np.ndarray
    low_sd: np.ndarray
    high_mean: np.ndarray
    high_sd: np.ndarray
    loadings: np.ndarray  # probes x factors
    ar_coefficient: float
    scores: np.ndarray  # individuals x factors: [members | non-members | reference]

    @property
    def disease_mean(self) -> np.ndarray:
        return self.mean + self.delta

    def __len__(self) -> int:
        return int(self.probe_ids.shape[0])


def _rng(seed: int, *stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, *stream])  # noise-ok: simulation, seeded


def _cap_sd(mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    return np.minimum(sd, np.sqrt(mean * (1.0 - mean) / (1.0 + MIN_CONCENTRATION)))


def draw_population(
    config: SimulationConfig,
    probe_ids: np.ndarray,
    means: np.ndarray,
    sd_distribution: SdDistribution,
) -> Population:
    """Draw every probe-level parameter (which probes, spreads, mixtures, DMPs, factor loadings) and
    every individual's factor scores from the seed's parameter stream."""
    config.validate(available_probes=len(probe_ids))
    rng = _rng(config.seed, _STREAM_PARAMETERS)  # noise-ok
    p = config.probes
    index = np.sort(rng.choice(len(probe_ids), size=p, replace=False))  # noise-ok
    ids = np.asarray(probe_ids)[index]
    mean = np.clip(np.asarray(means, dtype=np.float64)[index], *MEAN_RANGE)
    deviation = rng.standard_normal(p)  # noise-ok
    sd = _cap_sd(mean, sd_distribution.sd(mean, deviation))

    # Bimodal probes: component means m - w d and m + (1 - w) d keep the mean m.
    lo_m, hi_m = BIMODAL_MEAN_RANGE
    candidate = (mean >= lo_m) & (mean <= hi_m)
    bimodal = candidate & (rng.random(p) < config.bimodal_fraction)  # noise-ok
    weight = rng.uniform(*BIMODAL_WEIGHT_RANGE, size=p)  # noise-ok
    separation = rng.uniform(*BIMODAL_SEPARATION_RANGE, size=p)  # noise-ok
    c_lo, c_hi = COMPONENT_MEAN_RANGE
    separation = np.minimum.reduce([separation, (mean - c_lo) / weight, (c_hi - mean) / (1.0 - weight)])
    bimodal &= separation >= BIMODAL_MIN_SEPARATION
    weight = np.where(bimodal, weight, 0.0)
    low_mean = np.where(bimodal, mean - weight * separation, np.nan)
    high_mean = np.where(bimodal, mean + (1.0 - weight) * separation, np.nan)
    low_sd = np.where(bimodal, _cap_sd(low_mean, sd_distribution.sd(low_mean, deviation)), np.nan)
    high_sd = np.where(bimodal, _cap_sd(high_mean, sd_distribution.sd(high_mean, deviation)), np.nan)
    mixture_var = (1 - weight) * low_sd**2 + weight * high_sd**2 + weight * (1 - weight) * separation**2
    sd = np.where(bimodal, np.sqrt(np.where(bimodal, mixture_var, 0.0)), sd)

    # DMPs: among the unimodal probes.
    pool = np.flatnonzero(~bimodal)
    n_dmp = min(round(config.dmp_fraction * p), pool.size)
    dmp = np.zeros(p, dtype=bool)
    dmp[rng.choice(pool, size=n_dmp, replace=False)] = True  # noise-ok
    magnitude = rng.uniform(*EFFECT_RANGE, size=p)  # noise-ok
    sign = np.where(rng.random(p) < 0.5, -1.0, 1.0)  # noise-ok
    d_lo, d_hi = DISEASE_MEAN_RANGE
    outside = (mean + sign * magnitude < d_lo) | (mean + sign * magnitude > d_hi)
    delta = np.where(dmp, np.where(outside, -sign, sign) * magnitude, 0.0)
    shifted = mean + delta
    disease_sd = np.where(dmp, _cap_sd(shifted, sd_distribution.sd(shifted, deviation)), sd)

    # Latent dependence: factors, and the AR(1) coefficient of the probe-specific part chosen so that
    # the latent correlation of neighbouring probes is `neighbour_correlation` on average.
    loadings = rng.standard_normal((p, len(FACTOR_VARIANCES))) * np.sqrt(FACTOR_VARIANCES)  # noise-ok
    shared = np.sum(loadings**2, axis=1)
    loadings *= np.sqrt(np.minimum(1.0, MAX_SHARED_VARIANCE / np.maximum(shared, 1e-12)))[:, None]
    own = np.sqrt(1.0 - np.sum(loadings**2, axis=1))
    ar = min(config.neighbour_correlation / float(np.mean(own[1:] * own[:-1])), 0.99)
    scores = rng.standard_normal((config.individuals, len(FACTOR_VARIANCES)))  # noise-ok
    return Population(
        probe_ids=ids,
        mean=mean,
        sd=sd,
        dmp=dmp,
        delta=delta,
        disease_sd=disease_sd,
        bimodal=bimodal,
        weight=weight,
        low_mean=low_mean,
        low_sd=low_sd,
        high_mean=high_mean,
        high_sd=high_sd,
        loadings=loadings,
        ar_coefficient=ar,
        scores=scores,
    )


def _prepare(config: SimulationConfig) -> Population:
    """The population of ``config``, from the shipped real data; a bad parameter is a :class:`DataError`."""
    ids, means = load_population_means()
    try:
        config.validate(available_probes=len(ids))
    except ValueError as exc:
        raise DataError(str(exc)) from None
    sd_distribution = learn_sd_distribution(load_blood_reference()[1])
    return draw_population(config, ids, means, sd_distribution)

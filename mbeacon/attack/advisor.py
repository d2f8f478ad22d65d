"""The budget advisor: which SVT² parameters to give a dataset, chosen from public inputs only.

An operator about to publish a cohort asks: which epsilon, c, threshold T and variant keep the
membership-inference attack of :mod:`mbeacon.attack.lrt` below a target AUC after ``Q`` queries per
victim, while answering as many *discovery* queries (where the cohort differs from the prior) as
possible? :func:`advise` answers by simulation, on a synthetic cohort built from what the beacon
publishes anyway:

* the cohort size ``N`` (``/api/datasets`` publishes it) and the dataset's probe ids (the platform);
* the population prior (public by design: SVT² compares every count with it).

It never opens the cohort's beta values (:class:`~mbeacon.store.cohorts.Cohort` is used for its
metadata only), so the advice releases nothing about the patients and can be shared. What it cannot
know, the cohort's real DMPs and correlation structure, it replaces by the assumptions of
:mod:`mbeacon.store.simulate` (``docs/advisor.md`` discusses what that costs).

The synthetic world (:func:`synthetic_scenario`):

1. ``P`` random probes of the prior (those the dataset has), at most :attr:`AdvisorConfig.probes`;
2. ``N`` members and ``V`` non-members (``V = min(N, victims)``), every one a draw from the prior's
   marginal at each probe, independently (inverse CDF through the quantile sketch; Beta(a, b) where
   there is no sketch), except at a fraction ``dmp_fraction`` of the probes, the disease's DMPs, where
   the mean shifts by ``delta`` (``|delta|`` uniform in ``effect_range``, random sign, as in the
   simulation) and the spread follows the prior's own sd-by-mean relation;
3. the members' values, with ``missing`` of them NaN, are the cohort; the victims are ``V`` members and
   the ``V`` non-members, re-measured (``+ N(0, noise^2)``, clipped to [0, 1]);
4. :func:`~mbeacon.attack.scenario.build_scenario` plans the pooled attack and the two workloads, with
   the prior itself as the beacon's prior.

Then :func:`~mbeacon.attack.evaluate.run_grid` evaluates every SVT² setting of the grid (both
variants x epsilon x c x T), plus small-count suppression and noisy counts for comparison, and
:func:`rank` picks the recommendation: among the SVT² settings whose *risk* (the highest mean AUC
over the query counts up to ``Q``, since an attacker may stop early, plus ``margin_sd`` times its sd
across repetitions) is at most the target, the highest discovery utility; settings within 0.02 of
it tie, and go to the higher random-query utility (within 0.01), then the smaller epsilon.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mbeacon.attack.evaluate import EvaluationConfig, GridConfig, run_grid
from mbeacon.attack.scenario import Scenario, build_scenario
from mbeacon.store.cohorts import CohortStore
from mbeacon.store.errors import DataError
from mbeacon.store.priors import Prior, beta_moments, load_prior, prior_names
from mbeacon.store.simulate import SimulationConfig
from mbeacon.store.simulate.model import DISEASE_MEAN_RANGE, EFFECT_RANGE, MIN_CONCENTRATION

#: The query counts at which the attack is scored (those below the configured count, and the count).
QUERY_MARKS = (10, 30, 100, 300, 1000, 3000, 10_000, 30_000)
#: The simulation's defaults: the advisor's synthetic disease and measurement follow them.
_SIMULATION = SimulationConfig()
#: Probes per block when drawing people (bounds the temporary arrays).
DRAW_BLOCK = 2048

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class AdvisorConfig:
    """What the advisor simulates and which settings it tries.

    The simulation parameters default to :class:`mbeacon.store.simulate.SimulationConfig`'s
    (2% DMPs, effects 0.1 to 0.3, re-measurement noise 0.02, 0.5% missing).
    """

    target_auc: float = 0.6
    queries: int = 1000
    seed: int = 1
    repetitions: int = 5
    margin_sd: float = 1.0
    #: Probes of the synthetic cohort (fewer when the prior or dataset has fewer, or N is large).
    probes: int = 20_000
    #: Members and non-members attacked (each at most N); the cohort itself always has N members.
    victims: int = 100
    #: The synthetic cohort holds at most this many values (N x probes); probes shrink to fit.
    max_values: int = 40_000_000
    dmp_fraction: float = _SIMULATION.dmp_fraction
    effect_range: tuple[float, float] = EFFECT_RANGE
    noise: float = _SIMULATION.noise
    missing: float = _SIMULATION.missing
    # --- the grid -------------------------------------------------------------------------------
    variants: tuple[str, ...] = ("single", "redraw")
    epsilon: tuple[float, ...] = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
    c: tuple[int, ...] = (5, 20, 50)
    threshold: tuple[int, ...] = (1, 5)
    suppression_threshold: tuple[int, ...] = (2, 5, 10)
    noisy_count_epsilon: tuple[float, ...] = (1.0, 10.0, 100.0)

    def __post_init__(self) -> None:
        if not 0.5 < self.target_auc <= 1.0:
            raise ValueError(f"target AUC must be in (0.5, 1], got {self.target_auc}")
        for name in ("queries", "repetitions", "probes", "victims", "max_values"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.margin_sd < 0:
            raise ValueError(f"margin_sd must be >= 0, got {self.margin_sd}")
        unknown = sorted(set(self.variants) - {"single", "redraw"})
        if unknown or not self.variants:
            raise ValueError(f"variants must be among single, redraw; got {', '.join(self.variants)}")
        if not (self.epsilon and self.c and self.threshold):
            raise ValueError("the SVT² grid needs at least one epsilon, c and threshold")

    @classmethod
    def quick(cls, **overrides: Any) -> AdvisorConfig:
        """``--quick``: fewer probes, victims, repetitions and settings (about a minute on 2 cores)."""
        values: dict[str, Any] = {
            "probes": 5000,
            "victims": 50,
            "repetitions": 3,
            "epsilon": (1.0, 10.0, 100.0),
            "c": (5, 50),
            "threshold": (1, 5),
            "suppression_threshold": (5,),
            "noisy_count_epsilon": (10.0,),
        }
        return cls(**{**values, **overrides})

    @property
    def query_counts(self) -> list[int]:
        return [q for q in QUERY_MARKS if q < self.queries] + [self.queries]

    def svt2_grid(self) -> GridConfig:
        return GridConfig(
            defences=[f"svt2-{v}" for v in self.variants]
            + (["suppression"] if self.suppression_threshold else []),
            epsilon=list(self.epsilon),
            c=list(self.c),
            threshold=list(self.threshold),
            suppression_threshold=list(self.suppression_threshold) or [2],
        )

    def comparison_grid(self) -> GridConfig | None:
        if not self.noisy_count_epsilon:
            return None
        return GridConfig(defences=["noisy-count"], epsilon=list(self.noisy_count_epsilon), threshold=[1])


# --- public inputs -----------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class PublicInputs:
    """Everything the advisor knows about the dataset: public metadata and the public prior."""

    dataset: str
    patients: int
    probe_ids: np.ndarray  # the dataset's probe ids (platform metadata, not values)
    prior: Prior
    prior_origin: str  # how the prior was chosen: "--prior", "config", "only prior in the store"


def choose_prior(store: Path, dataset: str, prior: str | None, service_config: Any = None) -> tuple[str, str]:
    """The prior's name and how it was chosen: ``prior`` if given; else the dataset's configured prior
    (its ``prior`` key, else ``default_prior``) when a service configuration is given; else the only
    prior in the store. Anything else is a :class:`DataError` that says what to pass."""
    if prior:
        return prior, "--prior"
    if service_config is not None:
        configured = service_config.policy(dataset).prior or service_config.default_prior
        if configured:
            return configured, "config"
    names = prior_names(store)
    if len(names) == 1:
        return names[0], "only prior in the store"
    if not names:
        raise DataError(f"store {store} has no priors: build or import one first (mbeacon prior --help)")
    raise DataError(
        f"store {store} has {len(names)} priors ({', '.join(names)}): choose one with --prior NAME "
        "(or give the service --config whose dataset policy or default_prior names it)"
    )


def public_inputs(
    store: str | Path, dataset: str, prior: str | None = None, service_config: Any = None
) -> PublicInputs:
    """The dataset's size and probe ids (metadata) and its prior; never a beta value."""
    store = Path(store)
    cohort = CohortStore(store).open(dataset)  # DataError naming the store for an unknown dataset
    patients = int(cohort.info.patients)
    probe_ids = np.asarray(cohort.probe_ids)
    name, origin = choose_prior(store, dataset, prior, service_config)
    return PublicInputs(dataset, patients, probe_ids, load_prior(store, name), origin)


# --- the synthetic cohort ----------------------------------------------------------------------------


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
    """The synthetic world of one advice: the cohort (probes x N), the victims and their labels."""

    probe_ids: np.ndarray
    cohort: np.ndarray  # probes x N, NaN missing
    victims: np.ndarray  # 2V x probes, re-measured
    labels: np.ndarray
    disease: Disease


def synthetic_cohort(inputs: PublicInputs, config: AdvisorConfig) -> SyntheticCohort:
    """Draw the synthetic cohort and victims from the public inputs (see the module doc)."""
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
    return SyntheticCohort(prior.probe_ids[rows], cohort, victims, labels, disease)


def synthetic_scenario(inputs: PublicInputs, config: AdvisorConfig) -> Scenario:
    """The evaluation scenario on a fresh synthetic cohort: the pooled attack and both workloads."""
    return scenario_for(synthetic_cohort(inputs, config), inputs, config)


def scenario_for(world: SyntheticCohort, inputs: PublicInputs, config: AdvisorConfig) -> Scenario:
    """The evaluation scenario on ``world``, with the prior itself as the beacon's prior."""
    return build_scenario(
        world.cohort,
        world.probe_ids,
        world.victims,
        world.labels,
        inputs.prior,
        queries=config.queries,
        noise_sd=config.noise,
        missing=config.missing,
        strategy="pooled",
        seed=config.seed,
        description=(
            f"synthetic cohort for {inputs.dataset}: N = {inputs.patients}, {world.cohort.shape[0]:,} probes "
            f"of prior {inputs.prior.name}, {world.disease.columns.size} DMPs, "
            f"{int(world.labels.sum())} + {int((~world.labels).sum())} victims, seed {config.seed}"
        ),
    )


# --- ranking -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """One defence setting's outcome on the synthetic scenario."""

    defence: str
    label: str
    epsilon: float | None
    c: int | None
    threshold: int
    queries: int
    auc: float  # mean over repetitions, after ``queries`` queries
    auc_sd: float
    worst_auc: float  # the highest mean AUC over the query counts up to ``queries``
    worst_auc_sd: float
    worst_queries: int
    risk: float  # worst_auc + margin_sd * worst_auc_sd
    tpr_at_1pct_fpr: float
    utility_random: float | None
    utility_discovery: float | None
    burn_per_1000: float | None
    refused: float
    meets_target: bool

    @property
    def is_svt2(self) -> bool:
        return self.defence.startswith("svt2")

    @property
    def variant(self) -> str | None:
        return self.defence.removeprefix("svt2-") if self.is_svt2 else None

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "variant": self.variant}


def candidates(rows: list[dict], config: AdvisorConfig) -> list[Candidate]:
    """One :class:`Candidate` per setting from :func:`run_grid`'s rows (one row per query count)."""
    by_setting: dict[tuple, list[dict]] = {}
    for row in rows:
        by_setting.setdefault((row["defence"], row["label"]), []).append(row)
    out = []
    for (defence, label), group in by_setting.items():
        group = sorted(group, key=lambda r: r["queries"])
        last = group[-1]
        worst = max(group, key=lambda r: (r["auc"], r["queries"]))
        risk = worst["auc"] + config.margin_sd * worst["auc_sd"]
        out.append(
            Candidate(
                defence=defence,
                label=label,
                epsilon=last["epsilon"],
                c=last["c"],
                threshold=int(last["threshold"]),
                queries=int(last["queries"]),
                auc=last["auc"],
                auc_sd=last["auc_sd"],
                worst_auc=worst["auc"],
                worst_auc_sd=worst["auc_sd"],
                worst_queries=int(worst["queries"]),
                risk=risk,
                tpr_at_1pct_fpr=last["tpr_at_1pct_fpr"],
                utility_random=last["utility_random"],
                utility_discovery=last["utility_discovery"],
                burn_per_1000=last["burn_per_1000"],
                refused=last["refused"],
                meets_target=risk <= config.target_auc,
            )
        )
    return out


#: Discovery utilities within this of the best tie (two queries in a hundred: about the measurement
#: noise of a 50-query workload) ...
DISCOVERY_TIE = 0.02
#: ... and so do random-query utilities within this of the best among those.
RANDOM_TIE = 0.01


def _utility(value: float | None) -> float:
    return 0.0 if value is None else float(value)


def _tiebreak(candidate: Candidate) -> tuple:
    """After the utilities: the smaller epsilon, the lower risk, fewer positives, the lower threshold,
    the single-threshold variant."""
    return (
        candidate.epsilon if candidate.epsilon is not None else math.inf,
        candidate.risk,
        candidate.c or 0,
        candidate.threshold,
        candidate.defence != "svt2-single",
    )


def best(pool: list[Candidate]) -> Candidate:
    """The preferred setting of ``pool``: the highest discovery utility, where those within
    :data:`DISCOVERY_TIE` of it tie; among them the highest random-query utility (ties within
    :data:`RANDOM_TIE`); then :func:`_tiebreak` (the smaller epsilon first)."""
    top = max(_utility(c.utility_discovery) for c in pool)
    tied = [c for c in pool if _utility(c.utility_discovery) >= top - DISCOVERY_TIE - 1e-12]
    top_random = max(_utility(c.utility_random) for c in tied)
    tied = [c for c in tied if _utility(c.utility_random) >= top_random - RANDOM_TIE - 1e-12]
    return min(tied, key=_tiebreak)


def preferred_order(pool: list[Candidate]) -> list[Candidate]:
    """``pool`` best first: :func:`best`, then the best of the rest, and so on."""
    rest, out = list(pool), []
    while rest:
        out.append(best(rest))
        rest.remove(out[-1])
    return out


def rank(found: list[Candidate]) -> tuple[list[Candidate], list[Candidate]]:
    """(SVT² settings best first: those meeting the target by :func:`preferred_order`, then the rest
    by risk; the comparison settings, by risk)."""
    svt2 = [c for c in found if c.is_svt2]
    good = preferred_order([c for c in svt2 if c.meets_target])
    bad = sorted((c for c in svt2 if not c.meets_target), key=lambda c: (c.risk, _tiebreak(c)))
    others = sorted((c for c in found if not c.is_svt2), key=lambda c: (c.risk, c.label))
    return good + bad, others


# --- the advice ----------------------------------------------------------------------------------------


def _toml_key(name: str) -> str:
    bare = name.replace("-", "").replace("_", "")
    return name if bare.isascii() and bare.isalnum() else f'"{name}"'


@dataclass(frozen=True, eq=False)
class Advice:
    """The advisor's result: the ranked settings, the recommendation (None if none meets the target)."""

    dataset: str
    patients: int
    prior: str
    prior_version: int | None
    prior_origin: str
    config: AdvisorConfig
    settings: list[Candidate]  # SVT², best first
    comparisons: list[Candidate]  # suppression and noisy counts
    probes: int
    victims: int
    random_queries: int
    discovery_queries: int
    description: str
    seconds: float
    warnings: list[str] = field(default_factory=list)

    @property
    def recommendation(self) -> Candidate | None:
        return self.settings[0] if self.settings and self.settings[0].meets_target else None

    @property
    def closest(self) -> Candidate | None:
        """The lowest-risk SVT² setting (the recommendation when one meets the target)."""
        return min(self.settings, key=lambda c: c.risk) if self.settings else None

    def toml(self, candidate: Candidate | None = None) -> str:
        """The service configuration table for ``candidate`` (default: the recommendation)."""
        chosen = candidate or self.recommendation
        if chosen is None or not chosen.is_svt2:
            return ""
        return "\n".join(
            [
                f"# mbeacon budget advise: attack AUC {chosen.worst_auc:.3f} +- {chosen.worst_auc_sd:.3f} "
                f"(target {self.config.target_auc:g}) at up to {self.config.queries} queries per victim,",
                f"# discovery utility {chosen.utility_discovery or 0:.3f}, random-query utility "
                f"{chosen.utility_random or 0:.3f} (synthetic cohort of N = {self.patients}, "
                f"seed {self.config.seed})",
                f"[datasets.{_toml_key(self.dataset)}]",
                'mechanism = "svt2"',
                f"epsilon = {float(chosen.epsilon or 0)!r}",
                f"c = {chosen.c}",
                f"threshold = {chosen.threshold}",
                f'variant = "{chosen.variant}"',
                f'prior = "{self.prior}"',
                "",
            ]
        )

    def as_json(self) -> dict[str, Any]:
        rec = self.recommendation
        return {
            "dataset": self.dataset,
            "patients": self.patients,
            "prior": {"name": self.prior, "version": self.prior_version, "chosen_by": self.prior_origin},
            "target_auc": self.config.target_auc,
            "queries": self.config.queries,
            "margin_sd": self.config.margin_sd,
            "seed": self.config.seed,
            "repetitions": self.config.repetitions,
            "synthetic": {
                "probes": self.probes,
                "victims_per_class": self.victims,
                "dmp_fraction": self.config.dmp_fraction,
                "effect_range": list(self.config.effect_range),
                "noise": self.config.noise,
                "missing": self.config.missing,
                "random_queries": self.random_queries,
                "discovery_queries": self.discovery_queries,
                "description": self.description,
            },
            "recommendation": rec.as_json() if rec else None,
            "toml": self.toml() or None,
            "settings": [c.as_json() for c in self.settings],
            "comparisons": [c.as_json() for c in self.comparisons],
            "warnings": self.warnings,
            "seconds": round(self.seconds, 1),
        }


def _report(on_progress: Progress | None, stage: str, done: int, total: int) -> None:
    if on_progress is not None:
        on_progress(stage, done, total)


def evaluate(
    scenario: Scenario,
    config: AdvisorConfig,
    *,
    workers: int | None = None,
    on_progress: Progress | None = None,
) -> list[Candidate]:
    """Every setting of the advisor's grid against ``scenario`` (:func:`run_grid`), as candidates."""
    grids = [g for g in (config.svt2_grid(), config.comparison_grid()) if g is not None]
    total = sum(len(g.settings()) for g in grids)
    rows: list[dict] = []
    done = 0
    for grid in grids:
        evaluation = EvaluationConfig(
            seed=config.seed,
            repetitions=config.repetitions,
            queries=config.query_counts,
            strategy="pooled",
            grid=grid,
        )
        offset = done

        def progress(finished: int, _total: int, offset: int = offset) -> None:
            _report(on_progress, "evaluating settings", offset + finished, total)

        rows += run_grid(evaluation, scenario, workers=workers, on_progress=progress)
        done += len(grid.settings())
    return candidates(rows, config)


def advise(
    store: str | Path,
    dataset: str,
    *,
    prior: str | None = None,
    service_config: Any = None,
    config: AdvisorConfig | None = None,
    workers: int | None = None,
    on_progress: Progress | None = None,
) -> Advice:
    """Recommend SVT² parameters for ``dataset`` from its public size and prior (see the module doc)."""
    config = config or AdvisorConfig()
    started = time.monotonic()
    inputs = public_inputs(store, dataset, prior, service_config)
    warnings = []
    if inputs.prior.source.strip() == f"dataset {dataset}":
        warnings.append(
            f"prior {inputs.prior.name!r} was built from dataset {dataset!r} itself: it is not public "
            "knowledge, and SVT² against it protects nobody (use a general-population prior)"
        )
    _report(on_progress, "drawing the synthetic cohort", 0, 1)
    world = synthetic_cohort(inputs, config)
    scenario = scenario_for(world, inputs, config)
    _report(on_progress, "drawing the synthetic cohort", 1, 1)
    found = evaluate(scenario, config, workers=workers, on_progress=on_progress)
    settings, comparisons = rank(found)
    if len(scenario.discovery) == 0:
        warnings.append("the synthetic cohort has no discovery queries: discovery utility is not measured")
    return Advice(
        dataset=dataset,
        patients=inputs.patients,
        prior=inputs.prior.name,
        prior_version=inputs.prior.version,
        prior_origin=inputs.prior_origin,
        config=config,
        settings=settings,
        comparisons=comparisons,
        probes=int(world.cohort.shape[0]),
        victims=int(scenario.labels.sum()),
        random_queries=len(scenario.random),
        discovery_queries=len(scenario.discovery),
        description=scenario.description,
        seconds=time.monotonic() - started,
        warnings=warnings,
    )


# --- the frontier plot -----------------------------------------------------------------------------------

#: Colours and markers of the evaluation report (:mod:`mbeacon.attack.report`), for the same defences.
STYLE = {
    "svt2-single": ("#1f77b4", "o", "SVT² single threshold"),
    "svt2-redraw": ("#17becf", "D", "SVT² redraw"),
    "suppression": ("#ff7f0e", "s", "small-count suppression"),
    "noisy-count": ("#9467bd", "^", "noisy count"),
}


def pareto(points: list[Candidate]) -> list[Candidate]:
    """The settings no other setting beats on both attack AUC (lower) and discovery utility (higher)."""
    front, best = [], -math.inf
    for c in sorted(points, key=lambda c: (c.worst_auc, -(c.utility_discovery or 0.0))):
        if (c.utility_discovery or 0.0) > best:
            front.append(c)
            best = c.utility_discovery or 0.0
    return front


def plot_frontier(advice: Advice, path: str | Path) -> Path:
    """``frontier.png``: attack AUC (x) against discovery utility (y), one point per setting.

    SVT² settings in the variant's colour (horizontal bars: the AUC's sd across repetitions; hollow
    when the setting misses the target), suppression and noisy counts in their own markers (labelled
    with their parameter), the
    target as a vertical line, the SVT² Pareto frontier as a step line and the recommendation ringed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    config = advice.config
    fig, ax = plt.subplots(figsize=(12, 6.8), layout="constrained")
    ax.axvspan(0.0, config.target_auc, color="#2ca02c", alpha=0.06, lw=0)
    ax.axvline(config.target_auc, color="#2ca02c", lw=2, ls="--", label=f"target AUC {config.target_auc:g}")
    ax.axvline(0.5, color="0.6", lw=1, ls=":")
    for name, (colour, marker, text) in STYLE.items():
        group = [c for c in advice.settings + advice.comparisons if c.defence == name]
        if not group:
            continue
        x = np.array([c.worst_auc for c in group])
        y = np.array([c.utility_discovery or 0.0 for c in group])
        sd = np.array([c.worst_auc_sd for c in group])
        ok = np.array([c.meets_target for c in group])
        if name.startswith("svt2"):
            ax.errorbar(x, y, xerr=sd, fmt="none", ecolor=colour, alpha=0.35, lw=1)
        solid = ok if name.startswith("svt2") else np.ones(len(group), dtype=bool)
        ax.scatter(x[solid], y[solid], s=55, marker=marker, color=colour, edgecolor="black", lw=0.5,
                   label=text if solid.any() else None)  # fmt: skip
        ax.scatter(x[~solid], y[~solid], s=55, marker=marker, facecolor="white", edgecolor=colour, lw=1.4,
                   label=None if solid.any() else text)  # fmt: skip
        if not name.startswith("svt2"):  # stacked labels: comparison points often coincide
            for i, (c, xi, yi) in enumerate(sorted(zip(group, x, y, strict=True), key=lambda t: t[1])):
                ax.annotate(c.label.split(" ", 1)[-1], (xi, yi), xytext=(6, -11 - 10 * (i % 3)),
                            textcoords="offset points", fontsize=8, color=colour)  # fmt: skip
    front = pareto(advice.settings)
    if front:
        fx = [c.worst_auc for c in front]
        fy = [c.utility_discovery or 0.0 for c in front]
        ax.step(fx, fy, where="post", color="0.3", lw=1, alpha=0.7, label="SVT² frontier", zorder=1)
    rec = advice.recommendation
    if rec is not None:
        ry = rec.utility_discovery or 0.0
        ax.scatter([rec.worst_auc], [ry], s=420, marker="*", color="#d62728", edgecolor="black", zorder=5,
                   label="recommended")  # fmt: skip
        ax.annotate(
            f"{rec.label}\nAUC {rec.worst_auc:.3f} ± {rec.worst_auc_sd:.3f}, discovery {ry:.2f}, "
            f"random {rec.utility_random or 0:.2f}",
            (rec.worst_auc, ry),
            xytext=(0.02, 0.97),  # the top left corner: low AUC and high utility, empty unless recommended
            textcoords="axes fraction",
            va="top",
            fontsize=10,
            arrowprops={"arrowstyle": "->", "color": "#d62728", "shrinkB": 12},
            bbox={"boxstyle": "round", "fc": "white", "ec": "#d62728"},
        )
    else:
        ax.text(
            0.98, 0.02, "no SVT² setting meets the target", transform=ax.transAxes, ha="right",
            color="#d62728", fontsize=12,
        )  # fmt: skip
    xs = [c.worst_auc + c.worst_auc_sd for c in advice.settings + advice.comparisons]
    ax.set_xlim(min(0.4, *xs) - 0.01, max(1.0, *xs) + 0.01)
    ax.set_ylim(-0.03, 1.05)
    ax.set_xlabel(
        f"attack AUC (worst over up to {config.queries} queries per victim; bars: ± sd)", fontsize=11
    )
    ax.set_ylabel("discovery utility (share of discovery queries answered right)", fontsize=11)
    ax.set_title(
        f"Privacy-utility frontier for {advice.dataset}: synthetic cohort, N = {advice.patients}, "
        f"prior {advice.prior}\n(hollow markers miss the target: AUC + {config.margin_sd:g} sd > "
        f"{config.target_auc:g}; seed {config.seed}, {config.repetitions} repetitions)",
        fontsize=11,
    )
    ax.grid(alpha=0.3)
    fig.legend(loc="outside right upper", fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path

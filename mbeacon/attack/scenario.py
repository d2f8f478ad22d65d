"""One evaluation's fixed inputs: the cohort, the victims, the attacker's plan and two researcher workloads.

Everything here is decided before any defence runs, so every defence setting answers exactly the
same queries about exactly the same people ("on the same footing"):

* the attack: ``victims x queries`` planned queries with their true counts ``alpha`` in the cohort
  and the public prior's expectation ``beta = N * prior_pi``;
* the **random** workload: ranges of random width at random probes, where the prior is usually right;
* the **discovery** workload: at the probes where the cohort differs most from the prior (its DMPs),
  "how many patients lie beyond the midpoint of the prior's and the cohort's means?", kept only where
  the prior's answer is wrong. That is why a researcher queries this beacon rather than the prior;
* the **exploration** workload: a researcher zooming in on findings asks several ranges at each of a
  few DMPs (ranges on a grid of :data:`BINS` bins, each holding the bin of the cohort's mean), all kept.
  Its queries carry their probe and bins, so Online PMW answers them from one histogram per probe
  (the prior's masses on the bins, floored at half a patient) and learns across them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from mbeacon.attack.lrt import cohort_counts, miss_probability
from mbeacon.attack.planning import QueryPlan, plan_queries
from mbeacon.store.priors import Prior, prior_from_matrix

#: Share of probes treated as the cohort's DMPs when choosing discovery queries.
DMP_FRACTION = 0.02
#: Value bins of the exploration workload's ranges and of Online PMW's histograms there.
BINS = 20
#: Exploration: DMPs explored and ranges asked at each.
EXPLORED_PROBES, RANGES_PER_PROBE = 20, 5


@dataclass(frozen=True, eq=False)
class Workload:
    """A researcher's queries: true counts and the prior's expectations (1-D, one per query)."""

    alpha: np.ndarray
    beta: np.ndarray
    #: Where each query is, for mechanisms that learn per probe (exploration only): the row of
    #: ``histograms`` (the prior's bin masses at the query's probe) and the bins ``[lo, hi)``.
    probe: np.ndarray | None = None
    lo: np.ndarray | None = None
    hi: np.ndarray | None = None
    histograms: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.alpha.shape[0])


@dataclass(frozen=True, eq=False)
class Scenario:
    """Everything the defences are compared on."""

    n: int
    labels: np.ndarray  # victims: True for members
    plan: QueryPlan
    alpha: np.ndarray  # victims x queries, true counts of the planned queries
    miss: float
    random: Workload
    discovery: Workload
    description: str = ""
    #: What an adaptive attacker (:mod:`mbeacon.attack.tracker_eval`) needs to have any range counted:
    #: the cohort (probes x patients), each prior position's cohort row (-1: absent) and the prior.
    cohort: np.ndarray | None = None
    cohort_rows: np.ndarray | None = None
    prior: Prior | None = None
    exploration: Workload | None = None
    #: The attacker's measurements (victims x the cohort's probes, NaN unknown) and their noise sd, for
    #: attackers that plan from the victims' values themselves (:mod:`mbeacon.attack.boundary`).
    profiles: np.ndarray | None = None
    noise_sd: float | None = None
    missing: float = 0.0

    @cached_property
    def beta(self) -> np.ndarray:
        """The public prior's expected count of every planned query (what SVT² compares with)."""
        return self.n * self.plan.prior_pi

    @property
    def victims(self) -> int:
        return int(self.labels.shape[0])

    @property
    def queries(self) -> int:
        return int(self.alpha.shape[1])


def build_scenario(
    cohort: np.ndarray,
    cohort_ids: np.ndarray,
    victims: np.ndarray,
    labels: np.ndarray,
    prior: Prior,
    *,
    queries: int,
    noise_sd: float,
    missing: float = 0.0,
    z: float = 2.0,
    strategy: str = "pooled",
    workload_size: tuple[int, int] = (200, 50),
    seed: int = 0,
    description: str = "",
) -> Scenario:
    """Plan the attack and the workloads on a cohort.

    ``cohort``: probes x patients (the stored values, NaN missing); ``victims``: victims x probes in
    the same probe order (the attacker's measurements); ``labels``: True for the cohort's members.
    """
    cohort = np.asarray(cohort, dtype=np.float64)
    prior_rows = prior.index(cohort_ids)
    plan = plan_queries(
        victims, prior, prior_rows, queries=queries, noise_sd=noise_sd, z=z, strategy=strategy
    )
    cohort_rows = np.full(len(prior), -1, dtype=np.int64)
    cohort_rows[prior_rows[prior_rows >= 0]] = np.flatnonzero(prior_rows >= 0)
    alpha = cohort_counts(cohort, plan, cohort_rows)
    rng = np.random.default_rng([seed, 7])  # noise-ok: evaluation workload, seeded
    n_random, n_discovery = workload_size
    return Scenario(
        n=cohort.shape[1],
        labels=np.asarray(labels, dtype=bool),
        plan=plan,
        alpha=alpha,
        miss=miss_probability(z, missing),
        random=random_workload(cohort, prior, prior_rows, n_random, rng),
        discovery=discovery_workload(cohort, prior, prior_rows, n_discovery, rng),
        description=description,
        cohort=cohort,
        cohort_rows=cohort_rows,
        prior=prior,
        exploration=exploration_workload(cohort, prior, prior_rows, rng),
        profiles=np.asarray(victims, dtype=np.float64),
        noise_sd=float(noise_sd),
        missing=float(missing),
    )


def _counts(cohort: np.ndarray, rows: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    values = cohort[rows]
    return np.sum((values >= lo[:, None]) & (values <= hi[:, None]), axis=1)


def random_workload(
    cohort: np.ndarray, prior: Prior, prior_rows: np.ndarray, size: int, rng: np.random.Generator
) -> Workload:
    """Ranges of width 0.05 to 0.3 at random probes the prior knows."""
    known = np.flatnonzero(prior_rows >= 0)
    rows = rng.choice(known, size=size)
    width = rng.uniform(0.05, 0.3, size)
    lo = rng.uniform(0.0, 1.0 - width)
    hi = lo + width
    beta = cohort.shape[1] * prior.probability(prior_rows[rows], lo, hi)
    return Workload(_counts(cohort, rows, lo, hi), beta)


def discovery_workload(
    cohort: np.ndarray, prior: Prior, prior_rows: np.ndarray, size: int, rng: np.random.Generator
) -> Workload:
    """At the cohort's DMPs, the patients beyond the midpoint between the prior's and the cohort's
    mean; only queries the prior gets wrong are kept (at most ``size``)."""
    known = np.flatnonzero(prior_rows >= 0)
    with np.errstate(all="ignore"):
        cohort_mean = np.nanmean(cohort[known], axis=1)
    prior_mean = prior.mean[prior_rows[known]]
    shift = np.nan_to_num(cohort_mean - prior_mean)
    top = max(1, int(DMP_FRACTION * known.size))
    dmps = np.argsort(-np.abs(shift), kind="stable")[:top]
    rows = known[dmps]
    mid = (cohort_mean[dmps] + prior_mean[dmps]) / 2.0
    up = shift[dmps] > 0
    lo, hi = np.where(up, mid, 0.0), np.where(up, 1.0, mid)
    n = cohort.shape[1]
    alpha = _counts(cohort, rows, lo, hi)
    beta = n * prior.probability(prior_rows[rows], lo, hi)
    wrong = (alpha >= 1) != (beta >= 1)
    keep = np.flatnonzero(wrong)
    keep = rng.permutation(keep)[:size]
    return Workload(alpha[keep], beta[keep])


def exploration_workload(
    cohort: np.ndarray,
    prior: Prior,
    prior_rows: np.ndarray,
    rng: np.random.Generator,
    *,
    probes: int = EXPLORED_PROBES,
    per_probe: int = RANGES_PER_PROBE,
) -> Workload:
    """At the ``probes`` strongest DMPs, ``per_probe`` ranges of 1 to 7 bins around the cohort's mean.

    Counts are over ``[lo, hi)`` in value (the last bin closed at 1), as the histogram's bins are.
    """
    known = np.flatnonzero(prior_rows >= 0)
    with np.errstate(all="ignore"):
        cohort_mean = np.nanmean(cohort[known], axis=1)
    shift = np.nan_to_num(cohort_mean - prior.mean[prior_rows[known]])
    dmps = np.argsort(-np.abs(shift), kind="stable")[: min(probes, known.size)]
    rows = known[dmps]
    centre = np.clip((np.nan_to_num(cohort_mean[dmps], nan=0.5) * BINS).astype(np.int64), 0, BINS - 1)
    k = rows.size
    lo = np.maximum(0, centre[:, None] - rng.integers(0, 4, (k, per_probe)))
    hi = np.minimum(BINS, centre[:, None] + 1 + rng.integers(0, 4, (k, per_probe)))
    edges = np.arange(BINS + 1) / BINS
    mass = np.diff(prior.probability(prior_rows[rows][:, None], 0.0, edges[None, 1:]), axis=1, prepend=0.0)
    n = cohort.shape[1]
    floor = 0.5 / n  # multiplicative weights cannot move mass into an empty bin
    histograms = np.maximum(np.nan_to_num(mass), floor)
    histograms /= histograms.sum(axis=1, keepdims=True)
    values = cohort[rows]
    order = rng.permutation(k * per_probe)  # the researcher's questions interleave across probes
    probe = np.repeat(np.arange(k), per_probe)[order]
    lo, hi = lo.ravel()[order], hi.ravel()[order]
    v = values[probe]
    upper = np.where(hi == BINS, np.inf, hi / BINS)
    alpha = np.sum((v >= (lo / BINS)[:, None]) & (v < upper[:, None]), axis=1)
    csum = np.concatenate([np.zeros((k, 1)), np.cumsum(histograms, axis=1)], axis=1)
    beta = n * (csum[probe, hi] - csum[probe, lo])
    return Workload(alpha, beta, probe, lo, hi, histograms)


def scenario_from_simulation(
    simulation, *, queries: int, strategy: str = "pooled", z: float = 2.0, seed: int = 0
) -> Scenario:
    """The evaluation on a :func:`mbeacon.store.simulate.simulate_arrays` run.

    Cohort: the members as stored (missing values included); victims: the re-measured members and
    non-members; prior: the empirical prior of the general-population reference sample, as an
    operator would build it with ``mbeacon prior build``.
    """
    config = simulation.config
    prior = prior_from_matrix(simulation.probe_ids, simulation.reference, name="reference")
    victims = np.vstack([simulation.members_remeasured.T, simulation.nonmembers_remeasured.T])
    labels = np.r_[np.ones(config.patients, bool), np.zeros(config.nonmembers, bool)]
    return build_scenario(
        simulation.members,
        simulation.probe_ids,
        victims,
        labels,
        prior,
        queries=queries,
        noise_sd=config.noise,
        missing=config.missing,
        z=z,
        strategy=strategy,
        seed=seed,
        description=(
            f"simulated cohort: {config.probes:,} probes, {config.patients} members, "
            f"{config.nonmembers} non-members, {config.reference} reference, noise {config.noise}, "
            f"seed {config.seed}"
        ),
    )

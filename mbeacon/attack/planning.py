"""Query planning: which probes and ranges the attacker asks about, and how rare it thinks they are.

For each victim the attacker asks about the range ``[v - m, v + m]`` around the victim's measured
value ``v`` (``m = z * noise_sd`` covers the measurement noise, so a member's own stored value falls
inside with probability ``1 - 2 Phi(-z)``), at the probes where that range is rarest. "Rarest" needs
a model of the people in the cohort, and the strategies differ only in that model:

* ``prior`` (DESIGN.md's literal attack): the public prior, i.e. the general population. A disease
  cohort differs from it at the disease's DMPs, so the ranges the prior calls rarest are mostly the
  DMPs, where every patient looks unusual and the cohort answers "yes" for members and non-members
  alike. On the default simulation this caps the attack at AUC 0.70 after 100 queries.
* ``pooled`` (default): the attacker also holds profiles of other people from the cohort's own
  population. In an evaluation that is the other victims (leave-one-out: a victim never counts
  itself, and members and non-members are pooled alike, so the pool carries no label); against a
  real beacon, any public cohort of the same disease. The rarity of a range is estimated from the
  pool, ``(count + 1/2) / (size + 1)``, ties broken by the prior. This sees through the DMPs:
  AUC 0.99 after 10 queries on the default simulation.

The public prior's mass of each range is kept either way (``prior_pi``): the beacon's SVT² compares
with ``beta = N * prior_pi``, and the attacker knows it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbeacon.store.priors import Prior

STRATEGIES = ("pooled", "prior")
#: The attackers: ``rarest`` asks this module's plan; ``tracker`` (:mod:`mbeacon.attack.tracker`)
#: searches, around the same planned intervals, for ranges holding T - 1 patients. ``flag`` and
#: ``count`` score the rarest plan's answers on the whole response of the defences whose flag the
#: answer does not determine (``answeredFrom`` and the answer; ``count`` also the released count).
#: ``boundary`` (:mod:`mbeacon.attack.boundary`) asks, for those defences, ranges at the DMPs where
#: their decision margin is just reached.
ATTACKERS = ("rarest", "tracker", "flag", "count", "boundary")
#: The attackers ``mbeacon attack live`` runs (its ``rarest`` reads whole responses, as ``flag`` and
#: ``count`` do; the boundary attacker needs a fresh account per victim to be worth running).
LIVE_ATTACKERS = ("rarest", "tracker")


@dataclass(frozen=True)
class QueryPlan:
    """The attacker's queries, victims x queries, most telling first.

    ``probes`` are positions in the prior; ``pi`` is the attacker's model of the probability that one
    person of the cohort's population falls in the range; ``prior_pi`` the public prior's.
    """

    probes: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    pi: np.ndarray
    prior_pi: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        return self.probes.shape  # type: ignore[return-value]

    def head(self, queries: int) -> QueryPlan:
        """The first ``queries`` queries of every victim."""
        return QueryPlan(*(a[:, :queries] for a in (self.probes, self.lo, self.hi, self.pi, self.prior_pi)))


def pooled_probability(
    values: np.ndarray, lo: np.ndarray, hi: np.ndarray, pool: np.ndarray | None = None
) -> np.ndarray:
    """``P(one person in [lo, hi])`` estimated from a pool of profiles, victims x probes.

    ``pool``: people x probes of the cohort's population; None uses the victims themselves, each
    victim left out of its own estimate. NaN pool entries count as outside every range.
    """
    own = pool is None
    pool = np.asarray(values if own else pool, dtype=np.float64)
    size = pool.shape[0] - (1 if own else 0)
    counts = np.empty(lo.shape, dtype=np.float64)
    step = max(1, int(2e7 // max(1, lo.shape[0] * pool.shape[0])))
    for start in range(0, lo.shape[1], step):
        cols = slice(start, start + step)
        people = pool[None, :, cols]
        inside = (people >= lo[:, None, cols]) & (people <= hi[:, None, cols])
        counts[:, cols] = inside.sum(axis=1)
    if own:
        counts -= (values >= lo) & (values <= hi)  # the victim itself
    return (counts + 0.5) / (size + 1.0)


def plan_queries(
    profiles: np.ndarray,
    prior: Prior,
    prior_rows: np.ndarray,
    *,
    queries: int,
    noise_sd: float,
    z: float = 2.0,
    strategy: str = "pooled",
    pool: np.ndarray | None = None,
    method: str = "auto",
) -> QueryPlan:
    """The ``queries`` most telling probes of each victim (rarest range first).

    ``profiles``: victims x probes (the attacker's measurements; NaN where unknown); ``prior_rows``:
    the prior position of each profile column (-1 where the prior lacks the probe: never asked);
    ``pool``: people x probes, same columns, for the ``pooled`` strategy (default: the victims).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose from {', '.join(STRATEGIES)}")
    values = np.asarray(profiles, dtype=np.float64)
    margin = max(z * noise_sd, 1e-3)
    lo, hi = np.clip(values - margin, 0.0, 1.0), np.clip(values + margin, 0.0, 1.0)
    rows = np.broadcast_to(np.asarray(prior_rows, dtype=np.int64), values.shape)
    prior_pi = prior.probability(np.where(rows >= 0, rows, 0), lo, hi, method=method)
    usable = (rows >= 0) & np.isfinite(values) & np.isfinite(prior_pi)
    model_pi = prior_pi if strategy == "prior" else pooled_probability(values, lo, hi, pool)
    rank_primary = np.where(usable, model_pi, np.inf)
    rank_secondary = np.where(usable, prior_pi, np.inf)
    k = min(queries, values.shape[1])
    pick = np.lexsort((rank_secondary, rank_primary), axis=1)[:, :k]

    def take(a: np.ndarray) -> np.ndarray:
        return np.take_along_axis(a, pick, axis=1)

    return QueryPlan(take(rows), take(lo), take(hi), take(model_pi), take(prior_pi))

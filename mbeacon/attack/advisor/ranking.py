"""The settings ranked: each one's outcome (:class:`Candidate`), and the order of preference among them.

The order (:func:`rank`), for the settings the service can serve:

1. those whose **risk** meets the target AUC (the risk is the strongest attacker's: each result row's
   ``auc`` is the higher of the rarest-range attacker's and the tracker's, and the risk is the highest
   ``auc + margin_sd * auc_sd`` over the query counts up to ``queries``) **and** whose utilities reach
   both floors (random-query utility >= ``min_random``, discovery utility >= ``min_discovery``);
2. then those meeting the AUC target only;
3. within each group, by :func:`best`: discovery utility (ties within :data:`DISCOVERY_TIE`),
   random-query utility (:data:`RANDOM_TIE`), exploration utility (:data:`EXPLORATION_TIE`), then
   the smaller epsilon, the lower risk, fewer positives, the lower T, the simpler mechanism;
4. last, the settings that miss the AUC target, by risk.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from mbeacon.attack.advisor.config import MECHANISMS, AdvisorConfig
from mbeacon.attack.defences import SERVED as SERVED_AS
from mbeacon.beacon.sanitisers import sanitiser_of
from mbeacon.beacon.sanitisers.policy import DEFAULT_RELEASE_SHARE

#: The evaluation's defence names that the service serves, and the policy's mechanism for each.
SERVED = {defence: mechanism for defence, (mechanism, _) in SERVED_AS.items()}


@dataclass(frozen=True)
class Candidate:
    """One defence setting's outcome on the synthetic scenario.

    The attack figures (``worst_*``, ``attacker``, ``auc_rarest``, ``auc_tracker``) are those at the
    query count where the risk is highest; ``auc``, the utilities, burn and refusals at ``queries``.
    """

    defence: str
    label: str
    epsilon: float | None
    c: int | None
    threshold: int
    queries: int
    auc: float  # mean over repetitions, after ``queries`` queries (the strongest attacker's)
    auc_sd: float
    worst_auc: float  # the strongest attacker's mean AUC at the riskiest query count
    worst_auc_sd: float
    worst_queries: int
    risk: float  # worst_auc + margin_sd * worst_auc_sd: the highest over the query counts
    tpr_at_1pct_fpr: float
    utility_random: float | None
    utility_discovery: float | None
    burn_per_1000: float | None
    refused: float
    meets_target: bool
    margin: float | None = None
    release_share: float | None = None
    attacker: str | None = None  # the strongest attacker at worst_queries: "rarest" or "tracker"
    auc_rarest: float | None = None  # each attacker's mean AUC at worst_queries
    auc_tracker: float | None = None
    utility_exploration: float | None = None
    meets_utility: bool = False  # random and discovery utility at or above the floors

    @property
    def mechanism(self) -> str | None:
        """The dataset policy's ``mechanism`` that serves this setting (None: not served)."""
        return SERVED.get(self.defence)

    @property
    def servable(self) -> bool:
        return self.mechanism is not None

    @property
    def is_svt2(self) -> bool:
        """Plain SVT² (``mechanism = "svt2"``), one of its two variants."""
        return self.mechanism == "svt2"

    @property
    def variant(self) -> str | None:
        """The policy's ``variant``: SVT²'s own; ``single`` for the other mechanisms (the evaluation
        runs the margin and noisy-release sanitisers with one threshold pair, and the service honours
        the key for them; Online PMW has one threshold per account and accepts only ``single``, so
        writing it keeps a ``[defaults]`` variant from being inherited); None for a comparison."""
        if self.is_svt2:
            return self.defence.removeprefix("svt2-")
        return "single" if self.servable else None

    def policy(self) -> dict[str, Any] | None:
        """The dataset policy's keys (``mbeacon.beacon.config.DatasetPolicy``) that serve this setting,
        or None for a comparison defence. ``count_epsilon`` is 0 (what was evaluated: no noisy counts
        carved out of epsilon), written out so that a ``[defaults]`` value cannot change the setting."""
        mechanism = self.mechanism
        if mechanism is None:
            return None
        out: dict[str, Any] = {
            "mechanism": mechanism,
            "epsilon": float(self.epsilon or 0.0),
            "c": int(self.c or 0),
            "threshold": int(self.threshold),
        }
        if self.variant is not None:
            out["variant"] = self.variant
        margin = float(self.margin or 0.0)
        keys = sanitiser_of(mechanism).policy_model.model_fields
        if "margin_above" in keys:
            out["margin_above"] = margin
            out["margin_below"] = margin
        if "margin" in keys:
            out["margin"] = margin
        if "release_share" in keys:
            share = self.release_share if self.release_share is not None else DEFAULT_RELEASE_SHARE
            out["release_share"] = float(share)
        out["count_epsilon"] = 0.0
        return out

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: every field, the mechanism, the variant and the policy keys."""
        return {**asdict(self), "mechanism": self.mechanism, "variant": self.variant, "policy": self.policy()}


def candidates(rows: list[dict], config: AdvisorConfig) -> list[Candidate]:
    """One :class:`Candidate` per setting from :func:`run_grid`'s rows (one row per query count)."""
    by_setting: dict[tuple, list[dict]] = {}
    for row in rows:
        by_setting.setdefault((row["defence"], row["label"]), []).append(row)
    out = []
    for (defence, label), group in by_setting.items():
        group = sorted(group, key=lambda r: r["queries"])
        last = group[-1]
        # the riskiest count: an attacker may stop early, and an AUC is not always monotone in Q
        worst = max(group, key=lambda r: (r["auc"] + config.margin_sd * r["auc_sd"], r["queries"]))
        risk = worst["auc"] + config.margin_sd * worst["auc_sd"]
        random, discovery = last["utility_random"], last["utility_discovery"]
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
                utility_random=random,
                utility_discovery=discovery,
                burn_per_1000=last["burn_per_1000"],
                refused=last["refused"],
                meets_target=risk <= config.target_auc,
                margin=last.get("margin"),
                release_share=last.get("release_share"),
                attacker=worst.get("attacker"),
                auc_rarest=worst.get("auc_rarest"),
                auc_tracker=worst.get("auc_tracker"),
                utility_exploration=last.get("utility_exploration"),
                meets_utility=_utility(random) >= config.min_random - 1e-12
                and _utility(discovery) >= config.min_discovery - 1e-12,
            )
        )
    return out


#: Discovery utilities within this of the best tie (two queries in a hundred: about the measurement
#: noise of a 50-query workload) ...
DISCOVERY_TIE = 0.02
#: ... and so do random-query utilities within this of the best among those ...
RANDOM_TIE = 0.01
#: ... and exploration utilities within this (a 100-query workload, 20 probes that share histograms).
EXPLORATION_TIE = 0.02


def _utility(value: float | None) -> float:
    return 0.0 if value is None else float(value)


def _mechanism_rank(candidate: Candidate) -> int:
    order = [*MECHANISMS, None]
    return order.index(candidate.mechanism) if candidate.mechanism in order else len(order)


def _tiebreak(candidate: Candidate) -> tuple:
    """After the utilities: the smaller epsilon, the lower risk, fewer positives, the lower threshold,
    the simpler mechanism (SVT² before its sanitisers), its single-threshold variant, the smaller
    margin and release share."""
    return (
        candidate.epsilon if candidate.epsilon is not None else math.inf,
        candidate.risk,
        candidate.c or 0,
        candidate.threshold,
        _mechanism_rank(candidate),
        candidate.defence != "svt2-single",
        candidate.margin or 0.0,
        candidate.release_share or 0.0,
        candidate.label,
    )


def _tied(pool: list[Candidate], value, tie: float) -> list[Candidate]:
    top = max(value(c) for c in pool)
    return [c for c in pool if value(c) >= top - tie - 1e-12]


def best(pool: list[Candidate]) -> Candidate:
    """The preferred setting of ``pool``: the highest discovery utility, where those within
    :data:`DISCOVERY_TIE` of it tie; among them the highest random-query utility (ties within
    :data:`RANDOM_TIE`), then the highest exploration utility (:data:`EXPLORATION_TIE`); then
    :func:`_tiebreak` (the smaller epsilon first)."""
    tied = _tied(pool, lambda c: _utility(c.utility_discovery), DISCOVERY_TIE)
    tied = _tied(tied, lambda c: _utility(c.utility_random), RANDOM_TIE)
    tied = _tied(tied, lambda c: _utility(c.utility_exploration), EXPLORATION_TIE)
    return min(tied, key=_tiebreak)


def preferred_order(pool: list[Candidate]) -> list[Candidate]:
    """``pool`` best first: :func:`best`, then the best of the rest, and so on."""
    rest, out = list(pool), []
    while rest:
        out.append(best(rest))
        rest.remove(out[-1])
    return out


def rank(found: list[Candidate]) -> tuple[list[Candidate], list[Candidate]]:
    """(The served settings best first, in the module's order; the comparison settings, by risk)."""
    served = [c for c in found if c.servable]
    corner = preferred_order([c for c in served if c.meets_target and c.meets_utility])
    safe = preferred_order([c for c in served if c.meets_target and not c.meets_utility])
    bad = sorted((c for c in served if not c.meets_target), key=lambda c: (c.risk, _tiebreak(c)))
    others = sorted((c for c in found if not c.servable), key=lambda c: (c.risk, c.label))
    return corner + safe + bad, others

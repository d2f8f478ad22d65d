"""The settings ranked: each one's outcome (:class:`Candidate`), and the order of preference among them."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from mbeacon.attack.advisor.config import AdvisorConfig


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

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: every field, and the SVT² variant."""
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

"""The advisor's result (:class:`Advice`): the ranked settings, the recommendation and its TOML table."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from mbeacon.attack.advisor.config import AdvisorConfig
from mbeacon.attack.advisor.ranking import Candidate


def _toml_key(name: str) -> str:
    bare = name.replace("-", "").replace("_", "")
    return name if bare.isascii() and bare.isalnum() else json.dumps(name)


def _toml_value(value: Any) -> str:
    """A TOML scalar: floats keep their decimal point (``10.0``), text is a basic string."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))


@dataclass(frozen=True, eq=False)
class Advice:
    """The advisor's result: the ranked settings, the recommendation (None if none meets the target)."""

    dataset: str
    patients: int
    prior: str
    prior_version: int | None
    prior_origin: str
    config: AdvisorConfig
    settings: list[Candidate]  # the settings the service can serve, best first
    comparisons: list[Candidate]  # suppression, the prior's answers alone, noisy counts
    probes: int
    victims: int
    random_queries: int
    discovery_queries: int
    description: str
    seconds: float
    warnings: list[str] = field(default_factory=list)
    #: Synthetic reference people the beacon's prior was re-estimated from (0: the public prior, exact).
    reference: int = 0

    @property
    def recommendation(self) -> Candidate | None:
        return self.settings[0] if self.settings and self.settings[0].meets_target else None

    @property
    def closest(self) -> Candidate | None:
        """The lowest-risk served setting."""
        return min(self.settings, key=lambda c: c.risk) if self.settings else None

    def toml(self, candidate: Candidate | None = None) -> str:
        """The service configuration table for ``candidate`` (default: the recommendation): the keys
        of :meth:`Candidate.policy` and the prior, to paste verbatim."""
        chosen = candidate or self.recommendation
        policy = chosen.policy() if chosen is not None else None
        if chosen is None or policy is None:
            return ""
        utility = "meets" if chosen.meets_utility else "misses"
        lines = [
            f"# mbeacon budget advise: attack AUC {chosen.worst_auc:.3f} +- {chosen.worst_auc_sd:.3f} "
            f"({chosen.attacker or 'strongest'} attacker; target {self.config.target_auc:g}) at up to "
            f"{self.config.queries} queries per victim,",
            f"# discovery utility {chosen.utility_discovery or 0:.3f}, random-query utility "
            f"{chosen.utility_random or 0:.3f}, exploration utility {chosen.utility_exploration or 0:.3f} "
            f"({utility} the floors {self.config.min_discovery:g} / {self.config.min_random:g}),",
            f"# synthetic cohort of N = {self.patients}, seed {self.config.seed}",
            f"[datasets.{_toml_key(self.dataset)}]",
        ]
        lines += [f"{key} = {_toml_value(value)}" for key, value in policy.items()]
        lines += [f"prior = {_toml_value(self.prior)}", ""]
        return "\n".join(lines)

    def policy(self, candidate: Candidate | None = None) -> dict[str, Any] | None:
        """The dataset policy's keys for ``candidate`` (default: the recommendation), prior included."""
        chosen = candidate or self.recommendation
        policy = chosen.policy() if chosen is not None else None
        return None if policy is None else {**policy, "prior": self.prior}

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: the content of ``advice.json`` (less the frontier plot's path)."""
        rec = self.recommendation
        return {
            "dataset": self.dataset,
            "patients": self.patients,
            "prior": {"name": self.prior, "version": self.prior_version, "chosen_by": self.prior_origin},
            "target_auc": self.config.target_auc,
            "queries": self.config.queries,
            "margin_sd": self.config.margin_sd,
            "min_random": self.config.min_random,
            "min_discovery": self.config.min_discovery,
            "mechanisms": list(self.config.mechanisms),
            "max_epsilon": self.config.max_epsilon,
            "seed": self.config.seed,
            "repetitions": self.config.repetitions,
            "synthetic": {
                "probes": self.probes,
                "reference_people": self.reference,
                "victims_per_class": self.victims,
                "dmp_fraction": self.config.dmp_fraction,
                "effect_range": list(self.config.effect_range),
                "noise": self.config.noise,
                "missing": self.config.missing,
                "random_queries": self.random_queries,
                "discovery_queries": self.discovery_queries,
                "description": self.description,
            },
            "recommendation": rec.to_json() if rec else None,
            "policy": self.policy(),
            "toml": self.toml() or None,
            "settings": [c.to_json() for c in self.settings],
            "comparisons": [c.to_json() for c in self.comparisons],
            "warnings": self.warnings,
            "seconds": round(self.seconds, 1),
        }

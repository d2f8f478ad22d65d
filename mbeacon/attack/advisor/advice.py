"""The advisor's result (:class:`Advice`): the ranked settings, the recommendation and its TOML table."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mbeacon.attack.advisor.config import AdvisorConfig
from mbeacon.attack.advisor.ranking import Candidate


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
            "recommendation": rec.to_json() if rec else None,
            "toml": self.toml() or None,
            "settings": [c.to_json() for c in self.settings],
            "comparisons": [c.to_json() for c in self.comparisons],
            "warnings": self.warnings,
            "seconds": round(self.seconds, 1),
        }

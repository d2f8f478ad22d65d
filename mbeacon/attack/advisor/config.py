"""What the advisor simulates and which settings it tries (:class:`AdvisorConfig`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mbeacon.attack.evaluate import GridConfig
from mbeacon.beacon.sanitisers import SANITISERS
from mbeacon.store.simulate import SimulationConfig
from mbeacon.store.simulate.model import EFFECT_RANGE

#: The query counts at which the attack is scored (those below the configured count, and the count).
QUERY_MARKS = (10, 30, 100, 300, 1000, 3000, 10_000, 30_000)
#: The mechanisms the service serves (the dataset policy's ``mechanism``), in the order of preference
#: among otherwise equal settings: the simpler mechanism first.
#: (The cohort's shared state has no model in the advisor's evaluation yet: per-account ones only.)
MECHANISMS = tuple(name for name, s in SANITISERS.items() if s.spends_budget and not s.shared)
#: The simulation's defaults: the advisor's synthetic disease and measurement follow them.
_SIMULATION = SimulationConfig()


@dataclass(frozen=True)
class AdvisorConfig:
    """What the advisor simulates and which settings it tries.

    The simulation parameters default to :class:`mbeacon.store.simulate.SimulationConfig`'s
    (2% DMPs, effects 0.1 to 0.3, re-measurement noise 0.02, 0.5% missing).

    The grid: plain SVT² (``svt2``) over ``variants x epsilon x c x threshold``; the sanitisers built
    on SVT² over a smaller ``sanitiser_epsilon x sanitiser_c x threshold x margin`` (x
    ``release_share`` for ``svt2-noisy`` and ``online-pmw``), each margin a number of patients
    (``svt2-margin`` skips 0, where it is plain SVT²). ``max_epsilon`` drops every larger epsilon.
    """

    target_auc: float = 0.6
    queries: int = 1000
    seed: int = 1
    repetitions: int = 5
    margin_sd: float = 1.0
    #: Settings meeting the AUC target and both utility floors rank first (issue targets: a setting
    #: at least as good as the public prior on ordinary questions that still finds discoveries).
    min_random: float = 0.97
    min_discovery: float = 0.75
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
    mechanisms: tuple[str, ...] = MECHANISMS
    variants: tuple[str, ...] = ("single", "redraw")
    epsilon: tuple[float, ...] = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
    c: tuple[int, ...] = (5, 20, 50)
    threshold: tuple[int, ...] = (1, 5)
    sanitiser_epsilon: tuple[float, ...] = (3.0, 10.0, 30.0)
    sanitiser_c: tuple[int, ...] = (20, 50)
    margin: tuple[float, ...] = (0.0, 20.0, 40.0, 60.0)
    release_share: tuple[float, ...] = (1 / 3,)
    max_epsilon: float | None = None
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
        for name in ("min_random", "min_discovery"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        unknown = sorted(set(self.mechanisms) - set(MECHANISMS))
        if unknown or not self.mechanisms:
            raise ValueError(
                f"mechanisms must be among {', '.join(MECHANISMS)}; "
                f"got {', '.join(self.mechanisms) or 'none'}"
            )
        unknown = sorted(set(self.variants) - {"single", "redraw"})
        if unknown or not self.variants:
            raise ValueError(f"variants must be among single, redraw; got {', '.join(self.variants)}")
        if not self.threshold:
            raise ValueError("the grid needs at least one threshold")
        if "svt2" in self.mechanisms and not (self._capped(self.epsilon) and self.c):
            raise ValueError("the SVT² grid needs at least one epsilon (at most max_epsilon) and one c")
        sanitisers = set(self.mechanisms) - {"svt2"}
        if sanitisers and not (self._capped(self.sanitiser_epsilon) and self.sanitiser_c):
            raise ValueError(
                "the sanitisers' grid needs at least one sanitiser epsilon (at most max_epsilon) and one c"
            )
        if sanitisers & {"svt2-noisy", "online-pmw"} and not (self.margin and self.release_share):
            raise ValueError("svt2-noisy and online-pmw need at least one margin and one release share")
        if "svt2-margin" in sanitisers and not any(m > 0 for m in self.margin):
            raise ValueError("svt2-margin needs a margin above 0 (at 0 it is plain SVT²)")
        if any(m < 0 for m in self.margin) or not all(0 < r < 1 for r in self.release_share):
            raise ValueError("margins must be >= 0 and release shares in (0, 1)")

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
            "sanitiser_epsilon": (10.0,),
            "sanitiser_c": (50,),
            "margin": (0.0, 60.0),
            "suppression_threshold": (5,),
            "noisy_count_epsilon": (10.0,),
        }
        return cls(**{**values, **overrides})

    @property
    def query_counts(self) -> list[int]:
        return [q for q in QUERY_MARKS if q < self.queries] + [self.queries]

    def _capped(self, epsilons: tuple[float, ...]) -> list[float]:
        return [e for e in epsilons if self.max_epsilon is None or e <= self.max_epsilon]

    def grids(self) -> list[GridConfig]:
        """The grids of the settings the service can serve, one per group of mechanisms that share
        parameters (each grid seeds its settings by their index in it, as :func:`run_grid` does)."""
        out = []
        if "svt2" in self.mechanisms:
            out.append(
                GridConfig(
                    defences=[f"svt2-{v}" for v in self.variants],
                    epsilon=self._capped(self.epsilon),
                    c=list(self.c),
                    threshold=list(self.threshold),
                )
            )
        common = {
            "epsilon": self._capped(self.sanitiser_epsilon),
            "c": list(self.sanitiser_c),
            "threshold": list(self.threshold),
            "release_share": list(self.release_share),
        }
        if "svt2-margin" in self.mechanisms:
            margins = [m for m in self.margin if m > 0]
            out.append(GridConfig(defences=["svt2-margin"], margin=margins, **common))
        noisy = [m for m in ("svt2-noisy", "online-pmw") if m in self.mechanisms]
        if noisy:
            out.append(GridConfig(defences=noisy, margin=list(self.margin), **common))
        return out

    def comparison_grids(self) -> list[GridConfig]:
        """Defences shown beside the served ones: suppression, the prior's own answers, noisy counts."""
        out = [
            GridConfig(
                defences=(["suppression"] if self.suppression_threshold else []) + ["prior-only"],
                threshold=list(self.threshold),
                suppression_threshold=list(self.suppression_threshold) or [2],
            )
        ]
        if self.noisy_count_epsilon:
            out.append(
                GridConfig(defences=["noisy-count"], epsilon=list(self.noisy_count_epsilon), threshold=[1])
            )
        return out

"""What the advisor simulates and which settings it tries (:class:`AdvisorConfig`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mbeacon.attack.evaluate import GridConfig
from mbeacon.store.simulate import SimulationConfig
from mbeacon.store.simulate.model import EFFECT_RANGE

#: The query counts at which the attack is scored (those below the configured count, and the count).
QUERY_MARKS = (10, 30, 100, 300, 1000, 3000, 10_000, 30_000)
#: The simulation's defaults: the advisor's synthetic disease and measurement follow them.
_SIMULATION = SimulationConfig()


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

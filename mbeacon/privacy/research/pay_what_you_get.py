"""Pay-what-you-get (Durfee and Rogers §7): the budget of repeated unknown-domain top-k queries, where
a query that returns ``j`` items costs ``j + 1`` bounded-range units."""

from __future__ import annotations

from dataclasses import dataclass, field

from mbeacon.privacy import validation
from mbeacon.privacy.accounting import bounded_range_composition
from mbeacon.privacy.noise import RNGLike
from mbeacon.privacy.research.selection import TopKRelease, unknown_domain_top_k
from mbeacon.privacy.validation import integer, positive

__all__ = ["PayWhatYouGet", "PayWhatYouGetExhausted"]


class PayWhatYouGetExhausted(RuntimeError):
    """Raised when a query would exceed a pay-what-you-get budget."""


@dataclass
class PayWhatYouGet:
    """Pay-what-you-get budget for repeated unknown-domain top-k queries (Durfee and Rogers §7).

    ``k_star`` bounds the total ``epsilon``-BR units (items returned + 1 per query) and ``l_star``
    the number of queries. The whole interaction is ``(epsilon_total, l_star*delta + delta_prime)``
    -DP with ``epsilon_total = bounded_range_composition(k_star, epsilon, delta_prime)``.
    """

    k_star: int
    l_star: int
    epsilon: float
    delta: float
    delta_prime: float = 1e-9
    units_left: int = field(init=False)
    queries_left: int = field(init=False)

    def __post_init__(self) -> None:
        # the least budget that can pay for one query returning one item is 2 units
        self.k_star = integer(self.k_star, "k_star", minimum=2)
        self.l_star = integer(self.l_star, "l_star")
        self.epsilon = positive(self.epsilon, "epsilon")
        self.delta = validation.delta(self.delta)
        self.delta_prime = validation.delta(self.delta_prime, "delta_prime")
        self.units_left = self.k_star
        self.queries_left = self.l_star

    @property
    def epsilon_total(self) -> float:
        return bounded_range_composition(self.k_star, self.epsilon, self.delta_prime)

    @property
    def delta_total(self) -> float:
        return self.l_star * self.delta + self.delta_prime

    def query(self, histogram: dict, k: int, kbar: int, rng: RNGLike = None) -> TopKRelease:
        """Run one Algorithm 2 query, asking for at most what the budget can still pay for."""
        k, kbar = integer(k, "k"), integer(kbar, "kbar")
        if self.queries_left < 1 or self.units_left < 2:
            raise PayWhatYouGetExhausted(
                f"pay-what-you-get budget exhausted: {self.units_left} units and "
                f"{self.queries_left} queries left"
            )
        k = min(k, self.units_left - 1)
        release = unknown_domain_top_k(histogram, k, kbar, self.epsilon, self.delta, rng=rng)
        self.units_left -= len(release) + 1
        self.queries_left -= 1
        return release

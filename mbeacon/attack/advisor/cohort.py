"""The cohort's budget and quotas, from what an ethics board is promised and who will ask.

For ``cohort-pmw`` the promise is about the patients, whoever asks: the best attack of any coalition
on the cohort's whole output has ROC area at most ``e^eps / (1 + e^eps)``
(:mod:`mbeacon.privacy.tradeoff`). So the cohort's epsilon follows from the largest attack AUC the
operator will promise (``epsilon = ln(auc / (1 - auc))``, the largest that keeps it), not from an
evaluation. What remains is how to spend it:

* ``c``, the positives the cohort pays for in all: each released count carries Laplace noise of scale
  ``c / eps3``, so ``c`` is the largest number whose released counts stay within a chosen share of
  the cohort (``count_error``, default 10% of the patients) -- a count less precise than that does not
  tell a researcher much, and a larger ``c`` only makes every count worse;
* ``quota``, one budget holder's share of ``c``: ``ceil(c / researchers)``, so the expected researchers
  can each make their share of discoveries and no one identity can spend the others' share.

This rule of thumb sets the noise, not the utility: the evaluation measures what the setting answers
(``mbeacon attack evaluate`` with a ``cohort-pmw`` grid, docs/attack.md).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from mbeacon.beacon.sanitisers.policy import DEFAULT_RELEASE_SHARE, MAX_C
from mbeacon.privacy.tradeoff import AttackBound, best_attack


@dataclass(frozen=True)
class CohortAdvice:
    """A cohort-pmw setting and what it promises."""

    patients: int
    researchers: int
    epsilon: float
    c: int
    quota: int
    release_share: float
    count_noise_scale: float  # the Laplace scale of a released count (patients)
    bound: AttackBound

    def policy(self) -> dict:
        """The dataset policy's keys, to paste under ``[datasets.NAME]``."""
        return {"mechanism": "cohort-pmw", "epsilon": self.epsilon, "c": self.c, "quota": self.quota,
                "release_share": self.release_share, "threshold": 1}  # fmt: skip

    def to_json(self) -> dict:
        out = asdict(self)
        out["bound"] = self.bound.to_json()
        out["policy"] = self.policy()
        return out


def epsilon_for_auc(max_auc: float) -> float:
    """The largest epsilon whose best possible attack has ROC area at most ``max_auc``."""
    if not 0.5 < max_auc < 1.0:
        raise ValueError(f"the largest attack AUC must be in (0.5, 1), got {max_auc}")
    return math.log(max_auc / (1.0 - max_auc))


def advise_cohort(
    patients: int,
    researchers: int,
    *,
    max_auc: float = 0.6,
    count_error: float = 0.1,
    release_share: float = DEFAULT_RELEASE_SHARE,
) -> CohortAdvice:
    """The cohort-pmw setting for ``patients`` patients and ``researchers`` expected budget holders."""
    if patients < 1 or researchers < 1:
        raise ValueError("patients and researchers must be at least 1")
    if not 0.0 < count_error <= 1.0:
        raise ValueError(f"count_error is a share of the cohort, in (0, 1], got {count_error}")
    # rounded down to 4 decimals: the policy's epsilon never exceeds the one the bound allows
    epsilon = math.floor(epsilon_for_auc(max_auc) * 1e4) / 1e4
    epsilon3 = release_share * epsilon
    c = min(MAX_C, max(1, math.floor(count_error * patients * epsilon3)))  # at most what a policy takes
    quota = max(1, math.ceil(c / researchers))
    return CohortAdvice(
        patients, researchers, epsilon, c, quota, release_share, c / epsilon3, best_attack(epsilon)
    )

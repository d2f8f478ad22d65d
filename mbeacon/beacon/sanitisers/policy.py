"""The keys every dataset policy has, whatever sanitiser serves it.

Each sanitiser module declares its own policy model on top of :class:`PolicyBase` (its mechanism's
name as a literal ``mechanism``, its own keys, its own checks); :mod:`mbeacon.beacon.config` joins
them into one union discriminated by ``mechanism``, so a key is validated by the model of the
mechanism that reads it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mbeacon.beacon.holders import canonical_name, is_name

Tier = Literal["PUBLIC", "REGISTERED", "CONTROLLED"]
TIERS: tuple[Tier, ...] = ("PUBLIC", "REGISTERED", "CONTROLLED")
#: The least epsilon the test of a sanitiser may get: below it the noise scales overflow the integer
#: noise sampler (an epsilon of 1e-300 gave garbage thresholds), and answers would be noise.
MIN_SVT_EPSILON = 1e-6
#: ``release_share`` when a releasing sanitiser's policy leaves it out: a third of epsilon pays the
#: noisy counts, two thirds the test (the evaluation's and the advisor's default too).
DEFAULT_RELEASE_SHARE = 1 / 3
#: The most positives a policy may give (a dataset's ``c``).
MAX_C = 100_000


def default_hint(mechanism: str) -> str:
    """Said after a refusal by the default mechanism, which a table that names none gets."""
    if mechanism != "cohort-pmw":
        return ""
    return ' (cohort-pmw is the default mechanism; write mechanism = "svt2" for per-account SVT²)'


class PolicyBase(BaseModel):
    """How one dataset is protected and who may query it: the keys common to every mechanism."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mechanism: str
    allow_unprotected: bool = False
    epsilon: float = Field(1.0, gt=0, le=100, allow_inf_nan=False)
    c: int = Field(5, ge=1, le=MAX_C)
    threshold: int = Field(1, ge=1)
    variant: Literal["single", "redraw"] = "single"
    scope: Literal["user", "group", "global"] = "user"
    on_exhausted: Literal["refuse", "prior"] = "refuse"
    tier: Tier = "REGISTERED"
    #: A CONTROLLED dataset's grants (a data access committee's decision): the ControlledAccessGrants
    #: visa value (a URL) that opens it to a signed-in researcher, and the API-key users it is open to.
    #: With either set, only they may query it; unset, every user of tier CONTROLLED may.
    grant: str | None = Field(None, min_length=1, max_length=2048)
    granted_users: tuple[str, ...] = ()
    prior: str | None = None
    count_epsilon: float = Field(0.0, ge=0, allow_inf_nan=False)
    #: The most samples of one patient counted (the sensitivity); None: the bound recorded at ingest
    #: (see mbeacon.beacon.contribution).
    contribution_bound: int | None = Field(None, ge=1, le=10_000)

    @field_validator("granted_users")
    @classmethod
    def _user_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        spelled = tuple(canonical_name(n) for n in names)  # one spelling, as the ledger keeps names
        wrong = [n for n, s in zip(names, spelled, strict=True) if not is_name(s)]
        if wrong:
            raise ValueError(f"granted_users: {wrong[0][:70]!r} is not a user name")
        return spelled

    @model_validator(mode="after")
    def _grants(self) -> PolicyBase:
        if (self.grant is not None or self.granted_users) and self.tier != "CONTROLLED":
            raise ValueError(
                'grant and granted_users name who may query a CONTROLLED dataset: set tier = "CONTROLLED"'
            )
        return self

    @model_validator(mode="after")
    def _epsilon_parts(self) -> PolicyBase:
        if self.count_epsilon >= self.epsilon:
            raise ValueError("count_epsilon is carved out of epsilon and must be smaller than it")
        if self.epsilon - self.count_epsilon < MIN_SVT_EPSILON:
            raise ValueError(
                f"epsilon - count_epsilon (the SVT² part) must be at least {MIN_SVT_EPSILON:g}, "
                f"not {self.epsilon - self.count_epsilon:g}"
            )
        return self

    @property
    def effective_release_share(self) -> float:
        """epsilon3 / epsilon: the share of epsilon the mechanism's released counts cost (0 here)."""
        return 0.0


class ReleasingPolicy(PolicyBase):
    """A mechanism whose TOPs release their own noisy count, paid by ``release_share`` (epsilon3)."""

    #: The share of epsilon spent on the noisy counts that answer TOPs (epsilon3).
    release_share: float | None = Field(None, gt=0, lt=1, allow_inf_nan=False)

    @model_validator(mode="after")
    def _releasing(self) -> ReleasingPolicy:
        if self.count_epsilon > 0:
            raise ValueError(
                f"count_epsilon must be 0 with mechanism {self.mechanism!r}: its TOP answers release "
                "their own noisy count, paid by release_share" + default_hint(self.mechanism)
            )
        if self.epsilon * (1 - self.effective_release_share) < MIN_SVT_EPSILON:
            raise ValueError(
                f"epsilon * (1 - release_share) (the SVT² part) must be at least {MIN_SVT_EPSILON:g}"
            )
        return self

    @property
    def effective_release_share(self) -> float:
        """epsilon3 / epsilon: ``release_share``, or :data:`DEFAULT_RELEASE_SHARE`."""
        return DEFAULT_RELEASE_SHARE if self.release_share is None else self.release_share

"""Schema-only models of what the service says about privacy: a dataset's published protection and
guarantee, and a budget holder's budget (:mod:`mbeacon.api.schemas` has the envelopes)."""

# The models mirror the Beacon v2 wire format, whose field names are camelCase.
# ruff: noqa: N815

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from mbeacon.api.schemas_types import (
    AtLeastOne,
    Count,
    Epsilon,
    Mechanism,
    OnExhausted,
    Scope,
    Spent,
    Variant,
)
from mbeacon.beacon.config import Tier


class CohortBudget(BaseModel):
    """A cohort's shared budget (`cohort-pmw`): every holder's positives come out of it."""

    positivesUsed: Count = Field(description="The cohort's positives spent by every holder together.")
    positivesTotal: AtLeastOne = Field(description="c: the cohort's positives in all.")
    epsilonSpent: Spent = Field(description="The cohort's privacy loss so far, whoever asked.")
    epsilonTotal: Epsilon = Field(description="The cohort's whole privacy budget.")


class Budget(BaseModel):
    """A budget holder's privacy budget on one dataset."""

    positivesUsed: Count = Field(description="Answers taken from the data so far (SVT² positives).")
    positivesTotal: AtLeastOne = Field(
        description="c: the number of answers the data may give in all (`cohort-pmw`: the holder's quota "
        "of the cohort's positives)."
    )
    epsilonSpent: Spent = Field(description="Privacy loss spent so far (`cohort-pmw`: the cohort's).")
    epsilonTotal: Epsilon = Field(description="The whole privacy budget (epsilon).")
    cohort: CohortBudget | None = Field(
        None, description="`cohort-pmw`: the cohort's shared budget, which the quota is a share of."
    )


class ExhaustedBudget(Budget):
    """Only with 429 for an exhausted privacy budget: the dataset and its budget."""

    dataset: str = Field(description="The dataset whose budget is exhausted.")


class AccountParameters(BaseModel):
    """The public SVT² parameters of a budget account (frozen when it opened)."""

    mechanism: Mechanism = Field(
        description="`svt2`, `svt2-margin` (SVT² with decision margins), `svt2-noisy` (a TOP answered "
        "by a noisy count), `online-pmw` (Online Private Multiplicative Weights started at the prior), "
        "or `none`: unprotected raw answers (evaluations only)."
    )
    epsilon: Epsilon = Field(description="The whole privacy budget of a budget holder.")
    epsilon1: Spent = Field(description="Epsilon of the noisy threshold pair.")
    epsilon2: Spent = Field(description="Epsilon of the query noise.")
    countEpsilon: Spent = Field(description="Part of epsilon spent on noisy counts (0: no counts).")
    c: AtLeastOne = Field(description="Positives: how many answers the data may give per budget holder.")
    threshold: AtLeastOne = Field(
        description="T: a dataset answers yes when at least T patients are in the range."
    )
    variant: Variant
    sensitivity: float = Field(
        1.0,
        ge=1,
        description="How much one patient can move a count: the dataset's contribution bound "
        "(the most samples of one patient it counts) when the account opened.",
    )
    marginAbove: float = Field(
        0.0, ge=0, description="`svt2-margin`/`svt2-noisy`: patients above T a TOP needs (0: SVT²'s test)."
    )
    marginBelow: float = Field(
        0.0, ge=0, description="`svt2-margin`/`svt2-noisy`: patients below T a TOP needs (0: SVT²'s test)."
    )
    epsilon3: Spent = Field(
        0.0, description="`svt2-noisy`, `online-pmw`: epsilon of the noisy counts that answer TOPs."
    )
    margin: float = Field(
        0.0, ge=0, description="`online-pmw`: patients of disagreement with the synthetic answer a TOP needs."
    )
    quota: int = Field(
        0, ge=0, description="`cohort-pmw`: the most of the cohort's c positives one budget holder may spend."
    )


class BestAttack(BaseModel):
    """The best membership attack the trade-off function of an epsilon-DP output allows, whoever asks."""

    epsilon: Spent
    maxAuc: float = Field(ge=0.5, le=1, description="The largest ROC area of any attack: e^eps/(1+e^eps).")
    maxTprAt01PctFpr: float = Field(ge=0, le=1, description="The highest true-positive rate at 0.1% FPR.")
    maxTprAt1PctFpr: float = Field(ge=0, le=1, description="The highest true-positive rate at 1% FPR.")


class Guarantee(BaseModel):
    """What the dataset's protection promises, and to whom."""

    unit: Literal["cohort", "budget holder", "none"] = Field(
        description="`cohort`: one budget for the patients, whoever asks (any coalition of accounts); "
        "`budget holder`: per account, so k holders together compose to k times epsilon; `none`: unprotected."
    )
    epsilonTotal: Epsilon | None = None
    epsilonSpent: Spent | None = None
    positivesUsed: Count | None = None
    positivesTotal: AtLeastOne | None = None
    quota: int | None = None
    bestAttack: BestAttack | None = Field(None, description="`cohort`: the bound on any coalition's attack.")
    bestAttackPerHolder: BestAttack | None = Field(
        None, description="`budget holder`: the bound on one holder's attack (not on a coalition's)."
    )


class DatasetPrivacy(AccountParameters):
    """The published protection of a dataset (never its noisy thresholds)."""

    scope: Scope = Field(description="Who shares one budget.")
    onExhausted: OnExhausted = Field(description="What happens once the c positives are spent.")
    tier: Tier = Field(description="The tier a caller needs to see and query the dataset.")
    guarantee: Guarantee


class BudgetDetail(Budget):
    budgetHolder: str = Field(description="`user:NAME`, `group:NAME`, `global` or `anonymous`.")
    scope: Scope
    onExhausted: OnExhausted
    mechanism: Mechanism
    epsilon1: Spent
    epsilon2: Spent
    countEpsilon: Spent
    threshold: AtLeastOne
    variant: Variant
    sensitivity: float = Field(
        1.0, ge=1, description="The dataset's contribution bound this account's noise was drawn for."
    )
    marginAbove: float = Field(
        0.0, ge=0, description="`svt2-margin`/`svt2-noisy`: patients above T a TOP needs (0: SVT²'s test)."
    )
    marginBelow: float = Field(
        0.0, ge=0, description="`svt2-margin`/`svt2-noisy`: patients below T a TOP needs (0: SVT²'s test)."
    )
    epsilon3: Spent = Field(
        0.0, description="`svt2-noisy`, `online-pmw`: epsilon of the noisy counts that answer TOPs."
    )
    margin: float = Field(
        0.0, ge=0, description="`online-pmw`: patients of disagreement with the synthetic answer a TOP needs."
    )
    quota: int = Field(0, ge=0, description="`cohort-pmw`: the holder's share of the cohort's positives.")


class CallerBudgets(BaseModel):
    user: str = Field(description="The caller (`anonymous` without a key).")
    tier: Tier
    budgets: dict[str, BudgetDetail]

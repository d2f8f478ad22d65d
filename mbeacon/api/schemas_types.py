"""The value types the response models share: counts, budgets, the policy's choices, URIs."""

from __future__ import annotations

from typing import Annotated, Literal, TypeVar

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from mbeacon.beacon.config import ServiceConfig
from mbeacon.beacon.sanitisers.policy import PolicyBase
from mbeacon.beacon.sanitisers.registry import MechanismName
from mbeacon.beacon.wire import BETA_MAX, BETA_MIN, PRODUCTION_STATUS

T = TypeVar("T")
Maybe = T | SkipJsonSchema[None]
"""A field a response may leave out (but never sends as null)."""

Count = Annotated[int, Field(ge=0)]
AtLeastOne = Annotated[int, Field(ge=1)]
Epsilon = Annotated[float, Field(gt=0)]
Spent = Annotated[float, Field(ge=0)]
Beta = Annotated[float, Field(ge=BETA_MIN, le=BETA_MAX)]
Uri = Annotated[str, Field(json_schema_extra={"format": "uri"})]

Mechanism = MechanismName
Variant = PolicyBase.model_fields["variant"].annotation
Scope = PolicyBase.model_fields["scope"].annotation
OnExhausted = PolicyBase.model_fields["on_exhausted"].annotation
Environment = ServiceConfig.model_fields["environment"].annotation
ProductionStatus = Literal[tuple(dict.fromkeys(PRODUCTION_STATUS.values()))]  # type: ignore[valid-type]

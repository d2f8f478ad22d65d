"""The served sanitisers by name: the one place a mechanism's name is looked up.

Adding a sanitiser is one module (a :class:`~mbeacon.beacon.sanitisers.base.Sanitiser` and its policy
model) and one line in :data:`SANITISERS`; see docs/sanitisers.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from mbeacon.beacon.sanitisers.base import Sanitiser
from mbeacon.beacon.sanitisers.cohort_pmw import CohortPMW
from mbeacon.beacon.sanitisers.none import Unprotected
from mbeacon.beacon.sanitisers.online_pmw import OnlinePMW
from mbeacon.beacon.sanitisers.params import AccountParams
from mbeacon.beacon.sanitisers.policy import PolicyBase
from mbeacon.beacon.sanitisers.svt2 import SVT2
from mbeacon.beacon.sanitisers.svt2_margin import SVT2Margin
from mbeacon.beacon.sanitisers.svt2_noisy import SVT2Noisy

#: Every served mechanism, by the name a policy's ``mechanism`` gives.
SANITISERS: dict[str, Sanitiser] = {
    s.name: s for s in (SVT2(), SVT2Margin(), SVT2Noisy(), OnlinePMW(), CohortPMW(), Unprotected())
}
#: A policy that names no mechanism protects the cohort as a whole (docs/privacy.md, "The cohort's
#: accountant"): an operator who writes only epsilon, c and T makes a promise to the patients.
DEFAULT_MECHANISM = CohortPMW.name
if TYPE_CHECKING:
    MechanismName = str
else:  # the served names as a type: the API's schemas offer exactly these
    MechanismName = Literal[tuple(SANITISERS)]


def sanitiser_of(what: str | PolicyBase) -> Sanitiser:
    """The sanitiser of a mechanism name, a policy or an account's parameters."""
    name = what if isinstance(what, str) else what.mechanism
    try:
        return SANITISERS[name]
    except KeyError:
        raise ValueError(f"unknown mechanism {name!r}; choose from {', '.join(SANITISERS)}") from None


def mechanism_of(table: Any) -> str:
    """The mechanism a policy table names (the default when it names none): the union's tag."""
    if isinstance(table, Mapping):
        return str(table.get("mechanism", DEFAULT_MECHANISM))
    return str(getattr(table, "mechanism", DEFAULT_MECHANISM))


def check_keys(table: Any) -> Any:
    """Refuse, before validation, a key that belongs to another mechanism's policy and is set there,
    naming the mechanisms that read it: a margin or share the mechanism would ignore is a mistake in
    the file, not a setting (the operator believes the answers use it). Such a key left at its
    default (``margin = 0``, say, inherited from ``[defaults]``) says nothing and is dropped."""
    if not isinstance(table, Mapping):
        return table
    name = mechanism_of(table)
    own = SANITISERS.get(name)
    if own is None:
        return table  # the union names the valid choices
    fields = own.policy_model.model_fields
    kept = dict(table)
    for key, value in table.items():
        if key in fields:
            continue
        owners = [s for s in SANITISERS.values() if key in s.policy_model.model_fields]
        if owners and all(value == s.policy_model.model_fields[key].default for s in owners):
            del kept[key]
        elif owners:
            hint = getattr(own.policy_model, "KEY_HINTS", {}).get(key)
            choices = " or ".join(repr(owner.name) for owner in owners)
            raise ValueError(
                f"{key} applies to mechanism {choices}, not {name!r}" + (f" ({hint})" if hint else "")
            )
    return kept


def account_params(policy: PolicyBase, *, sensitivity: float = 1.0) -> AccountParams:
    """A new account's public parameters under ``policy``, by the policy's own sanitiser."""
    return sanitiser_of(policy).account_params(policy, sensitivity=sensitivity)

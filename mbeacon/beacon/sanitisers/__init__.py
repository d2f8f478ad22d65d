"""The sanitisers the service serves, one module each, and the registry that names them.

A sanitiser (:class:`~mbeacon.beacon.sanitisers.base.Sanitiser`) owns its policy keys, its split of
epsilon, its parameters, its starting state, its decision on a request and its cost; the rest of the
service asks :func:`sanitiser_of` and never compares mechanism names. How to add one:
docs/sanitisers.md.
"""

from mbeacon.beacon.sanitisers.base import Fresh, PMWSource, Run, Sanitiser
from mbeacon.beacon.sanitisers.params import AccountParams
from mbeacon.beacon.sanitisers.registry import DEFAULT_MECHANISM, SANITISERS, account_params, sanitiser_of

__all__ = [
    "DEFAULT_MECHANISM",
    "SANITISERS",
    "AccountParams",
    "Fresh",
    "PMWSource",
    "Run",
    "Sanitiser",
    "account_params",
    "sanitiser_of",
]

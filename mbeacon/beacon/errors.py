"""What an operator's request can fail with, by kind rather than by transport.

The ledger and the operator use cases (:mod:`mbeacon.beacon.operations`) raise these; the admin API maps
each kind to its HTTP status and the CLI prints the message, so neither the ledger nor the use cases
know about HTTP.
"""

from __future__ import annotations


class OperationError(ValueError):
    """An operator request that cannot be done; the message says why, for the operator to read."""


class InvalidRequest(OperationError):
    """The request itself is wrong: a name, holder, role or parameter that no state could accept."""


class UnknownTarget(OperationError):
    """The user, holder or dataset the request names does not exist."""


class AlreadyExists(OperationError):
    """The request would create what exists already (a user name is never reused)."""

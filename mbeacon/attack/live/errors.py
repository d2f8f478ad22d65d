"""The live attack's exceptions: what stops it, each with a message meant for the user (never the key)."""

from __future__ import annotations


class LiveAttackError(RuntimeError):
    """The attack cannot go on; the message is meant for the user (and never holds the key)."""


class BeaconBudgetRefused(LiveAttackError):
    """The beacon answered HTTP 429 because the key's privacy budget on the dataset is spent and its policy
    refuses further queries (a rate limit, also 429, is waited out instead)."""


class BatchTooLarge(LiveAttackError):
    """The server refused a batch for its size (413, or 400 naming its ``max_batch``)."""

    def __init__(self, message: str, limit: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit

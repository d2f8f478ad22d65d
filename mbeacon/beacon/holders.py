"""Who holds a privacy budget, and what a user name may be: one rule for the engine, the CLI and the
admin API.

A budget holder is written ``user:NAME``, ``group:NAME``, ``global`` (one budget for every caller),
``anonymous`` (the callers without a key, when the service lets them in) or ``cohort`` (the state a
shared sanitiser keeps for the whole cohort: an operator's target, never a caller's budget); a bare
``NAME`` is ``user:NAME``, on the command line and in the admin API alike (so a user named ``global``,
``anonymous`` or ``cohort`` is written with its ``user:``). User and group names share one pattern,
which also keeps them safe in URLs, log lines and both ledger databases (no NUL bytes, no separators).

A name has one spelling (:func:`canonical_name`): Unicode compatibility forms (full-width letters),
surrounding white space and letter case are not part of it, so ``Dup2``, ``"dup2 "`` and ``ｄｕｐ２`` all
name the user ``dup2``. A budget is tied to a name and a revoked name is never reused, so a respelled
name must not open a second budget.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

from mbeacon.beacon.errors import InvalidRequest

#: A user or group name in its canonical spelling: a lower-case letter or digit, then those and ``._@-``;
#: 64 characters at most.
NAME_PATTERN = r"^[a-z0-9][a-z0-9._@-]{0,63}$"
_NAME = NAME_PATTERN.removeprefix("^").removesuffix("$")
#: A budget holder as written in the admin API's paths and filters and on the command line.
HOLDER_PATTERN = rf"^(user:|group:)?{_NAME}$|^global$|^anonymous$|^cohort$"
#: Holders written without a name.
SPECIAL_HOLDERS = ("global", "anonymous", "cohort")
#: The user names of researchers signed in with OIDC tokens start with this (mbeacon/api/oidc.py): no
#: API-key user may take one, so that no key can spend a signed-in researcher's budget.
OIDC_PREFIX = "oidc-"

HolderKind = Literal["user", "group", "global", "anonymous", "cohort"]


def canonical_name(text: str) -> str:
    """The one spelling of a name (or holder): NFKC-normalised, stripped of surrounding white space,
    case-folded. Whether the result is a valid name is :func:`is_name`'s question."""
    return unicodedata.normalize("NFKC", text).strip().casefold()


def is_name(text: str) -> bool:
    """Whether ``text`` is a valid user or group name in its canonical spelling."""
    return re.fullmatch(NAME_PATTERN, text) is not None


@dataclass(frozen=True)
class Holder:
    """A budget holder; ``str(holder)`` is its spelling in the ledger, the API and the audit log."""

    kind: HolderKind
    name: str | None = None

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}" if self.name is not None else self.kind

    @classmethod
    def parse(cls, text: str, *, what: str = "budget holder") -> Holder:
        """A holder in any spelling of it (:func:`canonical_name`), a bare name being that user's
        (``alice`` is ``user:alice``); :class:`InvalidRequest` naming ``what`` otherwise."""
        canonical = canonical_name(text)
        if re.fullmatch(HOLDER_PATTERN, canonical) is None:
            raise InvalidRequest(
                f"{what} must be NAME, user:NAME, group:NAME, global, anonymous or cohort, not {text[:70]!r}"
            )
        if ":" not in canonical and canonical not in SPECIAL_HOLDERS:
            return cls("user", canonical)
        kind, _, name = canonical.partition(":")
        return cls(kind, name or None)  # type: ignore[arg-type]

    @classmethod
    def from_command_line(cls, text: str) -> Holder:
        """A holder as an operator types it: :meth:`parse` (the admin API reads holders the same way)."""
        return cls.parse(text)


def budget_holder(scope: str, user: str, group: str | None, anonymous: bool) -> str:
    """The holder whose budget a caller's query spends under a dataset's ``scope``.

    ``global`` is one budget for every caller (anonymous ones included); otherwise anonymous callers
    share ``anonymous``, and ``group`` scope falls back to the user's own budget when they have no group.
    Returned as text: it runs on every request, and the ledger keys accounts by the text.
    """
    if scope == "global":
        return "global"
    if anonymous:
        return "anonymous"
    if scope == "group":
        return f"group:{group or user}"
    return f"user:{user}"

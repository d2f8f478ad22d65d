"""API keys: generation, salted hashing, constant-time verification.

A key looks like ``mbk_<key id>_<secret>``. The key id (48 random bits, not secret) finds the user's
row; the secret (256 random bits) is stored only as ``SHA-256(salt || secret)`` with a per-key
random salt and compared with :func:`hmac.compare_digest`. A deliberately slow hash (bcrypt,
scrypt) protects low-entropy passwords; these secrets are uniformly random, so a fast hash is as
strong and keeps authentication off the request's critical path.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

PREFIX = "mbk"
_KEY = re.compile(r"^mbk_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
_DUMMY_SALT = bytes(16)


@dataclass(frozen=True)
class NewKey:
    """A freshly minted key: ``key`` is shown once; the rest is what the ledger stores."""

    key: str
    key_id: str
    salt: str
    digest: str


def digest(salt_hex: str, secret: str) -> str:
    return hashlib.sha256(bytes.fromhex(salt_hex) + secret.encode()).hexdigest()


def mint() -> NewKey:
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_hex(16)
    return NewKey(f"{PREFIX}_{key_id}_{secret}", key_id, salt, digest(salt, secret))


def split(key: str) -> tuple[str, str] | None:
    """``(key id, secret)`` of a well-formed key, else None."""
    match = _KEY.match(key)
    return (match.group(1), match.group(2)) if match else None


def verify(secret: str, salt_hex: str | None, stored_digest: str | None) -> bool:
    """Constant-time check; with no stored row it still hashes and compares, so timing is the same."""
    if salt_hex is None or stored_digest is None:
        hmac.compare_digest(digest(_DUMMY_SALT.hex(), secret), "0" * 64)
        return False
    return hmac.compare_digest(digest(salt_hex, secret), stored_digest)


_SPAN = re.compile(r"^([1-9][0-9]{0,4})([hdw])$")
_SPAN_UNIT = {"h": "hours", "d": "days", "w": "weeks"}


def expiry_at(text: str, now: datetime | None = None) -> datetime:
    """When a key given ``--expires TEXT`` stops working: an ISO date (its first instant, UTC) or time
    (UTC unless it says otherwise), in the future; ValueError saying what is accepted otherwise."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{text[:40]!r} is not a date or time: write 2027-01-31 or 2027-01-31T08:00"
        ) from None
    when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    if when <= (now or datetime.now(UTC)):
        raise ValueError(f"{text[:40]!r} is not in the future")
    return when


def expiry_after(span: str, now: datetime | None = None) -> datetime:
    """When a key given ``--expires-in SPAN`` (``12h``, ``90d``, ``2w``) stops working."""
    match = _SPAN.match(span.strip())
    if match is None:
        raise ValueError(
            f"{span[:40]!r} is not a span: write a whole number of hours, days or weeks (12h, 90d, 2w)"
        )
    start = (now or datetime.now(UTC)).replace(microsecond=0)
    return start + timedelta(**{_SPAN_UNIT[match.group(2)]: int(match.group(1))})


def expired(expires: str | None, now: datetime | None = None) -> bool:
    """Whether a key whose expiry is ``expires`` (as the ledger stores it) has stopped working."""
    return expires is not None and datetime.fromisoformat(expires) <= (now or datetime.now(UTC))

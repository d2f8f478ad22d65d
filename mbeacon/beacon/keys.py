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

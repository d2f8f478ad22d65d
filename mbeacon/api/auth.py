"""Who is calling: bearer API keys (researchers), admin keys (operators) or nobody (anonymous).

An invalid key is always 401, never a silent fall-back to anonymous access. Admin keys are a
separate role: they run the admin API and read metrics, and cannot query data (so an operator's
key leaking into a script does not also open a budget); researcher keys cannot reach admin routes.
"""

from __future__ import annotations

from flask import g, request

from mbeacon.api.runtime import runtime
from mbeacon.beacon.answers import Principal
from mbeacon.beacon.ledger import User

ANONYMOUS = Principal("anonymous", "PUBLIC", anonymous=True)


class AuthError(Exception):
    """401 (no or bad credentials) or 403 (credentials without the right)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def bearer_key() -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, key = header.partition(" ")
    if not header:
        return None
    if scheme.lower() != "bearer" or not key.strip():
        raise AuthError(401, "Authorization header must be 'Bearer <API key>'")
    return key.strip()


def authenticated_user() -> User | None:
    """The user behind the bearer key (None without a header); 401 for a bad, revoked or expired key.

    The outcome, a refusal included, is kept for the rest of the request: the key is checked once
    per request whatever it is (the rate limiter asks before the route does), so a valid key id
    with a wrong secret costs exactly what an unknown key id costs.
    """
    if "mbeacon_auth_error" in g:
        raise g.mbeacon_auth_error
    if "mbeacon_user" in g:
        return g.mbeacon_user
    try:
        key = bearer_key()
        user = None
        if key is not None:
            user = runtime().ledger.authenticate(key)
            if user is None:
                raise AuthError(401, "invalid, revoked or expired API key")
    except AuthError as error:
        g.mbeacon_auth_error = error
        raise
    g.mbeacon_user = user
    return user


def principal(*, for_query: bool) -> Principal:
    """The caller as a budget principal. ``for_query``: anonymous callers need the operator's leave."""
    user = authenticated_user()
    if user is None:
        if for_query and runtime().config.anonymous != "shared":
            raise AuthError(401, "this beacon requires an API key: send 'Authorization: Bearer <key>'")
        return ANONYMOUS
    if user.role == "admin":
        if for_query:
            raise AuthError(403, "admin keys cannot query data; use a researcher key")
        return ANONYMOUS
    return Principal(user.name, user.tier, user.group)


def require_admin() -> User:
    user = authenticated_user()
    if user is None:
        raise AuthError(401, "admin API: send 'Authorization: Bearer <admin key>'")
    if user.role != "admin":
        raise AuthError(403, "admin API: this key is not an admin key")
    return user

"""Who is calling: bearer API keys (researchers), admin keys (operators), OIDC tokens of trusted
identity providers (signed-in researchers, when the configuration has an ``[oidc]`` table: see
:mod:`mbeacon.api.oidc` and :mod:`mbeacon.api.passports`) or nobody (anonymous).

An invalid key or token is always 401, never a silent fall-back to anonymous access. Admin keys are a
separate role: they run the admin API and read metrics, and cannot query data (so an operator's
key leaking into a script does not also open a budget); researcher keys cannot reach admin routes.
"""

from __future__ import annotations

from flask import g, request

from mbeacon.api.oidc import TokenRefused, Verifier, looks_like_jwt
from mbeacon.api.passports import passport
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
        raise AuthError(401, "Authorization header must be 'Bearer <API key or token>'")
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
        verifier = runtime().oidc
        if key is not None and verifier is not None and looks_like_jwt(key):
            user = _signed_in(verifier, key)
        elif key is not None:
            user = runtime().ledger.authenticate(key)
            if user is None:
                raise AuthError(401, "invalid, revoked or expired API key")
    except AuthError as error:
        g.mbeacon_auth_error = error
        raise
    g.mbeacon_user = user
    return user


def _signed_in(verifier: Verifier, token: str) -> User:
    """The researcher a verified OIDC token names, as a user of the request: REGISTERED (PUBLIC when
    the configuration requires bona fide visas and the passport has none), with the passport's grants
    kept for :func:`principal`."""
    try:
        signed_in = verifier.verify(token)
        visas = passport(signed_in, verifier, token)
    except TokenRefused as refused:
        raise AuthError(refused.status, str(refused)) from None
    g.mbeacon_grants = visas.grants
    tier = "REGISTERED" if visas.bona_fide or not verifier.config.require_bona_fide else "PUBLIC"
    return User(signed_in.holder, "researcher", tier, None, "", None)


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
    return Principal(user.name, user.tier, user.group, grants=g.get("mbeacon_grants", frozenset()))


def require_admin() -> User:
    user = authenticated_user()
    if user is None:
        raise AuthError(401, "admin API: send 'Authorization: Bearer <admin key>'")
    if user.role != "admin":
        raise AuthError(403, "admin API: this key is not an admin key")
    return user

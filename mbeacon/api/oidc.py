"""OpenID Connect bearer tokens: who a signed-in researcher is, checked against the trusted issuers.

PyJWT (the field's standard JOSE library for Python; its ``PyJWKClient`` caches a provider's key set
and fetches it again, at most once per cooldown, when a token names a key the set lacks) does the
cryptography. What this module adds is the order of the checks, so that nothing a token says is
believed before its signature verifies:

1. the header's ``alg`` must be on the configured allow-list (never ``none``, never HMAC: an HMAC
   "signature" made with the provider's public key as its secret would otherwise verify);
2. the unverified ``iss`` only chooses among the configured issuers: one not configured is refused
   before anything is fetched (no request to a URL a token names);
3. the key comes from that issuer's own key set (found by OIDC discovery, the discovery document's
   ``issuer`` matching exactly), the signature is verified with it, and only then are ``iss``, ``aud``
   (this beacon), ``exp``, ``nbf`` and ``iat`` checked, with the configured leeway.

Any failure is a 401 with the Beacon error body, never a fall-back to anonymous access; a provider
that cannot be reached is a 503. The budget holder of a token is a user name derived from ``iss`` and
``sub`` (:func:`holder_name`), never an e-mail address; nothing of the token is logged.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

import jwt

from mbeacon.beacon.holders import OIDC_PREFIX
from mbeacon.beacon.oidc_config import OIDCConfig


class TokenRefused(Exception):
    """A token that does not sign anyone in (401), or a provider that cannot be asked (503)."""

    def __init__(self, message: str, status: int = 401) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class SignedIn:
    """A verified token: who it names and everything it claims."""

    issuer: str
    subject: str
    claims: dict[str, Any]

    @property
    def holder(self) -> str:
        return holder_name(self.issuer, self.subject)


def holder_name(issuer: str, subject: str) -> str:
    """The budget holder's user name of ``subject`` at ``issuer``: stable, a valid user name, and the
    same person at two issuers is two holders (an issuer vouches only for its own subjects)."""
    issuer_part = hashlib.sha256(issuer.encode()).hexdigest()[:8]
    subject_part = hashlib.sha256(f"{issuer}\0{subject}".encode()).hexdigest()[:24]
    return f"{OIDC_PREFIX}{issuer_part}-{subject_part}"


def looks_like_jwt(token: str) -> bool:
    """Whether a bearer token has a JWT's shape (three base64url parts): API keys never do."""
    parts = token.split(".")
    return len(parts) == 3 and all(parts[:2]) and token.startswith("eyJ")


def fetch_json(url: str, timeout: float, headers: dict[str, str] | None = None) -> Any:
    """GET ``url`` as JSON; :class:`TokenRefused` (503) when it cannot be read."""
    request = urllib.request.Request(url, headers={"Accept": "application/json", **(headers or {})})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout) as response:
            return json.loads(response.read(1_000_000))
    except (OSError, ValueError) as error:
        why = type(error).__name__
        raise TokenRefused(f"the identity provider could not be asked ({why})", 503) from None


class Verifier:
    """Verifies tokens against the configured issuers (one per process; thread-safe)."""

    def __init__(self, config: OIDCConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._discovered: dict[str, tuple[float, dict[str, Any]]] = {}
        self._clients: dict[str, jwt.PyJWKClient] = {}

    def discovery(self, issuer: str) -> dict[str, Any]:
        """The issuer's discovery document (cached as long as its key set)."""
        with self._lock:
            held = self._discovered.get(issuer)
        if held is not None and time.monotonic() - held[0] < self.config.jwks_cache_seconds:
            return held[1]
        url = f"{issuer.rstrip('/')}/.well-known/openid-configuration"
        document = fetch_json(url, self.config.timeout_seconds)
        if not isinstance(document, dict) or document.get("issuer") != issuer or "jwks_uri" not in document:
            raise TokenRefused("the identity provider's discovery document does not match its issuer", 503)
        with self._lock:
            self._discovered[issuer] = (time.monotonic(), document)
        return document

    def keys(self, jwks_uri: str) -> jwt.PyJWKClient:
        """The key-set client of ``jwks_uri`` (cached keys; a refetch on an unknown ``kid``, bounded)."""
        with self._lock:
            client = self._clients.get(jwks_uri)
            if client is None:
                client = jwt.PyJWKClient(
                    jwks_uri,
                    cache_jwk_set=True,
                    lifespan=self.config.jwks_cache_seconds,
                    timeout=self.config.timeout_seconds,
                    cooldown_duration=self.config.refresh_cooldown_seconds,
                )
                self._clients[jwks_uri] = client
        return client

    def signing_key(self, token: str, jwks_uri: str) -> Any:
        try:
            return self.keys(jwks_uri).get_signing_key_from_jwt(token).key
        except jwt.PyJWKClientConnectionError:
            raise TokenRefused("the identity provider's keys could not be read", 503) from None
        except (jwt.PyJWKClientError, jwt.InvalidTokenError):
            raise TokenRefused("token signed with a key the identity provider does not publish") from None

    def verify(self, token: str) -> SignedIn:
        """The signed-in researcher of ``token``; :class:`TokenRefused` otherwise."""
        header = unverified_header(token, self.config.algorithms, "token")
        try:
            issuer = jwt.decode(token, options={"verify_signature": False}).get("iss")
        except jwt.InvalidTokenError:
            raise TokenRefused("malformed token") from None
        if issuer not in self.config.issuers:
            raise TokenRefused("token from an issuer this beacon does not trust")
        key = self.signing_key(token, self.discovery(issuer)["jwks_uri"])
        try:
            claims = jwt.decode(
                token, key, algorithms=[header["alg"]], audience=self.config.audience, issuer=issuer,
                leeway=self.config.leeway_seconds, options={"require": ["exp", "iat", "iss", "sub", "aud"]},
            )  # fmt: skip
        except jwt.ExpiredSignatureError:
            raise TokenRefused("token expired") from None
        except jwt.InvalidAudienceError:
            raise TokenRefused("token not issued for this beacon (aud)") from None
        except jwt.ImmatureSignatureError:
            raise TokenRefused("token not valid yet (nbf or iat in the future)") from None
        except jwt.InvalidTokenError as error:
            raise TokenRefused(f"token refused: {type(error).__name__}") from None
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise TokenRefused("token names no subject (sub)")
        return SignedIn(issuer, subject, claims)


def unverified_header(token: str, allowed: list[str], what: str) -> dict[str, Any]:
    """A JWT's header, refused unless its ``alg`` is one of ``allowed``."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError:
        raise TokenRefused(f"malformed {what}") from None
    if header.get("alg") not in allowed:
        raise TokenRefused(f"{what} signed with an algorithm this beacon does not accept")
    return header

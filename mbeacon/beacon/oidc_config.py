"""The ``[oidc]`` table of the service configuration: which identity providers' tokens the beacon
accepts, for which audience, and whose GA4GH Passport visas it trusts (see docs/service.md,
"Signing in with OIDC tokens").
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: Signature algorithms a token or visa may use: public-key ones only. ``none`` and the HMAC family
#: are never accepted (an HMAC "signature" made with the provider's public key as secret would verify).
Algorithm = Literal["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"]
DEFAULT_ALGORITHMS: tuple[Algorithm, ...] = ("RS256", "ES256")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _check_url(url: str, what: str) -> str:
    """An https URL (http only on the loopback interface, for a provider on the same host)."""
    parts = urlsplit(url)
    if not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"{what} must be an absolute URL without query or fragment, not {url[:100]!r}")
    if parts.scheme != "https" and not (parts.scheme == "http" and parts.hostname in _LOOPBACK):
        raise ValueError(f"{what} must use https (http only on 127.0.0.1 or localhost), not {url[:100]!r}")
    return url


class VisaIssuer(BaseModel):
    """A visa issuer the beacon trusts: its ``iss`` and the JWKS URLs (``jku``) its visas may name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    iss: str = Field(min_length=1, max_length=2048)
    jku: list[str] = Field(min_length=1, max_length=20)

    @field_validator("jku")
    @classmethod
    def _urls(cls, urls: list[str]) -> list[str]:
        return [_check_url(u, "a visa issuer's jku") for u in urls]


class OIDCConfig(BaseModel):
    """Bearer tokens from trusted OpenID Connect providers, beside API keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Issuer URLs, exactly as the providers write ``iss`` (their discovery documents are read from
    #: ``ISSUER/.well-known/openid-configuration``).
    issuers: list[str] = Field(min_length=1, max_length=20)
    #: What the tokens' ``aud`` must name: this beacon's client id at the providers.
    audience: str = Field(min_length=1, max_length=2048)
    algorithms: list[Algorithm] = Field(default_factory=lambda: list(DEFAULT_ALGORITHMS), min_length=1)
    #: Clock skew tolerated on ``exp``, ``nbf`` and ``iat``.
    leeway_seconds: int = Field(30, ge=0, le=300)
    #: How long a provider's key set is used before it is fetched again.
    jwks_cache_seconds: int = Field(300, ge=10, le=86_400)
    #: A token signed with a key the cached set lacks fetches the set again at most this often.
    refresh_cooldown_seconds: float = Field(30.0, ge=1, le=3600)
    #: Timeout of one request to a provider.
    timeout_seconds: float = Field(5.0, gt=0, le=60)
    #: Ask the provider's userinfo endpoint for the passport when the token carries none.
    userinfo: bool = False
    #: A token opens REGISTERED datasets only with ResearcherStatus and AcceptedTermsAndPolicies
    #: visas (bona fide researcher status); without them it opens PUBLIC datasets only.
    require_bona_fide: bool = False
    visa_issuers: list[VisaIssuer] = Field(default_factory=list, max_length=50)

    @field_validator("issuers")
    @classmethod
    def _issuers(cls, urls: list[str]) -> list[str]:
        return [_check_url(u, "an issuer") for u in urls]

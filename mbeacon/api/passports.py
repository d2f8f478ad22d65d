"""GA4GH Passport visas: what a signed-in researcher's data access committees have granted.

A passport is a list of visas, each a JWT signed by a visa issuer, carried in the token's
``ga4gh_passport_v1`` claim or returned by the provider's userinfo endpoint (``userinfo = true``). A
visa counts only when all of these hold, checked in this order: its ``alg`` is allowed; its issuer
(``iss``) is configured and its header's ``jku`` is one of that issuer's configured JWKS URLs (no key
is ever fetched from a URL only the visa names); its signature verifies with that key set; it has not
expired; and its ``sub`` is the token's (a visa of someone else carried in one's own passport grants
nothing). A visa that fails any check is ignored, as the Passport specification asks: it grants
nothing, and the request is answered with what the other visas grant.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import jwt

from mbeacon.api.oidc import SignedIn, TokenRefused, Verifier, fetch_json, unverified_header

log = logging.getLogger("mbeacon.api")

#: The visa types that together make a bona fide researcher (GA4GH Passport v1.2).
BONA_FIDE = frozenset({"ResearcherStatus", "AcceptedTermsAndPolicies"})
#: At most this many visas are read from one passport.
MAX_VISAS = 200


@dataclass(frozen=True)
class Passport:
    """What the valid visas of a passport say."""

    bona_fide: bool
    grants: frozenset[str]


def passport(signed_in: SignedIn, verifier: Verifier, bearer: str) -> Passport:
    """The grants and bona fide status of the valid visas of ``signed_in``'s passport."""
    config = verifier.config
    visas = signed_in.claims.get("ga4gh_passport_v1")
    if visas is None and config.userinfo:
        endpoint = verifier.discovery(signed_in.issuer).get("userinfo_endpoint")
        asking = {"Authorization": f"Bearer {bearer}"}
        try:
            info = fetch_json(endpoint, config.timeout_seconds, asking) if endpoint else None
        except TokenRefused:  # no passport to be had: the researcher is signed in with no visas
            log.warning("the identity provider's userinfo could not be read; no visas for this request")
            info = None
        if isinstance(info, dict) and info.get("sub") == signed_in.subject:
            visas = info.get("ga4gh_passport_v1")
    if not isinstance(visas, list):
        return Passport(False, frozenset())
    kinds: set[str] = set()
    grants: set[str] = set()
    for visa in visas[:MAX_VISAS]:
        claim = _valid_visa(visa, signed_in.subject, verifier)
        if claim is None:
            continue
        kinds.add(claim["type"])
        if claim["type"] == "ControlledAccessGrants" and isinstance(claim.get("value"), str):
            grants.add(claim["value"])
    return Passport(kinds >= BONA_FIDE, frozenset(grants))


def _valid_visa(visa: Any, subject: str, verifier: Verifier) -> dict[str, Any] | None:
    """The ``ga4gh_visa_v1`` claim of a valid visa, or None (see the module docstring)."""
    if not isinstance(visa, str):
        return None
    config = verifier.config
    try:
        header = unverified_header(visa, config.algorithms, "visa")
        issuer = jwt.decode(visa, options={"verify_signature": False}).get("iss")
        trusted = next((v for v in config.visa_issuers if v.iss == issuer), None)
        jku = header.get("jku")
        if trusted is None or jku not in trusted.jku:
            return None
        key = verifier.signing_key(visa, jku)
        claims = jwt.decode(
            visa,
            key,
            algorithms=[header["alg"]],
            issuer=issuer,
            leeway=config.leeway_seconds,
            options={"require": ["exp", "iat", "iss", "sub"], "verify_aud": False},
        )
    except (TokenRefused, jwt.InvalidTokenError):
        return None
    claim = claims.get("ga4gh_visa_v1")
    if claims.get("sub") != subject or not isinstance(claim, dict) or not isinstance(claim.get("type"), str):
        return None
    return claim

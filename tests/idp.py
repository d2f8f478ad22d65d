"""A real OpenID Connect identity provider for the tests, on 127.0.0.1: discovery, a key set that can
be rotated, userinfo, and a visa issuer's key set (GA4GH Passports), with real RSA keys.

``IdentityProvider`` serves over HTTP in a thread (werkzeug's server) and signs tokens and visas with
keys it generates; the beacon under test fetches its discovery document and key sets as it would a
production provider's. Tokens that no honest provider would issue (``alg: none``, an HMAC signed with
the public key) are built by hand here, byte for byte.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response


class Key:
    """An RSA signing key with its key id."""

    def __init__(self) -> None:
        self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = secrets.token_hex(8)

    def jwk(self) -> dict[str, Any]:
        public = jwt.algorithms.RSAAlgorithm.to_jwk(self.private.public_key(), as_dict=True)
        return {**public, "kid": self.kid, "alg": "RS256", "use": "sig"}

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def sign(self, claims: dict[str, Any], headers: dict[str, Any] | None = None) -> str:
        header = {"kid": self.kid, **(headers or {})}
        return jwt.encode(claims, self.private, algorithm="RS256", headers=header)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(claims: dict[str, Any]) -> str:
    """A token with ``alg: none`` and no signature."""
    return f"{_b64(json.dumps({'alg': 'none', 'typ': 'JWT'}).encode())}.{_b64(json.dumps(claims).encode())}."


def hmac_with_public_key(claims: dict[str, Any], key: Key) -> str:
    """A token "signed" with HS256 using the provider's public key as the HMAC secret: the classic
    algorithm-confusion forgery (anyone has the public key)."""
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": key.kid}).encode())
    body = _b64(json.dumps(claims).encode())
    mac = hmac.new(key.public_pem(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(mac)}"


class IdentityProvider:
    """The provider (issuer ``url``), its visa issuer (``visa_issuer``, keys at ``visa_jku``) and an
    untrusted key set (``other_jku``) that a forged visa may point to."""

    def __init__(self, audience: str = "mbeacon-test") -> None:
        self.audience = audience
        self.keys = [Key()]
        self.visa_key = Key()
        self.other_key = Key()
        self.userinfo: dict[str, dict[str, Any]] = {}  # bearer token -> userinfo answer
        self.requests: list[str] = []
        self._server = make_server("127.0.0.1", 0, self._app, threaded=True)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self.visa_issuer = f"{self.url}/visas"
        self.visa_jku = f"{self.url}/visa-jwks"
        self.other_jku = f"{self.url}/other-jwks"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> IdentityProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()

    def _app(self, environ: dict, start_response: Any) -> Any:
        request = Request(environ)
        self.requests.append(request.path)
        discovery = {"issuer": self.url, "jwks_uri": f"{self.url}/jwks"}
        discovery["userinfo_endpoint"] = f"{self.url}/userinfo"
        routes = {
            "/.well-known/openid-configuration": lambda: discovery,
            "/jwks": lambda: {"keys": [k.jwk() for k in self.keys]},
            "/visa-jwks": lambda: {"keys": [self.visa_key.jwk()]},
            "/other-jwks": lambda: {"keys": [self.other_key.jwk()]},
        }
        if request.path == "/userinfo":
            token = request.headers.get("Authorization", "").removeprefix("Bearer ")
            answer = self.userinfo.get(token)
            if answer is None:  # a token of ours without a registered passport: its subject only
                try:
                    answer = {"sub": jwt.decode(token, options={"verify_signature": False})["sub"]}
                except (jwt.InvalidTokenError, KeyError):
                    return Response("", status=401)(environ, start_response)
            return Response(json.dumps(answer), mimetype="application/json")(environ, start_response)
        if request.path not in routes:
            return Response("", status=404)(environ, start_response)
        body = json.dumps(routes[request.path]())
        return Response(body, mimetype="application/json")(environ, start_response)

    def rotate(self) -> Key:
        """A new signing key replaces the old one in the published key set."""
        self.keys = [Key()]
        return self.keys[0]

    def claims(self, subject: str = "researcher-1", **changes: Any) -> dict[str, Any]:
        now = int(time.time())
        claims = {"iss": self.url, "sub": subject, "aud": self.audience, "iat": now, "exp": now + 600}
        return {**claims, **changes}

    def token(self, subject: str = "researcher-1", *, key: Key | None = None, **changes: Any) -> str:
        return (key or self.keys[0]).sign(self.claims(subject, **changes))

    def visa(self, kind: str, value: str, subject: str = "researcher-1", *, key: Key | None = None,
             jku: str | None = None, **changes: Any) -> str:  # fmt: skip
        """A GA4GH visa of ``kind`` (ResearcherStatus, ControlledAccessGrants, ...) with ``value``."""
        now = int(time.time())
        claims = {
            "iss": self.visa_issuer, "sub": subject, "iat": now, "exp": now + 600,
            "ga4gh_visa_v1": {"type": kind, "value": value, "source": "https://dac.example.org", "by": "dac",
                              "asserted": now - 86_400},
            **changes,
        }  # fmt: skip
        return (key or self.visa_key).sign(claims, {"jku": jku or self.visa_jku})

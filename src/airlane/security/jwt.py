"""Bearer JWTs for browsers and apps, verified against a JWKS.

`JwtVerifier` checks a token's signature with a key of the JWKS (by the token's ``kid``, of
an allowed algorithm: RS256, ES256, EdDSA by default; never ``none`` or an HMAC, so a public
key can never be used as a shared secret), then ``exp``, ``nbf`` and ``iat`` with a small clock
skew, ``aud`` and ``iss`` when configured, and maps its claims to a `Principal`: the name from
``sub``, the tenant from a ``tenant`` claim, roles from ``roles``. What is wrong with a refused
token is said in one line (expired, not yet valid, for another audience...).

The JWKS comes from a file (read again when it changes) or a URL: `Jwks.refresh` fetches it
(the owner, ``airlane serve``, calls it on a timer and when a token names a key id the set does
not hold, at most every `MIN_REFETCH_S`), so keys rotate without a restart. Verification itself
is synchronous and does no I/O: a token whose key is not known yet is refused until the next
fetch brings it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from jwt.types import Options

from airlane.security import (
    ANONYMOUS,
    DEFAULT_TENANT,
    Action,
    ApiKeyPolicy,
    PermissionDenied,
    Principal,
    Unauthenticated,
    peer_principal,
)
from airlane.security.tls import PeerIdentity

__all__ = ["MIN_REFETCH_S", "Jwks", "JwtPolicy", "JwtSettings", "JwtVerifier", "looks_like_jwt"]

log = logging.getLogger("airlane.security.jwt")

MIN_REFETCH_S = 10.0
"""A JWKS URL is fetched at most this often for unknown key ids (a client sending made-up
ids must not make the gateway hammer the key server)."""
MAX_JWKS_BYTES = 1 << 20
"""Largest JWKS document read."""
ALLOWED_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"})
"""Asymmetric algorithms only: a verifier holding public keys never accepts HMAC or none."""


@dataclass(frozen=True, slots=True)
class JwtSettings:
    """Where the keys are and what a token must say."""

    jwks_file: Path | None = None
    jwks_url: str | None = None
    audience: str | None = None
    """Required ``aud`` (None: not checked)."""
    issuer: str | None = None
    """Required ``iss`` (None: not checked)."""
    algorithms: tuple[str, ...] = ("RS256", "ES256", "EdDSA")
    leeway_s: float = 30.0
    """Clock skew allowed on ``exp``, ``nbf`` and ``iat``."""
    name_claim: str = "sub"
    tenant_claim: str = "tenant"
    """A token without it is in the default tenant."""
    roles_claim: str = "roles"
    refresh_s: float = 300.0
    """How often the JWKS is fetched (or the file checked)."""

    def __post_init__(self) -> None:
        if (self.jwks_file is None) == (self.jwks_url is None):
            raise ValueError("JWT: give a JWKS file or a JWKS URL (one of them)")
        bad = set(self.algorithms) - ALLOWED_ALGORITHMS
        if bad or not self.algorithms:
            raise ValueError(
                f"JWT algorithms {sorted(bad)} are not allowed: use some of "
                f"{', '.join(sorted(ALLOWED_ALGORITHMS))}"
            )


def looks_like_jwt(token: str) -> bool:
    """Whether a bearer token has a JWT's shape (three base64url parts), so that it is checked
    as one rather than looked up as an API key."""
    return token.count(".") == 2 and token.startswith("eyJ")


class Jwks:
    """The current key set, by key id."""

    def __init__(self, settings: JwtSettings) -> None:
        self.settings = settings
        self.keys: dict[str, jwt.PyJWK] = {}
        self.fetched_at = float("-inf")
        self.wanted = False
        """A token named an unknown key id since the last fetch."""
        self._stamp: tuple[int, int] | None = None

    def load(self, document: bytes, source: str) -> None:
        """Replace the keys with those of a JWKS ``document``; `ValueError` naming
        ``source`` if it is not one (the old keys stay)."""
        if len(document) > MAX_JWKS_BYTES:
            raise ValueError(f"{source}: the JWKS is larger than {MAX_JWKS_BYTES} bytes")
        try:
            data = json.loads(document)
            entries = data["keys"]
            if not isinstance(entries, list):
                raise TypeError("'keys' is not a list")
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{source}: not a JWKS ({exc})") from None
        keys: dict[str, jwt.PyJWK] = {}
        for entry in entries:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            try:
                key = jwt.PyJWK(entry)
            except jwt.PyJWKError as exc:
                log.warning("%s: a key skipped: %s", source, exc)
                continue
            keys[str(entry.get("kid", ""))] = key
        if not keys:
            raise ValueError(f"{source}: the JWKS holds no signing key")
        self.keys = keys

    def load_file(self) -> bool:
        """Read the JWKS file if it changed; whether it did (`ValueError`/`OSError` if it
        cannot be read or is not a JWKS)."""
        path = self.settings.jwks_file
        assert path is not None
        st = os.stat(path)
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return False
        self.load(path.read_bytes(), str(path))
        self._stamp = stamp
        return True

    async def refresh(self) -> None:
        """Bring the keys up to date: the file if changed, the URL fetched (logged, not
        raised, when it fails: the keys it had stay)."""
        self.wanted = False
        try:
            if self.settings.jwks_file is not None:
                if self.load_file():
                    log.info("JWKS reloaded from %s", self.settings.jwks_file)
                return
            import httpx  # the URL case only

            url = self.settings.jwks_url
            assert url is not None
            self.fetched_at = time.monotonic()
            async with httpx.AsyncClient(timeout=10, follow_redirects=False) as client:
                response = await client.get(url, headers={"accept": "application/json"})
            if response.status_code != 200:
                raise ValueError(f"{url}: HTTP {response.status_code}")
            self.load(response.content, url)
        except (ValueError, OSError) as exc:
            log.error("JWKS not refreshed, the keys it had stay: %s", exc)
        except Exception as exc:  # httpx's transport errors
            log.error("JWKS not refreshed, the keys it had stay: %s", exc)

    def due(self, now: float) -> bool:
        """Whether a fetch for an unknown key id may go now."""
        return self.wanted and now - self.fetched_at >= MIN_REFETCH_S


class JwtVerifier:
    """Verifies bearer JWTs and names their principals (see the module docstring)."""

    def __init__(self, settings: JwtSettings) -> None:
        self.settings = settings
        self.jwks = Jwks(settings)

    def principal(self, token: str) -> Principal:
        """The principal ``token`` names; `Unauthenticated` saying what is wrong with it."""
        s = self.settings
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError:
            raise Unauthenticated("the bearer token is not a JWT") from None
        algorithm = header.get("alg")
        if algorithm not in s.algorithms:
            raise Unauthenticated(f"JWT algorithm {algorithm!r} is not accepted")
        kid = str(header.get("kid", ""))
        key = self.jwks.keys.get(kid)
        if key is None:
            self.jwks.wanted = True
            raise Unauthenticated(f"JWT key id {kid[:64]!r} is not in the key set (yet)")
        options: Options = {"require": ["exp"], "verify_aud": s.audience is not None}
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=s.audience,
                issuer=s.issuer,
                leeway=s.leeway_s,
                options=options,
            )
        except jwt.ExpiredSignatureError:
            raise Unauthenticated("the JWT has expired") from None
        except jwt.ImmatureSignatureError:
            raise Unauthenticated("the JWT is not valid yet (nbf or iat in the future)") from None
        except jwt.InvalidAudienceError:
            raise Unauthenticated(f"the JWT is not for this audience ({s.audience})") from None
        except jwt.InvalidIssuerError:
            raise Unauthenticated(f"the JWT is not from the issuer {s.issuer}") from None
        except jwt.MissingRequiredClaimError as exc:
            raise Unauthenticated(f"the JWT has no {exc.claim!r} claim") from None
        except jwt.InvalidSignatureError:
            raise Unauthenticated("the JWT's signature does not verify") from None
        except jwt.InvalidTokenError as exc:
            raise Unauthenticated(f"the JWT is invalid: {exc}") from None
        return self._principal_of(claims)

    def _principal_of(self, claims: dict[str, Any]) -> Principal:
        s = self.settings
        name = claims.get(s.name_claim)
        if not isinstance(name, str) or not name:
            raise Unauthenticated(f"the JWT has no {s.name_claim!r} claim naming the client")
        roles = claims.get(s.roles_claim, [])
        if isinstance(roles, str):
            roles = roles.split()
        if not isinstance(roles, Sequence) or not all(isinstance(r, str) for r in roles):
            raise Unauthenticated(f"the JWT's {s.roles_claim!r} claim is not a list of names")
        tenant = claims.get(s.tenant_claim)
        scalars = {
            key: str(value).lower() if isinstance(value, bool) else str(value)
            for key, value in claims.items()
            if isinstance(value, str | int | float)
        }
        try:
            return Principal(
                name,
                frozenset(roles),
                tenant=DEFAULT_TENANT if tenant is None else str(tenant),
                via="jwt",
                claims=scalars,
            )
        except ValueError as exc:
            raise Unauthenticated(f"the JWT's {s.tenant_claim!r} claim: {exc}") from None


class JwtPolicy:
    """Bearer JWTs, with API keys beside them when given (a token shaped like a JWT is
    checked as one, anything else as a key), and client certificates' identities without a
    token. Every authenticated principal may act (RBAC decides more, where configured)."""

    def __init__(self, verifier: JwtVerifier, keys: ApiKeyPolicy | None = None) -> None:
        self.verifier = verifier
        self.keys = keys

    def authenticate(self, bearer: str | None, peer: PeerIdentity | None = None) -> Principal:
        """The principal of a JWT, an API key, or a client certificate, in that order."""
        if bearer and looks_like_jwt(bearer):
            return self.verifier.principal(bearer)
        if self.keys is not None:
            return self.keys.authenticate(bearer, peer)
        if not bearer and peer is not None:
            return peer_principal(peer)
        if not bearer:
            raise Unauthenticated("missing bearer token: send 'Authorization: Bearer <JWT>'")
        raise Unauthenticated("the bearer token is not a JWT")

    def authorize(self, principal: Principal, action: Action, stream_id: str) -> None:
        """Any authenticated principal may act."""
        if principal is ANONYMOUS:
            raise PermissionDenied(f"anonymous principals may not {action.value}")

"""TURN credentials minted per session: the TURN REST API's time-limited scheme.

The TURN server (coturn with ``use-auth-secret`` and ``static-auth-secret``) and the gateway
share a secret. A credential is a username ``<expiry>:<who>`` (Unix seconds) and a password
``base64(HMAC-SHA1(secret, username))``: the server recomputes the password, and refuses it
once the expiry has passed. Nothing is stored, and a leaked credential dies with its hour.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re

__all__ = ["turn_credentials"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._@/-]")


def turn_credentials(secret: str, who: str, ttl_s: int, now: float) -> tuple[str, str]:
    """(username, password) for ``who``, valid ``ttl_s`` seconds from ``now``."""
    username = f"{int(now) + ttl_s}:{_UNSAFE.sub('_', who)[:64]}"
    digest = hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()
    return username, base64.b64encode(digest).decode("ascii")

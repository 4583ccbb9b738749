"""Ed25519 signatures over manifests: keys, their text forms, signing and verifying.

A publisher signs `Manifest.canonical_bytes` once; every receiver holding the publisher's
public key can then trust the manifest, and through its SHA-256 sums every byte it
describes, whichever mirror or peer the bytes came from. Ed25519 (RFC 8032) because keys and
signatures are small (32 and 64 bytes), signing is deterministic, and there are no
parameters to get wrong.

Forms:

- private keys: PEM, PKCS #8, unencrypted (the file's permissions protect it);
- public keys: ``"ed25519:<base64 of the 32 raw bytes>"``, one line to paste into a config,
  or a PEM SubjectPublicKeyInfo file;
- a key id: the first 16 hex digits of SHA-256 of the raw public key, so a signature can say
  which key made it and a mismatch can be told apart from a forgery;
- a signature: ``{"algorithm": "ed25519", "key_id": ..., "value": <base64 of 64 bytes>}``.

Malformed key material raises `ArtifactError`; every way a signature can fail to verify
raises `SignatureError`, with the reason. The ``cryptography`` package's exceptions never
leave this module.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from airlane.artifacts.errors import ArtifactError, SignatureError

__all__ = [
    "ALGORITHM",
    "PUBLIC_KEY_PREFIX",
    "Ed25519PrivateKey",
    "Ed25519PublicKey",
    "generate_private_key",
    "key_id",
    "load_private_key",
    "load_public_key",
    "private_key_to_pem",
    "public_key_to_text",
    "sign_bytes",
    "verify_bytes",
]

ALGORITHM: Final = "ed25519"
"""The only signature algorithm there is here; the field exists so another can follow."""
PUBLIC_KEY_PREFIX: Final = "ed25519:"
_RAW_KEY_SIZE: Final = 32
_SIGNATURE_SIZE: Final = 64
_MAX_KEY_FILE: Final = 64 * 1024
"""A PEM Ed25519 key is about 120 bytes; anything past 64 KiB is not one."""


def generate_private_key() -> Ed25519PrivateKey:
    """A new random signing key."""
    return Ed25519PrivateKey.generate()


def private_key_to_pem(private: Ed25519PrivateKey) -> bytes:
    """``private`` as unencrypted PKCS #8 PEM (what `load_private_key` reads)."""
    return private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def load_private_key(source: Path | str | bytes) -> Ed25519PrivateKey:
    """A signing key from PEM bytes, or from the PEM file at a path (`Path` or `str`)."""
    pem = source if isinstance(source, bytes) else _read_key_file(Path(source))
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except TypeError:
        raise ArtifactError("the private key is encrypted; give an unencrypted one") from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise ArtifactError(f"not a PEM private key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ArtifactError(f"the private key is {type(key).__name__}, not Ed25519")
    return key


def public_key_to_text(public: Ed25519PublicKey) -> str:
    """``"ed25519:<base64 of the raw 32 bytes>"``."""
    return PUBLIC_KEY_PREFIX + base64.b64encode(_raw(public)).decode("ascii")


def load_public_key(source: Path | str | bytes) -> Ed25519PublicKey:
    """A verifying key from `public_key_to_text`'s form, PEM text or bytes, or a PEM file
    at a `Path` (or a ``str`` naming an existing file)."""
    if isinstance(source, str) and source.startswith(PUBLIC_KEY_PREFIX):
        return _public_from_text(source)
    if isinstance(source, Path) or (
        isinstance(source, str) and "-----BEGIN" not in source and Path(source).is_file()
    ):
        pem = _read_key_file(Path(source))
    elif isinstance(source, str):
        if "-----BEGIN" not in source:
            raise ArtifactError(
                f"public key {source[:40]!r} is neither {PUBLIC_KEY_PREFIX}<base64>, "
                "PEM, nor a file"
            )
        pem = source.encode("ascii", errors="replace")
    else:
        pem = source
    if pem.lstrip().startswith(PUBLIC_KEY_PREFIX.encode()):
        return _public_from_text(pem.decode("ascii", errors="replace").strip())
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise ArtifactError(f"not a PEM public key: {exc}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ArtifactError(f"the public key is {type(key).__name__}, not Ed25519")
    return key


def key_id(public: Ed25519PublicKey) -> str:
    """The first 16 hex digits of SHA-256 of the raw public key."""
    return hashlib.sha256(_raw(public)).hexdigest()[:16]


def sign_bytes(private: Ed25519PrivateKey, data: bytes) -> dict[str, str]:
    """Sign ``data``: ``{"algorithm": "ed25519", "key_id": ..., "value": <base64>}``."""
    return {
        "algorithm": ALGORITHM,
        "key_id": key_id(private.public_key()),
        "value": base64.b64encode(private.sign(data)).decode("ascii"),
    }


def verify_bytes(public: Ed25519PublicKey, data: bytes, signature: Mapping[str, object]) -> None:
    """Check that ``signature`` is ``public``'s signature of ``data``.

    Raises `SignatureError` saying why not: not a signature object, an unknown algorithm,
    another key's signature, a value that is not 64 bytes of base64, or a forgery.
    """
    if not isinstance(signature, Mapping):
        raise SignatureError(f"a signature must be an object, got {type(signature).__name__}")
    algorithm = signature.get("algorithm")
    if algorithm != ALGORITHM:
        raise SignatureError(f"signature algorithm {str(algorithm)[:40]!r} is not {ALGORITHM!r}")
    expected = key_id(public)
    signer = signature.get("key_id")
    if signer != expected:
        raise SignatureError(f"signed by key {str(signer)[:40]}, expected {expected}")
    value = _signature_value(signature.get("value"))
    try:
        public.verify(value, data)
    except InvalidSignature:
        raise SignatureError(f"the signature by key {expected} does not verify") from None


def _signature_value(value: object) -> bytes:
    """The 64 raw bytes of a signature's base64 ``value``."""
    if not isinstance(value, str):
        raise SignatureError("signature value must be a base64 string")
    try:
        raw = base64.b64decode(value.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raise SignatureError("signature value is not valid base64") from None
    if len(raw) != _SIGNATURE_SIZE:
        raise SignatureError(f"signature value holds {len(raw)} bytes, not {_SIGNATURE_SIZE}")
    return raw


def _public_from_text(text: str) -> Ed25519PublicKey:
    """Parse ``"ed25519:<base64>"``."""
    encoded = text[len(PUBLIC_KEY_PREFIX) :]
    try:
        raw = base64.b64decode(encoded.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raise ArtifactError(f"public key {text[:60]!r} is not valid base64") from None
    if len(raw) != _RAW_KEY_SIZE:
        raise ArtifactError(f"an Ed25519 public key is {_RAW_KEY_SIZE} bytes, got {len(raw)}")
    return Ed25519PublicKey.from_public_bytes(raw)


def _raw(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _read_key_file(path: Path) -> bytes:
    """A key file's bytes; `ArtifactError` if it is missing, unreadable or far too large."""
    try:
        with path.open("rb") as fh:
            data = fh.read(_MAX_KEY_FILE + 1)
    except OSError as exc:
        raise ArtifactError(f"cannot read key file {path}: {exc.strerror}") from None
    if len(data) > _MAX_KEY_FILE:
        raise ArtifactError(f"key file {path} is over {_MAX_KEY_FILE} bytes: not a key")
    return data

"""airlane.artifacts.signing: Ed25519 keys, their text forms, sign and verify.

Invariant: `verify_bytes` accepts exactly the signatures `sign_bytes` made with the matching
key over the same bytes; every other input raises `SignatureError` (or `ArtifactError` for
malformed key material), never a `cryptography` exception.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given, settings
from hypothesis import strategies as st

from airlane.artifacts.errors import ArtifactError, SignatureError
from airlane.artifacts.signing import (
    Ed25519PrivateKey,
    generate_private_key,
    key_id,
    load_private_key,
    load_public_key,
    private_key_to_pem,
    public_key_to_text,
    sign_bytes,
    verify_bytes,
)

DATA = b'{"name":"tiny-lm","version":"2"}'


@pytest.fixture(scope="module")
def key() -> Ed25519PrivateKey:
    return generate_private_key()


def test_sign_and_verify(key: Ed25519PrivateKey) -> None:
    signature = sign_bytes(key, DATA)
    assert signature["algorithm"] == "ed25519"
    assert signature["key_id"] == key_id(key.public_key())
    assert len(base64.b64decode(signature["value"])) == 64
    verify_bytes(key.public_key(), DATA, signature)


def test_key_id_is_16_hex_digits(key: Ed25519PrivateKey) -> None:
    ident = key_id(key.public_key())
    assert len(ident) == 16
    int(ident, 16)


@settings(max_examples=30)
@given(st.integers(0, len(DATA) - 1), st.integers(1, 255))
def test_any_tampered_byte_is_refused(key: Ed25519PrivateKey, index: int, flip: int) -> None:
    signature = sign_bytes(key, DATA)
    tampered = bytearray(DATA)
    tampered[index] ^= flip
    with pytest.raises(SignatureError, match="does not verify"):
        verify_bytes(key.public_key(), bytes(tampered), signature)


def test_wrong_key_names_both_keys(key: Ed25519PrivateKey) -> None:
    other = generate_private_key()
    signature = sign_bytes(other, DATA)
    expected = f"signed by key {key_id(other.public_key())}, expected {key_id(key.public_key())}"
    with pytest.raises(SignatureError, match=expected):
        verify_bytes(key.public_key(), DATA, signature)


def test_forged_key_id_still_fails(key: Ed25519PrivateKey) -> None:
    other = generate_private_key()
    signature = {**sign_bytes(other, DATA), "key_id": key_id(key.public_key())}
    with pytest.raises(SignatureError, match="does not verify"):
        verify_bytes(key.public_key(), DATA, signature)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"algorithm": "rsa"}, "algorithm"),
        ({"algorithm": None}, "algorithm"),
        ({"value": "not base64!"}, "base64"),
        ({"value": base64.b64encode(b"x" * 63).decode()}, "63 bytes"),
        ({"value": 12}, "base64 string"),
        ({"value": "é"}, "base64"),
        ({"key_id": None}, "signed by key"),
    ],
)
def test_malformed_signatures(
    key: Ed25519PrivateKey, change: dict[str, object], message: str
) -> None:
    signature = {**sign_bytes(key, DATA), **change}
    with pytest.raises(SignatureError, match=message):
        verify_bytes(key.public_key(), DATA, signature)


def test_signature_must_be_a_mapping(key: Ed25519PrivateKey) -> None:
    with pytest.raises(SignatureError):
        verify_bytes(key.public_key(), DATA, None)  # type: ignore[arg-type]


def test_private_pem_round_trip(key: Ed25519PrivateKey, tmp_path: Path) -> None:
    pem = private_key_to_pem(key)
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----")
    path = tmp_path / "signing.pem"
    path.write_bytes(pem)
    for source in (pem, path, str(path)):
        loaded = load_private_key(source)
        assert key_id(loaded.public_key()) == key_id(key.public_key())
    verify_bytes(key.public_key(), DATA, sign_bytes(load_private_key(pem), DATA))


def test_public_text_round_trip(key: Ed25519PrivateKey, tmp_path: Path) -> None:
    text = public_key_to_text(key.public_key())
    assert text.startswith("ed25519:")
    assert key_id(load_public_key(text)) == key_id(key.public_key())
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    path = tmp_path / "signing.pub"
    path.write_bytes(pem)
    text_path = tmp_path / "signing.txt"
    text_path.write_text(text + "\n")
    for source in (pem, pem.decode(), path, str(path), text_path):
        assert key_id(load_public_key(source)) == key_id(key.public_key())


@pytest.mark.parametrize(
    "source",
    [
        "ed25519:not base64!",
        "ed25519:" + base64.b64encode(b"x" * 31).decode(),
        "ed25519:é",
        "rsa:AAAA",
        "-----BEGIN PUBLIC KEY-----\ngarbage\n-----END PUBLIC KEY-----\n",
        b"garbage",
    ],
)
def test_malformed_public_keys(source: str | bytes) -> None:
    with pytest.raises(ArtifactError):
        load_public_key(source)


def test_missing_key_files(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="cannot read key file"):
        load_private_key(tmp_path / "missing.pem")
    with pytest.raises(ArtifactError, match="cannot read key file"):
        load_public_key(tmp_path / "missing.pub")


def test_oversized_key_file(tmp_path: Path) -> None:
    path = tmp_path / "huge.pem"
    path.write_bytes(b"x" * 70_000)
    with pytest.raises(ArtifactError, match="not a key"):
        load_private_key(path)


def test_malformed_private_keys() -> None:
    with pytest.raises(ArtifactError, match="not a PEM private key"):
        load_private_key(b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    encrypted = generate_private_key().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    with pytest.raises(ArtifactError, match="encrypted"):
        load_private_key(encrypted)


def test_other_key_types_are_refused() -> None:
    ec_key = ec.generate_private_key(ec.SECP256R1())
    private_pem = ec_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_pem = ec_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(ArtifactError, match="not Ed25519"):
        load_private_key(private_pem)
    with pytest.raises(ArtifactError, match="not Ed25519"):
        load_public_key(public_pem)

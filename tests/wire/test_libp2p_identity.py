"""libp2p identities and addresses: key pairs, the ``PublicKey`` message, peer ids (identity and
SHA-256 multihashes) and their base58btc text, signature checks for the four key types,
multiaddrs in text and binary form, and the identify message.

A remote peer chooses its key type, its key bytes and every address it lists, so the decoders
are held to raising only `DecodeError` (and `verify` to answering False) whatever they get.
Keys of the three other types are made with the `cryptography` package, as a go- or
rust-libp2p peer would make them.
"""

from __future__ import annotations

import contextlib

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from hypothesis import given
from hypothesis import strategies as st

from airlane.wire.errors import DecodeError
from airlane.wire.libp2p.identify import MAX_LISTED, Identify
from airlane.wire.libp2p.identity import (
    ECDSA,
    ED25519,
    MAX_KEY_BYTES,
    RSA,
    SECP256K1,
    Identity,
    PeerId,
    PublicKey,
    b58decode,
    b58encode,
)
from airlane.wire.libp2p.multiaddr import MAX_ADDRESS, Multiaddr
from airlane.wire.libp2p.protobuf import Writer
from airlane.wire.libp2p.varint import encode_uvarint

from .chunking import PROPERTY

SEED = bytes(range(32))
PEER = Identity.from_seed(SEED).peer_id

# -- base58 -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "encoded"),
    [
        ("", ""),
        ("61", "2g"),
        ("626262", "a3gV"),
        ("636363", "aPEr"),
        ("73696d706c792061206c6f6e6720737472696e67", "2cFupjhnEsSn59qHXstmK2ffpLv2"),
        (
            "00eb15231dfceb60925886b67d065299925915aeb172c06647",
            "1NS17iag9jJgTHD1VXjvLCEnZuQ3rJDE9L",
        ),
        ("516b6fcd0f", "ABnLTmg"),
        ("572e4794", "3EFU7m"),
        ("00000000000000000000", "1111111111"),
    ],
)
def test_base58_bitcoin_vectors(raw: str, encoded: str) -> None:
    # Bitcoin Core's base58_encode_decode.json: the same alphabet as multibase's base58btc.
    assert b58encode(bytes.fromhex(raw)) == encoded
    assert b58decode(encoded) == bytes.fromhex(raw)


@PROPERTY
@given(st.integers(0, 5), st.binary(max_size=60))
def test_base58_round_trips_with_leading_zeros(zeros: int, body: bytes) -> None:
    data = b"\0" * zeros + body
    encoded = b58encode(data)
    assert b58decode(encoded) == data
    # Each leading zero byte is one leading "1", no more, no fewer.
    assert len(encoded) - len(encoded.lstrip("1")) == len(data) - len(data.lstrip(b"\0"))


@pytest.mark.parametrize("text", ["0", "O", "I", "l", "abc+", "12D3 Koo", "é", "\x00"])
def test_base58_bad_characters_raise(text: str) -> None:
    with pytest.raises(DecodeError, match="not base58"):
        b58decode(text)


# -- keys and peer ids ------------------------------------------------------------------------


def test_ed25519_peer_id_text_form() -> None:
    identity = Identity()
    text = str(identity.peer_id)
    # An identity multihash of the 36-byte key encoding: 0x00, 0x24, 08 01 12 20, the key.
    assert text.startswith("12D3KooW")
    assert identity.peer_id.multihash[:6] == b"\x00\x24\x08\x01\x12\x20"
    assert PeerId.parse(text) == identity.peer_id


def test_public_key_encoding_is_the_schemas() -> None:
    key = Identity.from_seed(SEED).public_key
    assert key.key_type == ED25519 and len(key.data) == 32
    assert key.encode() == b"\x08\x01\x12\x20" + key.data
    assert PublicKey.decode(key.encode()) == key


def test_from_seed_is_deterministic() -> None:
    first, second = Identity.from_seed(SEED), Identity.from_seed(SEED)
    assert first.peer_id == second.peer_id and str(first.peer_id) == str(PEER)
    assert Identity.from_bytes(SEED).peer_id == first.peer_id  # a bare seed: Ed25519
    assert Identity.from_seed(bytes(32)).peer_id != first.peer_id
    # A generated identity comes back from what it stores.
    fresh = Identity()
    assert Identity.from_bytes(fresh.to_bytes()).peer_id == fresh.peer_id


def test_identity_peer_id_holds_its_key() -> None:
    identity = Identity()
    assert identity.peer_id.public_key() == identity.public_key
    assert identity.peer_id.matches(identity.public_key)
    assert not identity.peer_id.matches(Identity().public_key)


def test_ed25519_signatures_verify() -> None:
    identity = Identity()
    signature = identity.sign(b"message")
    assert identity.public_key.verify(signature, b"message")
    assert not identity.public_key.verify(signature, b"messagE")
    assert not identity.public_key.verify(signature[:-1] + bytes([signature[-1] ^ 1]), b"message")
    assert not Identity().public_key.verify(signature, b"message")
    # A key of the wrong length is a False, not an exception.
    assert not PublicKey(ED25519, b"short").verify(signature, b"message")


def test_secp256k1_key_verifies_and_has_an_identity_peer_id() -> None:
    private = ec.generate_private_key(ec.SECP256K1())
    point = private.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint
    )
    key = PublicKey(SECP256K1, point)
    signature = private.sign(b"message", ec.ECDSA(hashes.SHA256()))
    assert key.verify(signature, b"message")
    assert not key.verify(signature, b"other")
    assert not PublicKey(SECP256K1, b"\x02" + bytes(32)).verify(signature, b"message")
    # 37 bytes encoded: still an identity multihash, "16Uiu2..." in text.
    peer = PeerId.from_public_key(key)
    assert str(peer).startswith("16Uiu2")
    assert peer.public_key() == key


def test_ecdsa_p256_key_verifies_and_has_a_hashed_peer_id() -> None:
    private = ec.generate_private_key(ec.SECP256R1())
    der = private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    key = PublicKey(ECDSA, der)
    signature = private.sign(b"message", ec.ECDSA(hashes.SHA256()))
    assert key.verify(signature, b"message")
    assert not key.verify(signature, b"other")
    peer = PeerId.from_public_key(key)
    assert peer.multihash[:2] == b"\x12\x20" and len(peer.multihash) == 34
    assert str(peer).startswith("Qm")
    assert peer.public_key() is None  # a hash does not hold the key
    assert peer.matches(key)
    # An ECDSA key announced as RSA does not verify (the loaded type must match).
    assert not PublicKey(RSA, der).verify(signature, b"message")


@pytest.fixture(scope="module")
def rsa_private() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def test_rsa_key_verifies_and_has_a_hashed_peer_id(rsa_private: rsa.RSAPrivateKey) -> None:
    der = rsa_private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    key = PublicKey(RSA, der)
    signature = rsa_private.sign(b"message", padding.PKCS1v15(), hashes.SHA256())
    assert key.verify(signature, b"message")
    assert not key.verify(signature, b"other")
    assert len(key.encode()) > 42
    peer = PeerId.from_public_key(key)
    assert str(peer).startswith("Qm")
    assert PeerId.parse(str(peer)) == peer
    assert peer.public_key() is None
    assert not PublicKey(ECDSA, der).verify(signature, b"message")


@pytest.mark.parametrize("key_type", [RSA, ECDSA, SECP256K1, ED25519])
def test_garbage_key_data_verifies_false(key_type: int) -> None:
    assert not PublicKey(key_type, b"\x30\x03garbage").verify(b"sig", b"message")


def test_public_key_decode_refuses_unknown_types_missing_fields_and_oversize() -> None:
    with pytest.raises(DecodeError, match="unknown public key type 4"):
        PublicKey.decode(Writer().varint(1, 4).data(2, b"k").finish())
    with pytest.raises(DecodeError, match="without its type or data"):
        PublicKey.decode(Writer().data(2, b"k").finish())
    with pytest.raises(DecodeError, match="without its type or data"):
        PublicKey.decode(Writer().varint(1, ED25519).finish())
    with pytest.raises(DecodeError, match="without its type or data"):
        PublicKey.decode(b"")
    # A field of the wrong wire type does not count as the field.
    with pytest.raises(DecodeError, match="without its type or data"):
        PublicKey.decode(Writer().data(1, b"\x01").data(2, b"k").finish())
    oversize = Writer().varint(1, RSA).data(2, b"k" * MAX_KEY_BYTES).finish()
    with pytest.raises(DecodeError, match="public key of"):
        PublicKey.decode(oversize)


def test_public_key_decode_skips_unknown_fields() -> None:
    key = Identity().public_key
    assert PublicKey.decode(key.encode() + Writer().varint(9, 1).finish()) == key


@pytest.mark.parametrize(
    "multihash",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"\x00", id="identity-without-length"),
        pytest.param(b"\x00\x05abc", id="identity-wrong-length"),
        pytest.param(b"\x12\x20" + bytes(31), id="sha256-short"),
        pytest.param(b"\x12\x20" + bytes(33), id="sha256-long"),
        pytest.param(b"\x13\x20" + bytes(32), id="sha512-code"),
    ],
)
def test_peer_id_from_bytes_refuses_other_multihashes(multihash: bytes) -> None:
    with pytest.raises(DecodeError):
        PeerId.from_bytes(multihash)


@pytest.mark.parametrize("text", ["", "0OIl", "12D3KooW", "Qm"])
def test_peer_id_parse_refuses_bad_text(text: str) -> None:
    with pytest.raises(DecodeError):
        PeerId.parse(text)


def test_identity_peer_id_holding_garbage_raises_on_public_key() -> None:
    # A peer id is only a multihash: the key inside is read when asked for, and may be bad.
    peer = PeerId.from_bytes(b"\x00\x03abc")
    with pytest.raises(DecodeError):
        peer.public_key()


# -- multiaddr --------------------------------------------------------------------------------

ADDRESSES = [
    "/ip4/127.0.0.1/tcp/60000",
    "/ip4/0.0.0.0/tcp/0/ws",
    "/ip6/::1/tcp/8000/wss",
    "/ip6/2001:db8::ff00:42:8329/udp/443/quic-v1",
    "/dns4/node-01.example.org/tcp/443/wss",
    "/dns6/example.com/tcp/80/ws",
    "/dnsaddr/bootstrap.libp2p.io",
    "/dns/example.com/tcp/8000/tls/ws",
    f"/ip4/10.0.0.1/tcp/65535/ws/p2p/{PEER}",
    f"/p2p/{PEER}",
    "/ip4/1.2.3.4/udp/1/quic-v1/webtransport",
]


@pytest.mark.parametrize("text", ADDRESSES)
def test_multiaddr_text_and_bytes_round_trip(text: str) -> None:
    address = Multiaddr.parse(text)
    assert str(address) == text
    assert Multiaddr.from_bytes(address.to_bytes()) == address


def test_multiaddr_binary_form_is_the_specs() -> None:
    # ip4 = 0x04, tcp = 0x06 (2-byte port), ws = 477 (varint dd 03), dns4 = 54 (length-prefixed).
    assert Multiaddr.parse("/ip4/127.0.0.1/tcp/80/ws").to_bytes() == bytes.fromhex(
        "047f000001060050dd03"
    )
    assert Multiaddr.parse("/dns4/a.io/tcp/443/wss").to_bytes() == (
        b"\x36\x04a.io\x06\x01\xbb\xde\x03"
    )
    # p2p = 421 (a5 03), then the multihash behind its length.
    assert Multiaddr.parse(f"/p2p/{PEER}").to_bytes() == (
        b"\xa5\x03" + bytes([len(PEER.multihash)]) + PEER.multihash
    )


def test_multiaddr_certhash_round_trips() -> None:
    # /certhash/ holds a multibase-encoded multihash (here "u", base64url, of a SHA-256
    # multihash); its binary form is the multihash itself, so text -> bytes -> text is the
    # identity, as for every other protocol.
    text = (
        "/ip4/1.2.3.4/udp/1/quic-v1/webtransport"
        "/certhash/uEiDDq4_xNyDorZBH3TlGazyJdOWSwvo4PUo5YHFMrvDE8g"
    )
    address = Multiaddr.parse(text)
    assert Multiaddr.from_bytes(address.to_bytes()) == address
    # The binary value is the 34-byte multihash (0x12 0x20 + digest), not the text's bytes.
    assert address.to_bytes().endswith(
        b"\xd2\x03\x22\x12\x20"
        + bytes.fromhex("c3ab8ff13720e8ad9047dd39466b3c8974e592c2fa383d4a3960714caef0c4f2")
    )


def test_multiaddr_of() -> None:
    assert str(Multiaddr.of("127.0.0.1", 60000)) == "/ip4/127.0.0.1/tcp/60000"
    assert str(Multiaddr.of("::1", 8000, ws=True)) == "/ip6/::1/tcp/8000/ws"
    assert Multiaddr.of("192.168.1.2", 1, ws=True) == Multiaddr.parse("/ip4/192.168.1.2/tcp/1/ws")


def test_multiaddr_with_and_without_peer() -> None:
    base = Multiaddr.of("127.0.0.1", 60000, ws=True)
    other = Identity().peer_id
    with_peer = base.with_peer(PEER)
    assert str(with_peer) == f"/ip4/127.0.0.1/tcp/60000/ws/p2p/{PEER}"
    assert with_peer.peer_id() == PEER
    assert with_peer.without_peer() == base
    assert base.peer_id() is None and base.without_peer() == base
    # Replacing the peer keeps a single /p2p/ part, at the end.
    assert with_peer.with_peer(other) == base.with_peer(other)
    assert with_peer.value("tcp") == "60000" and with_peer.value("udp") is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "ip4/1.2.3.4",
        "/",
        "/ip4",
        "/ip4/",
        "/ip4/1.2.3.4/",
        "/ip4/300.1.1.1",
        "/ip4/::1",
        "/ip6/1.2.3.4",
        "/ip4/1.2.3.4/tcp/65536",
        "/ip4/1.2.3.4/tcp/-1",
        "/ip4/1.2.3.4/tcp/http",
        "/ip4/1.2.3.4/tcp/+80",
        "/ip4/1.2.3.4/tcp/8_0",
        "/ip4/1.2.3.4/udp/1/quic-v1/webtransport/certhash/zNotBase64url",
        "/ip4/1.2.3.4/sctp/80",
        "/unix/tmp/sock",
        "/p2p/not-a-peer-id",
        "/p2p/QmShort",
    ],
)
def test_multiaddr_parse_refuses_bad_text(text: str) -> None:
    with pytest.raises(DecodeError):
        Multiaddr.parse(text)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\x04\x7f\x00\x00", id="ip4-truncated"),
        pytest.param(b"\x04\x7f\x00\x00\x01\x06\x00", id="tcp-truncated"),
        pytest.param(b"\x36\x05a.io", id="dns4-length-past-end"),
        pytest.param(b"\x36", id="dns4-length-missing"),
        pytest.param(b"\xa5", id="code-truncated"),
        pytest.param(b"\x84\x01\x00", id="unknown-code-132"),
        pytest.param(b"\x07", id="unknown-code-7"),
        pytest.param(b"\x80\x00", id="non-minimal-code"),
        pytest.param(b"\xa5\x03\x02\x12\x20", id="p2p-bad-multihash"),
        pytest.param(b"\x36\x02\xff\xfe", id="dns4-not-utf8"),
        pytest.param(b"\x36\x80\x04" + b"a" * MAX_ADDRESS, id="over-max-address"),
    ],
)
def test_multiaddr_from_bytes_refuses_bad_bytes(data: bytes) -> None:
    with pytest.raises(DecodeError):
        Multiaddr.from_bytes(data)


def test_multiaddr_every_truncation_raises_or_is_a_prefix() -> None:
    full = Multiaddr.parse(f"/dns4/node.example.org/tcp/443/wss/p2p/{PEER}")
    raw = full.to_bytes()
    for cut in range(len(raw)):
        try:
            parts = Multiaddr.from_bytes(raw[:cut]).parts
        except DecodeError:
            continue
        # Only a cut on a part boundary decodes, into the parts before it.
        assert parts == full.parts[: len(parts)]


@PROPERTY
@given(st.binary(max_size=80))
def test_multiaddr_from_random_bytes_raises_only_decode_error(data: bytes) -> None:
    try:
        address = Multiaddr.from_bytes(data)
    except DecodeError:
        return
    assert isinstance(str(address), str)


@PROPERTY
@given(st.sampled_from([4, 6, 273, 41, 54, 421, 477]), st.binary(max_size=40))
def test_multiaddr_from_known_code_and_random_value_raises_only_decode_error(
    code: int, value: bytes
) -> None:
    # Random bytes rarely start with a known code; these always do, so the value readers
    # (IP, port, peer id, UTF-8) are what is exercised.
    data = encode_uvarint(code) + encode_uvarint(len(value)) + value
    with contextlib.suppress(DecodeError):
        Multiaddr.from_bytes(data)


# -- identify ---------------------------------------------------------------------------------


def test_identify_round_trips() -> None:
    identity = Identity()
    message = Identify(
        public_key=identity.public_key.encode(),
        listen_addrs=(Multiaddr.of("127.0.0.1", 60000, ws=True), Multiaddr.parse("/ip6/::1/tcp/1")),
        protocols=("/ipfs/id/1.0.0", "/vac/waku/lightpush/3.0.0"),
        observed_addr=Multiaddr.of("10.0.0.2", 51234),
        protocol_version="ipfs/0.1.0",
        agent_version="airlane/1.0",
    )
    assert Identify.decode(message.encode()) == message
    assert Identify.decode(Identify().encode()) == Identify()


def test_identify_skips_undecodable_addresses() -> None:
    good = Multiaddr.of("127.0.0.1", 60000)
    data = (
        Writer()
        .data(2, b"\xff\xff")  # an unknown protocol code
        .data(2, good.to_bytes())
        .data(2, b"\x04\x01")  # truncated
        .data(4, b"\x99\x99\x01")  # an observed address we cannot read
        .string(5, "ipfs/0.1.0")
        .finish()
    )
    decoded = Identify.decode(data)
    assert decoded.listen_addrs == (good,)
    assert decoded.observed_addr is None


def test_identify_caps_protocols_and_addresses() -> None:
    many = Identify(
        listen_addrs=tuple(Multiaddr.of("127.0.0.1", port) for port in range(1, 101)),
        protocols=tuple(f"/p/{index}" for index in range(100)),
    )
    decoded = Identify.decode(many.encode())
    assert len(decoded.protocols) == MAX_LISTED == 64
    assert decoded.protocols == many.protocols[:64]
    assert decoded.listen_addrs == many.listen_addrs[:64]


def test_identify_refuses_bad_text() -> None:
    with pytest.raises(DecodeError, match="identify protocol"):
        Identify.decode(Writer().data(3, b"\xff").finish())
    with pytest.raises(DecodeError, match="agentVersion"):
        Identify.decode(Writer().data(6, b"\xc3").finish())


@PROPERTY
@given(st.binary(max_size=200))
def test_identify_on_random_bytes_raises_only_decode_error(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        Identify.decode(data)

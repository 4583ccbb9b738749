"""libp2p's Noise channel (``Noise_XX_25519_ChaChaPoly_SHA256`` with the libp2p handshake
payload): two `NoiseSession` objects talking to each other.

The handshake is what stands between a hostile peer and everything above it, so besides the
happy path every byte it carries is tampered with: a flipped bit anywhere in a handshake or
transport message, a replayed frame, a short first message, a peer that is not the one
dialled, and random input, which may only raise `NoiseError` / `DecodeError` (the transport
closes the connection on those) and never anything else.
"""

from __future__ import annotations

import contextlib

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from hypothesis import given
from hypothesis import strategies as st

from airlane.wire.errors import DecodeError
from airlane.wire.libp2p.identity import Identity
from airlane.wire.libp2p.noise import (
    MAX_MESSAGE,
    MAX_PLAINTEXT,
    HandshakePayload,
    NoiseError,
    NoiseSession,
    _raw,
    _Symmetric,
)
from airlane.wire.libp2p.protobuf import Writer

from .chunking import PROPERTY, bytewise

INITIATOR = Identity.from_seed(b"\x01" * 32)
RESPONDER = Identity.from_seed(b"\x02" * 32)


def frames(stream: bytes) -> list[bytes]:
    """The bodies of the 2-byte-length frames of ``stream``."""
    bodies = []
    while stream:
        size = int.from_bytes(stream[:2], "big")
        bodies.append(stream[2 : 2 + size])
        stream = stream[2 + size :]
    return bodies


def flip(framed: bytes, bit: int) -> bytes:
    """``framed`` with one bit of its body (not its length) flipped."""
    data = bytearray(framed)
    data[2 + bit // 8] ^= 1 << (bit % 8)
    return bytes(data)


def handshake(
    initiator: NoiseSession | None = None, responder: NoiseSession | None = None
) -> tuple[NoiseSession, NoiseSession]:
    """Run the three XX messages between two sessions; both come back established."""
    initiator = initiator or NoiseSession(INITIATOR, initiator=True)
    responder = responder or NoiseSession(RESPONDER, initiator=False)
    assert responder.receive_data(initiator.initiate()) == []
    assert initiator.receive_data(responder.data_to_send()) == []
    assert responder.receive_data(initiator.data_to_send()) == []
    assert initiator.established and responder.established
    return initiator, responder


def test_handshake_proves_both_peer_ids() -> None:
    initiator = NoiseSession(INITIATOR, initiator=True, remote=RESPONDER.peer_id)
    responder = NoiseSession(RESPONDER, initiator=False)
    assert not initiator.established and not responder.established
    assert initiator.remote_peer is None
    handshake(initiator, responder)
    assert initiator.remote_peer == RESPONDER.peer_id
    assert responder.remote_peer == INITIATOR.peer_id
    assert initiator.data_to_send() == responder.data_to_send() == b""


def test_handshake_message_sizes() -> None:
    # -> e: 32 bytes; <- e, ee, s, es: 32 + 48 + payload + 16; -> s, se: 48 + payload + 16.
    initiator = NoiseSession(INITIATOR, initiator=True)
    responder = NoiseSession(RESPONDER, initiator=False)
    first = initiator.initiate()
    assert first[:2] == b"\x00\x20" and len(first) == 34
    responder.receive_data(first)
    second = responder.data_to_send()
    assert len(frames(second)) == 1 and len(frames(second)[0]) > 32 + 48 + 16
    initiator.receive_data(second)
    [third] = frames(initiator.data_to_send())
    assert len(third) > 48 + 16


def test_transport_messages_both_ways() -> None:
    initiator, responder = handshake()
    assert responder.receive_data(initiator.encrypt(b"hello")) == [b"hello"]
    assert initiator.receive_data(responder.encrypt(b"world")) == [b"world"]
    # Several frames at once come back in order, and an empty write is a frame too.
    stream = initiator.encrypt(b"a") + initiator.encrypt(b"") + initiator.encrypt(b"c")
    assert responder.receive_data(stream) == [b"a", b"", b"c"]
    # A ciphertext is the plaintext plus a 16-byte tag.
    assert len(initiator.encrypt(b"12345")) == 2 + 5 + 16


def test_transport_message_right_after_the_last_handshake_message() -> None:
    # The initiator may write data right behind its third message; it arrives in one read.
    initiator = NoiseSession(INITIATOR, initiator=True)
    responder = NoiseSession(RESPONDER, initiator=False)
    responder.receive_data(initiator.initiate())
    initiator.receive_data(responder.data_to_send())
    third = initiator.data_to_send() + initiator.encrypt(b"early")
    assert responder.receive_data(third) == [b"early"]


def test_large_plaintext_is_split_into_frames_and_comes_back_whole() -> None:
    initiator, responder = handshake()
    plaintext = bytes(range(256)) * 800  # 204,800 bytes
    stream = initiator.encrypt(plaintext)
    bodies = frames(stream)
    assert len(bodies) == 4  # ceil(204,800 / 65,519)
    assert all(len(body) <= MAX_MESSAGE for body in bodies)
    assert b"".join(responder.receive_data(stream)) == plaintext


def test_frame_length_limit() -> None:
    # The length is 2 bytes: a message is at most 65,535 bytes, tag included.
    initiator, responder = handshake()
    whole = initiator.encrypt(b"x" * MAX_PLAINTEXT)
    assert whole[:2] == b"\xff\xff" and len(whole) == 2 + MAX_MESSAGE
    split = initiator.encrypt(b"x" * (MAX_PLAINTEXT + 1))
    assert [len(body) for body in frames(split)] == [MAX_MESSAGE, 1 + 16]
    assert responder.receive_data(whole + split) == [
        b"x" * MAX_PLAINTEXT,
        b"x" * MAX_PLAINTEXT,
        b"x",
    ]


def test_bytes_delivered_one_at_a_time() -> None:
    initiator = NoiseSession(INITIATOR, initiator=True)
    responder = NoiseSession(RESPONDER, initiator=False)
    for chunk in bytewise(initiator.initiate()):
        assert responder.receive_data(chunk) == []
    for chunk in bytewise(responder.data_to_send()):
        assert initiator.receive_data(chunk) == []
    for chunk in bytewise(initiator.data_to_send()):
        assert responder.receive_data(chunk) == []
    assert responder.remote_peer == INITIATOR.peer_id
    received = [
        p for chunk in bytewise(initiator.encrypt(b"slowly")) for p in responder.receive_data(chunk)
    ]
    assert received == [b"slowly"]


def test_expected_remote_mismatch_raises() -> None:
    someone_else = Identity().peer_id
    initiator = NoiseSession(INITIATOR, initiator=True, remote=someone_else)
    responder = NoiseSession(RESPONDER, initiator=False)
    responder.receive_data(initiator.initiate())
    with pytest.raises(NoiseError, match=r"dialled .* but .* answered"):
        initiator.receive_data(responder.data_to_send())
    assert initiator.remote_peer is None and not initiator.established


def test_stream_muxers_in_the_payload_reach_the_other_side() -> None:
    initiator = NoiseSession(INITIATOR, initiator=True, muxers=("/yamux/1.0.0", "/mplex/6.7.0"))
    responder = NoiseSession(RESPONDER, initiator=False, muxers=("/mplex/6.7.0",))
    handshake(initiator, responder)
    assert responder.remote_muxers == ("/yamux/1.0.0", "/mplex/6.7.0")
    assert initiator.remote_muxers == ("/mplex/6.7.0",)


def test_handshake_payload_round_trips() -> None:
    payload = HandshakePayload(b"key", b"sig", ("/yamux/1.0.0", "/mplex/6.7.0"))
    assert HandshakePayload.decode(payload.encode()) == payload
    bare = HandshakePayload(b"key", b"sig")
    assert HandshakePayload.decode(bare.encode()) == bare
    # Extensions other than muxers (webtransport certhashes, field 1) are ignored, and so are
    # unknown fields; muxers past 16 are dropped.
    extensions = Writer().data(1, b"certhash")
    for index in range(20):
        extensions.string(2, f"/m/{index}")
    data = bare.encode() + Writer().varint(3, 1).data(4, extensions.finish()).finish()
    decoded = HandshakePayload.decode(data)
    assert decoded.identity_key == b"key"
    assert decoded.stream_muxers == tuple(f"/m/{index}" for index in range(16))


@pytest.mark.parametrize("message", [0, 1, 2])
def test_flipped_bit_in_any_handshake_message_fails(message: int) -> None:
    # Bits of every part of each message, sampled: a few at each end and a stride through the
    # middle (positions past the message's end wrap around to its start).
    size = 8 * (32 if message == 0 else 200)
    for bit in sorted({0, 1, 7, 8, 255, 256, 263, size - 1, *range(0, size, 97)}):
        with pytest.raises(NoiseError):
            tampered_handshake(message, bit)


def tampered_handshake(index: int, bit: int) -> None:
    """A handshake whose ``index``-th message has ``bit`` flipped; must raise NoiseError."""
    initiator = NoiseSession(INITIATOR, initiator=True)
    responder = NoiseSession(RESPONDER, initiator=False)
    sent = [initiator.initiate()]

    def deliver(data: bytes) -> bytes:
        return flip(data, bit % (8 * (len(data) - 2))) if len(sent) - 1 == index else data

    responder.receive_data(deliver(sent[0]))
    sent.append(responder.data_to_send())
    initiator.receive_data(deliver(sent[1]))
    sent.append(initiator.data_to_send())
    responder.receive_data(deliver(sent[2]))
    # A tampered first message (only an ephemeral key) is caught one message later, by the
    # initiator; the others by their receiver at once. Reaching here means nothing caught it.


@PROPERTY
@given(st.data())
def test_flipped_bit_in_a_transport_message_fails(data: st.DataObject) -> None:
    initiator, responder = handshake()
    framed = initiator.encrypt(data.draw(st.binary(max_size=64)))
    bit = data.draw(st.integers(0, 8 * (len(framed) - 2) - 1))
    with pytest.raises(NoiseError, match="failed authentication"):
        responder.receive_data(flip(framed, bit))


def test_replayed_transport_frame_fails() -> None:
    initiator, responder = handshake()
    framed = initiator.encrypt(b"pay me once")
    assert responder.receive_data(framed) == [b"pay me once"]
    with pytest.raises(NoiseError):
        responder.receive_data(framed)


def test_reordered_transport_frames_fail() -> None:
    initiator, responder = handshake()
    first, second = initiator.encrypt(b"1"), initiator.encrypt(b"2")
    with pytest.raises(NoiseError):
        responder.receive_data(second + first)


def test_frame_from_the_wrong_direction_fails() -> None:
    # Each direction has its own key: the initiator's own frame does not decrypt at home.
    initiator, _ = handshake()
    with pytest.raises(NoiseError):
        initiator.receive_data(initiator.encrypt(b"echo"))


@pytest.mark.parametrize("size", [0, 1, 16, 31])
def test_responder_refuses_a_first_message_shorter_than_32_bytes(size: int) -> None:
    responder = NoiseSession(RESPONDER, initiator=False)
    with pytest.raises(NoiseError, match="short Noise handshake message"):
        responder.receive_data(size.to_bytes(2, "big") + b"\x09" * size)


@pytest.mark.parametrize("size", [0, 40, 32 + 48 + 15])
def test_initiator_refuses_a_short_second_message(size: int) -> None:
    initiator = NoiseSession(INITIATOR, initiator=True)
    initiator.initiate()
    with pytest.raises(NoiseError):
        initiator.receive_data(size.to_bytes(2, "big") + b"\x09" * size)


def test_responder_refuses_a_short_third_message() -> None:
    initiator = NoiseSession(INITIATOR, initiator=True)
    responder = NoiseSession(RESPONDER, initiator=False)
    responder.receive_data(initiator.initiate())
    responder.data_to_send()
    with pytest.raises(NoiseError, match="short Noise handshake message"):
        responder.receive_data(b"\x00\x2f" + bytes(47))


def test_responder_refuses_a_low_order_ephemeral_key() -> None:
    # An all-zero X25519 key gives an all-zero shared secret, which the cryptography package
    # refuses with ValueError; a hostile first message must still end as NoiseError.
    responder = NoiseSession(RESPONDER, initiator=False)
    with pytest.raises(NoiseError):
        responder.receive_data(b"\x00\x20" + bytes(32))


def test_initiator_refuses_a_low_order_ephemeral_key() -> None:
    initiator = NoiseSession(INITIATOR, initiator=True)
    initiator.initiate()
    with pytest.raises(NoiseError):
        initiator.receive_data((32 + 48).to_bytes(2, "big") + bytes(32 + 48))


def test_initiator_refuses_a_low_order_static_key() -> None:
    # The responder's static key travels encrypted, so a hostile responder builds message 2 by
    # hand (with the module's own SymmetricState) to put an all-zero static key in it.
    initiator = NoiseSession(INITIATOR, initiator=True)
    remote_ephemeral = initiator.initiate()[2:]
    symmetric = _Symmetric()
    symmetric.mix_hash(remote_ephemeral)
    symmetric.mix_hash(b"")  # the first message's empty payload
    ephemeral = X25519PrivateKey.generate()
    symmetric.mix_hash(_raw(ephemeral.public_key()))
    symmetric.mix_key(ephemeral.exchange(X25519PublicKey.from_public_bytes(remote_ephemeral)))
    body = _raw(ephemeral.public_key()) + symmetric.encrypt_and_hash(bytes(32))
    with pytest.raises(NoiseError):
        initiator.receive_data(len(body).to_bytes(2, "big") + body)


def test_initiator_must_initiate_first() -> None:
    initiator = NoiseSession(INITIATOR, initiator=True)
    with pytest.raises(NoiseError, match="unexpected Noise handshake message"):
        initiator.receive_data(
            b"\x00\x20" + X25519PrivateKey.generate().public_key().public_bytes_raw()
        )
    with pytest.raises(ValueError, match="only a fresh initiator"):
        NoiseSession(RESPONDER, initiator=False).initiate()
    started = NoiseSession(INITIATOR, initiator=True)
    started.initiate()
    with pytest.raises(ValueError, match="only a fresh initiator"):
        started.initiate()


def test_encrypt_before_the_handshake_raises() -> None:
    with pytest.raises(ValueError, match="handshake is not done"):
        NoiseSession(INITIATOR, initiator=True).encrypt(b"too soon")


def test_signature_by_another_key_fails() -> None:
    # A responder that signs its Noise key with one identity but presents another's key.
    responder = NoiseSession(RESPONDER, initiator=False)
    forged = HandshakePayload.decode(responder._payload)  # the signature binds RESPONDER
    responder._payload = HandshakePayload(
        Identity().public_key.encode(), forged.identity_sig
    ).encode()
    initiator = NoiseSession(INITIATOR, initiator=True)
    responder.receive_data(initiator.initiate())
    with pytest.raises(NoiseError, match="signature over its Noise key is bad"):
        initiator.receive_data(responder.data_to_send())


@PROPERTY
@given(st.lists(st.binary(max_size=120), max_size=4), st.binary(max_size=40))
def test_random_bytes_into_a_fresh_responder(messages: list[bytes], junk: bytes) -> None:
    # Framed random messages reach the handshake code; the raw junk exercises the framing.
    responder = NoiseSession(RESPONDER, initiator=False)
    stream = b"".join(len(m).to_bytes(2, "big") + m for m in messages) + junk
    with contextlib.suppress(NoiseError, DecodeError):
        assert responder.receive_data(stream) == []


@PROPERTY
@given(st.binary(min_size=0, max_size=300))
def test_random_second_message_into_an_initiator(body: bytes) -> None:
    initiator = NoiseSession(INITIATOR, initiator=True)
    initiator.initiate()
    with pytest.raises((NoiseError, DecodeError)):
        initiator.receive_data(len(body).to_bytes(2, "big") + body)

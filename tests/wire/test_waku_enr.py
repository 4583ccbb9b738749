"""Node records for peer exchange, and the secp256k1 identities they need: Keccak-256 against
known digests (js-sha3's for a multi-block input), RLP both ways and against hostile bytes,
EIP-778's own example record verified, records made here read back with their Waku fields, a
tampered or foreign record refused, and a Noise handshake between secp256k1 identities.
"""

from __future__ import annotations

import base64
import contextlib

import pytest
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from hypothesis import given
from hypothesis import strategies as st

from airlane.wire.errors import DecodeError
from airlane.wire.libp2p import Identity, Multiaddr, NoiseSession
from airlane.wire.libp2p.identity import SECP256K1
from airlane.wire.waku.enr import Enr, rlp_decode, rlp_encode
from airlane.wire.waku.keccak import keccak256

from .chunking import PROPERTY

ORDER = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
# EIP-778's example record (127.0.0.1, udp 30303), signed with its published key.
EXAMPLE = (
    "-IS4QHCYrYZbAKWCBRlAy5zzaDZXJBGkcnh4MHcBFZntXNFrdvJjX04jRzjzCBOonrkTfj499SZuOh8R33Ls8RRcy5wB"
    "gmlkgnY0gmlwhH8AAAGJc2VjcDI1NmsxoQPKY0yuDUmstAHYpMa2_oxVtw0RW_QAdpzBQA8yWM0xOIN1ZHCCdl8"
)


def _example() -> bytes:
    return base64.urlsafe_b64decode(EXAMPLE + "=" * (-len(EXAMPLE) % 4))


@pytest.mark.parametrize(
    ("data", "digest"),
    [
        (b"", "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470"),
        (b"abc", "4e03657aea45a94fc7d47ba826c8d667c0d1e6e33a64a036ec44f58fa12d6c45"),
        # Two blocks (the rate is 136 bytes), as js-sha3's keccak256 computes it.
        (b"a" * 200, "96ea54061def936c4be90b518992fdc6f12f535068a256229aca54267b4d084d"),
    ],
)
def test_keccak256_known_digests(data: bytes, digest: str) -> None:
    assert keccak256(data).hex() == digest


_RLP = st.recursive(
    st.binary(max_size=80), lambda children: st.lists(children, max_size=5), max_leaves=20
)


@PROPERTY
@given(_RLP)
def test_rlp_round_trips(item: bytes | list[object]) -> None:
    assert rlp_decode(rlp_encode(item)) == item  # type: ignore[arg-type]


@PROPERTY
@given(st.binary(max_size=200))
def test_rlp_refuses_hostile_bytes_with_decode_error_only(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        rlp_decode(data)


def test_rlp_known_encodings() -> None:
    assert rlp_encode(b"dog") == b"\x83dog"
    assert rlp_encode([b"cat", b"dog"]) == b"\xc8\x83cat\x83dog"
    assert rlp_encode(b"") == b"\x80"
    assert rlp_encode(b"\x0f") == b"\x0f"
    assert rlp_encode(b"a" * 56) == b"\xb8\x38" + b"a" * 56


def test_the_eip_778_example_verifies_and_encodes_back() -> None:
    record = Enr.decode(_example())
    assert record.seq == 1
    assert record.value(b"ip") == bytes([127, 0, 0, 1])
    assert record.encode() == _example()


def test_a_record_made_here_reads_back_with_its_waku_fields() -> None:
    identity = Identity.generate("secp256k1")
    assert identity.secp256k1 is not None
    ws = Multiaddr.parse("/ip4/127.0.0.1/tcp/8645/ws")
    made = Enr.make(
        identity.secp256k1, seq=7, multiaddrs=(ws,), ip="10.0.0.2", tcp=60000, cluster=42,
        shards=(0, 3),
    )  # fmt: skip
    raw = made.encode()
    record = Enr.decode(raw)
    assert record.peer_id() == identity.peer_id
    assert record.multiaddrs() == [ws]
    assert record.value(b"rs") == bytes([0, 42, 2, 0, 0, 0, 3])
    assert record.value(b"waku2") == bytes([0b1111])
    assert record.value(b"tcp") == (60000).to_bytes(2, "big")
    keys = [key for key, _ in record.pairs]
    assert keys == sorted(keys)
    s = int.from_bytes(record.signature[32:], "big")
    assert s <= ORDER // 2  # low s: what noble's verifier (js-waku) insists on


def test_tampered_unsigned_and_oversized_records_are_refused() -> None:
    identity = Identity.generate("secp256k1")
    assert identity.secp256k1 is not None
    raw = Enr.make(identity.secp256k1, seq=1).encode()
    with pytest.raises(DecodeError, match="signature"):
        Enr.decode(raw[:-1] + bytes([raw[-1] ^ 1]))
    with pytest.raises(DecodeError):
        Enr.decode(b"\xc0")
    with pytest.raises(DecodeError, match="bytes"):
        Enr.decode(rlp_encode([b"x" * 64, b"\x01", b"id", b"v4", b"k", b"v" * 300]))
    no_scheme = rlp_encode([b"x" * 64, b"\x01", b"secp256k1", b"\x02" * 33])
    with pytest.raises(DecodeError, match="v4"):
        Enr.decode(no_scheme)


def test_secp256k1_identities_store_sign_low_s_and_handshake() -> None:
    identity = Identity.generate("secp256k1")
    assert str(identity.peer_id).startswith("16Uiu2")
    assert identity.public_key.key_type == SECP256K1
    again = Identity.from_bytes(identity.to_bytes())
    assert again.peer_id == identity.peer_id
    for _ in range(20):
        signature = identity.sign(b"message")
        assert decode_dss_signature(signature)[1] <= ORDER // 2
        assert identity.public_key.verify(signature, b"message")
    ed = Identity.generate("ed25519")
    assert Identity.from_bytes(ed.to_bytes()).peer_id == ed.peer_id
    with pytest.raises(DecodeError):
        Identity.from_bytes(b"\x08\x07\x12\x00")
    initiator = NoiseSession(identity, initiator=True, remote=ed.peer_id)
    responder = NoiseSession(ed, initiator=False)
    responder.receive_data(initiator.initiate())
    initiator.receive_data(responder.data_to_send())
    assert responder.receive_data(initiator.data_to_send() + initiator.encrypt(b"hi")) == [b"hi"]
    assert responder.remote_peer == identity.peer_id

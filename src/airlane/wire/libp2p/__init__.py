"""libp2p, sans-I/O: what a Waku node needs of it, and nothing it does not.

- `identity`: Ed25519 identities, the ``PublicKey`` message, peer ids (base58btc).
- `noise`: the Noise XX secure channel with libp2p's handshake payload.
- `multistream`: multistream-select 1.0 (which protocol follows, on a connection or stream).
- `mplex`: the stream multiplexer js-waku speaks.
- `identify`: the identify message, and ping's constants.
- `multiaddr`: addresses in text and binary form.
- `varint`, `protobuf`: the encodings under all of them.

Why written here and not taken from py-libp2p: that library is built on trio (the gateway runs
on asyncio) and pins ``protobuf<7`` (grpcio-tools here uses 7); the cryptography itself comes
from the `cryptography` package. docs/waku.md says more.
"""

from airlane.wire.libp2p.identify import (
    IDENTIFY_PROTOCOL,
    IDENTIFY_PUSH_PROTOCOL,
    PING_PROTOCOL,
    PING_SIZE,
    Identify,
)
from airlane.wire.libp2p.identity import Identity, PeerId, PublicKey
from airlane.wire.libp2p.mplex import (
    MPLEX_PROTOCOL,
    DataReceived,
    MplexConnection,
    MplexError,
    StreamEnded,
    StreamKey,
    StreamOpened,
    StreamReset,
)
from airlane.wire.libp2p.multiaddr import Multiaddr
from airlane.wire.libp2p.multistream import (
    MultistreamDialer,
    MultistreamListener,
    NegotiationFailed,
    Selected,
)
from airlane.wire.libp2p.noise import NOISE_PROTOCOL, NoiseError, NoiseSession
from airlane.wire.libp2p.varint import PrefixedReader, encode_uvarint, prefixed

__all__ = [
    "IDENTIFY_PROTOCOL",
    "IDENTIFY_PUSH_PROTOCOL",
    "MPLEX_PROTOCOL",
    "NOISE_PROTOCOL",
    "PING_PROTOCOL",
    "PING_SIZE",
    "DataReceived",
    "Identify",
    "Identity",
    "MplexConnection",
    "MplexError",
    "Multiaddr",
    "MultistreamDialer",
    "MultistreamListener",
    "NegotiationFailed",
    "NoiseError",
    "NoiseSession",
    "PeerId",
    "PrefixedReader",
    "PublicKey",
    "Selected",
    "StreamEnded",
    "StreamKey",
    "StreamOpened",
    "StreamReset",
    "encode_uvarint",
    "prefixed",
]

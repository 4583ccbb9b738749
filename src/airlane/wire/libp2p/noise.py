"""libp2p's Noise channel, sans-I/O: ``Noise_XX_25519_ChaChaPoly_SHA256`` with the libp2p
handshake payload, on either side of a connection.

The three handshake messages and every transport message travel behind a 2-byte big-endian
length. The handshake's payloads carry each side's libp2p identity: its public key and a
signature over ``"noise-libp2p-static-key:" + its Noise static key``, so the channel ends up
bound to a peer id. A transport message holds at most 65,535 bytes, so `NoiseSession.encrypt`
cuts larger writes into several.

    session = NoiseSession(identity, initiator=False)
    for plaintext in session.receive_data(data):   # raises NoiseError on a bad peer
        ...
    send(session.data_to_send())                   # handshake replies
    send(session.encrypt(b"..."))                  # once `session.established`

Cryptography comes from the `cryptography` package; only the Noise state machine is here.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from airlane.wire.errors import DecodeError
from airlane.wire.libp2p.identity import Identity, PeerId, PublicKey
from airlane.wire.libp2p.protobuf import BYTES, Writer, fields, text

__all__ = ["NOISE_PROTOCOL", "HandshakePayload", "NoiseError", "NoiseSession"]

NOISE_PROTOCOL = "/noise"
"""The multistream-select name of the channel."""
_NAME = b"Noise_XX_25519_ChaChaPoly_SHA256"  # exactly 32 bytes: it is the initial hash
_SIGNED_PREFIX = b"noise-libp2p-static-key:"
MAX_MESSAGE = 65535
"""The largest Noise message, tag included."""
MAX_PLAINTEXT = MAX_MESSAGE - 16
_KEY_BYTES = 32


class NoiseError(DecodeError):
    """The peer's handshake or a transport message failed: a bad key, signature or tag."""


def _raw(key: X25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _dh(private: X25519PrivateKey, public: X25519PublicKey) -> bytes:
    """X25519; a peer's low-order key (an all-zero shared secret) is its fault."""
    try:
        return private.exchange(public)
    except ValueError:
        raise NoiseError("the peer sent a low-order X25519 key") from None


def _hkdf(chaining_key: bytes, material: bytes) -> tuple[bytes, bytes]:
    temp = hmac.digest(chaining_key, material, "sha256")
    first = hmac.digest(temp, b"\x01", "sha256")
    return first, hmac.digest(temp, first + b"\x02", "sha256")


class _Cipher:
    """A Noise CipherState: a key and the nonce counter."""

    __slots__ = ("_aead", "nonce")

    def __init__(self, key: bytes) -> None:
        self._aead = ChaCha20Poly1305(key)
        self.nonce = 0

    def _next_nonce(self) -> bytes:
        if self.nonce >= (1 << 64) - 1:
            raise NoiseError("Noise nonce exhausted")
        nonce = b"\0\0\0\0" + self.nonce.to_bytes(8, "little")
        self.nonce += 1
        return nonce

    def encrypt(self, associated: bytes, plaintext: bytes) -> bytes:
        return self._aead.encrypt(self._next_nonce(), plaintext, associated)

    def decrypt(self, associated: bytes, ciphertext: bytes) -> bytes:
        try:
            return self._aead.decrypt(self._next_nonce(), ciphertext, associated)
        except InvalidTag:
            raise NoiseError("Noise message failed authentication") from None


class _Symmetric:
    """The Noise SymmetricState of the handshake."""

    __slots__ = ("cipher", "ck", "h")

    def __init__(self) -> None:
        self.h = _NAME
        self.ck = _NAME
        self.cipher: _Cipher | None = None
        self.mix_hash(b"")  # the empty prologue

    def mix_hash(self, data: bytes) -> None:
        self.h = hashlib.sha256(self.h + data).digest()

    def mix_key(self, material: bytes) -> None:
        self.ck, key = _hkdf(self.ck, material)
        self.cipher = _Cipher(key)

    def encrypt_and_hash(self, plaintext: bytes) -> bytes:
        out = plaintext if self.cipher is None else self.cipher.encrypt(self.h, plaintext)
        self.mix_hash(out)
        return out

    def decrypt_and_hash(self, ciphertext: bytes) -> bytes:
        out = ciphertext if self.cipher is None else self.cipher.decrypt(self.h, ciphertext)
        self.mix_hash(ciphertext)
        return out

    def split(self) -> tuple[_Cipher, _Cipher]:
        first, second = _hkdf(self.ck, b"")
        return _Cipher(first), _Cipher(second)


@dataclass(frozen=True, slots=True)
class HandshakePayload:
    """What a side proves in the handshake: its libp2p key, a signature binding its Noise
    static key to it, and (optionally) the stream muxers it speaks."""

    identity_key: bytes
    identity_sig: bytes
    stream_muxers: tuple[str, ...] = ()

    def encode(self) -> bytes:
        """The ``NoiseHandshakePayload`` Protobuf."""
        writer = Writer().data(1, self.identity_key).data(2, self.identity_sig)
        if self.stream_muxers:
            extensions = Writer()
            for muxer in self.stream_muxers:
                extensions.string(2, muxer)
            writer.data(4, extensions.finish())
        return writer.finish()

    @classmethod
    def decode(cls, data: bytes) -> HandshakePayload:
        """Read the Protobuf; unknown fields and extensions are ignored."""
        key = sig = b""
        muxers: list[str] = []
        for number, wire_type, value in fields(data):
            if wire_type != BYTES or not isinstance(value, bytes):
                continue
            if number == 1:
                key = value
            elif number == 2:
                sig = value
            elif number == 4:
                for inner, inner_type, item in fields(value):
                    if inner == 2 and inner_type == BYTES and len(muxers) < 16:
                        muxers.append(text(item, "stream muxer"))
        return cls(key, sig, tuple(muxers))


class NoiseSession:
    """One side of a libp2p Noise channel. See the module docstring."""

    def __init__(
        self,
        identity: Identity,
        *,
        initiator: bool,
        remote: PeerId | None = None,
        muxers: tuple[str, ...] = (),
    ) -> None:
        self.identity = identity
        self.initiator = initiator
        self.expected_remote = remote
        """The peer a dialer meant to reach: the handshake fails if another answers."""
        self.remote_peer: PeerId | None = None
        """The peer proven by the handshake (set once it is done)."""
        self.remote_muxers: tuple[str, ...] = ()
        """The stream muxers the peer listed in its payload, if any."""
        self._static = X25519PrivateKey.generate()
        self._ephemeral = X25519PrivateKey.generate()
        self._remote_ephemeral: X25519PublicKey | None = None
        self._remote_static: X25519PublicKey | None = None
        self._symmetric: _Symmetric | None = _Symmetric()
        self._send: _Cipher | None = None
        self._receive: _Cipher | None = None
        self._step = 0  # handshake messages exchanged so far
        self._buffer = bytearray()
        self._out = bytearray()
        signed = identity.sign(_SIGNED_PREFIX + _raw(self._static.public_key()))
        self._payload = HandshakePayload(identity.public_key.encode(), signed, muxers).encode()

    @property
    def established(self) -> bool:
        """The handshake is done: `encrypt` may be called and data is decrypted."""
        return self._send is not None

    def initiate(self) -> bytes:
        """The initiator's first message (``-> e``), framed."""
        if not self.initiator or self._step != 0:
            raise ValueError("only a fresh initiator sends the first handshake message")
        symmetric = self._symmetric
        assert symmetric is not None
        ephemeral = _raw(self._ephemeral.public_key())
        symmetric.mix_hash(ephemeral)
        message = ephemeral + symmetric.encrypt_and_hash(b"")
        self._step = 1
        return _frame(message)

    def data_to_send(self) -> bytes:
        """Handshake bytes produced by `receive_data`, to write to the connection."""
        out = bytes(self._out)
        self._out.clear()
        return out

    def receive_data(self, data: bytes) -> list[bytes]:
        """Take bytes from the connection; return the plaintexts they complete.

        Raises:
            NoiseError: a handshake or transport message failed (close the connection).
        """
        buffer = self._buffer
        buffer += data
        plaintexts: list[bytes] = []
        offset = 0
        while len(buffer) - offset >= 2:
            size = int.from_bytes(buffer[offset : offset + 2], "big")
            if len(buffer) - offset - 2 < size:
                break
            message = bytes(buffer[offset + 2 : offset + 2 + size])
            offset += 2 + size
            if self._receive is not None:
                plaintexts.append(self._receive.decrypt(b"", message))
            else:
                self._handshake(message)
        del buffer[:offset]
        return plaintexts

    def encrypt(self, plaintext: bytes) -> bytes:
        """``plaintext`` as framed transport messages (several past 65,519 bytes)."""
        cipher = self._send
        if cipher is None:
            raise ValueError("the Noise handshake is not done")
        if len(plaintext) <= MAX_PLAINTEXT:
            return _frame(cipher.encrypt(b"", plaintext))
        view = memoryview(plaintext)
        return b"".join(
            _frame(cipher.encrypt(b"", bytes(view[start : start + MAX_PLAINTEXT])))
            for start in range(0, len(plaintext), MAX_PLAINTEXT)
        )

    # -- the XX pattern ---------------------------------------------------------------------

    def _handshake(self, message: bytes) -> None:
        symmetric = self._symmetric
        if symmetric is None:
            raise NoiseError("unexpected Noise handshake message")
        step = self._step
        if not self.initiator and step == 0:  # -> e
            self._remote_ephemeral = self._read_key(message[:_KEY_BYTES])
            symmetric.mix_hash(message[:_KEY_BYTES])
            symmetric.decrypt_and_hash(message[_KEY_BYTES:])
            ephemeral = _raw(self._ephemeral.public_key())  # <- e, ee, s, es
            symmetric.mix_hash(ephemeral)
            symmetric.mix_key(_dh(self._ephemeral, self._remote_ephemeral))
            reply = ephemeral + symmetric.encrypt_and_hash(_raw(self._static.public_key()))
            symmetric.mix_key(_dh(self._static, self._remote_ephemeral))
            reply += symmetric.encrypt_and_hash(self._payload)
            self._out += _frame(reply)
            self._step = 2
        elif self.initiator and step == 1:  # <- e, ee, s, es
            if len(message) < _KEY_BYTES + _KEY_BYTES + 16:
                raise NoiseError("short Noise handshake message")
            remote_ephemeral = self._read_key(message[:_KEY_BYTES])
            symmetric.mix_hash(message[:_KEY_BYTES])
            symmetric.mix_key(_dh(self._ephemeral, remote_ephemeral))
            static = symmetric.decrypt_and_hash(message[_KEY_BYTES : 2 * _KEY_BYTES + 16])
            self._remote_static = self._read_key(static)
            symmetric.mix_key(_dh(self._ephemeral, self._remote_static))
            self._verify(symmetric.decrypt_and_hash(message[2 * _KEY_BYTES + 16 :]))
            reply = symmetric.encrypt_and_hash(_raw(self._static.public_key()))  # -> s, se
            symmetric.mix_key(_dh(self._static, remote_ephemeral))
            reply += symmetric.encrypt_and_hash(self._payload)
            self._out += _frame(reply)
            self._finish(symmetric)
        elif not self.initiator and step == 2:  # -> s, se
            if len(message) < _KEY_BYTES + 16:
                raise NoiseError("short Noise handshake message")
            static = symmetric.decrypt_and_hash(message[: _KEY_BYTES + 16])
            self._remote_static = self._read_key(static)
            assert self._remote_ephemeral is not None
            symmetric.mix_key(_dh(self._ephemeral, self._remote_static))
            self._verify(symmetric.decrypt_and_hash(message[_KEY_BYTES + 16 :]))
            self._finish(symmetric)
        else:
            raise NoiseError("unexpected Noise handshake message")

    def _finish(self, symmetric: _Symmetric) -> None:
        first, second = symmetric.split()
        self._send, self._receive = (first, second) if self.initiator else (second, first)
        self._symmetric = None

    @staticmethod
    def _read_key(raw: bytes) -> X25519PublicKey:
        if len(raw) != _KEY_BYTES:
            raise NoiseError("short Noise handshake message")
        try:
            return X25519PublicKey.from_public_bytes(raw)
        except ValueError:
            raise NoiseError("bad Noise public key") from None

    def _verify(self, payload_bytes: bytes) -> None:
        payload = HandshakePayload.decode(payload_bytes)
        key = PublicKey.decode(payload.identity_key)
        assert self._remote_static is not None
        if not key.verify(payload.identity_sig, _SIGNED_PREFIX + _raw(self._remote_static)):
            raise NoiseError(f"the peer's {key.type_name} signature over its Noise key is bad")
        peer = PeerId.from_public_key(key)
        if self.expected_remote is not None and peer != self.expected_remote:
            raise NoiseError(f"dialled {self.expected_remote} but {peer} answered")
        self.remote_peer = peer
        self.remote_muxers = payload.stream_muxers


def _frame(message: bytes) -> bytes:
    if len(message) > MAX_MESSAGE:
        raise ValueError("Noise message too long")
    return len(message).to_bytes(2, "big") + message

"""The C library and the Python codec, fed the same byte streams, decide the same.

A seeded random corpus (structured frames with valid CRCs, some mutated afterwards, and raw
random bytes) runs here for a bounded count; ``fuzz/airc_c_differential.py`` runs the same
check for as long as one likes (README, "Fuzzing").
"""

from __future__ import annotations

import random

import pytest

from airlane.wire.airc.errors import ErrorCode
from airlane.wire.airc.frame import (
    ACK_BIT,
    EOM_BIT,
    SIGNALLING_STREAM,
    Frame,
    crc16,
    encode_frame,
)
from airlane.wire.airc.signalling import GoAway, TimeRequest, encode_signal

from . import differential
from .binding import Library

CASES = 3000
"""Random inputs per run (about two seconds)."""


def corpus(seed: int, count: int) -> list[tuple[bytes, int]]:
    """``count`` inputs with a split point each, from ``seed``."""
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        raw = rng.randbytes(rng.randrange(1500))
        data = differential.structured(raw) if rng.random() < 0.85 else raw[:200]
        if data and rng.random() < 0.3:
            mutated = bytearray(data)
            for _ in range(rng.randrange(1, 4)):
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
            data = bytes(mutated)
        cases.append((data, rng.randrange(len(data) + 1)))
    return cases


def test_the_decoders_agree_on_a_random_corpus(library: Library) -> None:
    for data, split in corpus(1, CASES):
        differential.check_decoder(library, data, split, library.limits["rx_payload"])
        differential.check_decoder(library, data, split, 0)


def test_the_connections_agree_on_a_random_corpus(library: Library) -> None:
    seen: set[str] = set()
    codes: set[int] = set()
    for data, split in corpus(2, CASES):
        for event in differential.check_connection(library, data, split):
            seen.add(event[0])
            if event[0] == "closed":
                codes.add(event[1])
    # The corpus reaches the state machine, not only the CRC check.
    assert seen == {"message", "signal", "gap", "ack", "clock", "closed"}
    assert {ErrorCode.BAD_CRC, ErrorCode.FLOW_CONTROL, ErrorCode.TOO_MANY_STREAMS} <= codes


def frames(*specs: tuple[int, int, bytes, int]) -> bytes:
    """Encoded frames from ``(stream, seq, payload, flags)``."""
    return b"".join(encode_frame(Frame(s, q, 7, p, f)) for s, q, p, f in specs)


@pytest.mark.parametrize(
    ("name", "data", "code"),
    [
        # 16 fragments of 64 bytes: over the 1000-byte message limit at the 16th.
        (
            "message too large",
            frames(*[(2, i + 1, bytes(64), EOM_BIT if i == 15 else 0) for i in range(16)]),
            ErrorCode.MESSAGE_TOO_LARGE,
        ),
        # A partial message of 1000 bytes, then three frames of 250 held ahead of a gap.
        (
            "receive buffer",
            frames(
                *[(2, i + 1, bytes(250), 0) for i in range(4)],
                *[(3, i + 2, bytes(250), 0) for i in range(3)],
            ),
            ErrorCode.FLOW_CONTROL,
        ),
        (
            "too many streams",
            frames(*[(s, 1, b"x", EOM_BIT) for s in (0, 1, 2, 3, 4)]),
            ErrorCode.TOO_MANY_STREAMS,
        ),
        (
            "ack of a frame never sent",
            frames((1, 9, b"", ACK_BIT)),
            ErrorCode.FLOW_CONTROL,
        ),
        (
            "frames before a corrupt one count",
            frames((2, 1, b"first", EOM_BIT)) + b"AIRC\x02\x00" + bytes(14),
            ErrorCode.BAD_CRC,
        ),
        (
            "goaway from the peer",
            frames(
                (SIGNALLING_STREAM, 1, encode_signal(TimeRequest(5)), EOM_BIT),
                (SIGNALLING_STREAM, 2, encode_signal(GoAway(ErrorCode.AUTH_FAILED, "é")), EOM_BIT),
                (2, 1, b"after", EOM_BIT),
            ),
            ErrorCode.AUTH_FAILED,
        ),
    ],
)
def test_each_bound_and_verdict_the_same(
    library: Library, name: str, data: bytes, code: ErrorCode
) -> None:
    for split in (0, len(data) // 3, len(data)):
        events = differential.check_connection(library, data, split)
        assert events[-1][:2] == ("closed", code), (name, events)


def test_the_crc_matches_pythons_at_every_length_and_start(library: Library) -> None:
    assert library.lib.airc_crc16(b"123456789", 9, 0xFFFF) == 0x29B1
    rng = random.Random(5)
    data = rng.randbytes(300)
    for start in range(4):
        for length in range(0, 70):
            chunk = data[start : start + length]
            for initial in (0xFFFF, 0x1D0F, 0):
                expected = crc16(chunk, initial)
                assert library.lib.airc_crc16(chunk, length, initial) == expected

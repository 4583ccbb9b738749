"""XOR parity over datagram groups: one loss per group comes back, never a duplicate."""

from __future__ import annotations

import random

import pytest

from airlane.wire.errors import DecodeError
from airlane.wire.fec import FecDecoder, FecEncoder, plain


def messages(count: int, rng: random.Random) -> list[bytes]:
    """Distinct messages of 2 to 300 bytes."""
    return [n.to_bytes(2, "big") + rng.randbytes(rng.randrange(0, 299)) for n in range(count)]


@pytest.mark.parametrize("lost", [0, 1, 2, 3])
def test_any_one_loss_in_a_group_is_rebuilt(lost: int) -> None:
    sent = messages(4, random.Random(lost))
    encoder, decoder = FecEncoder(4), FecDecoder()
    datagrams = [d for m in sent for d in encoder.encode(m)]
    assert len(datagrams) == 5  # four data, one parity
    got = [m for i, d in enumerate(datagrams) if i != lost for m in decoder.feed(d)]
    assert sorted(got) == sorted(sent) and decoder.recovered == 1


def test_two_losses_in_a_group_lose_two_and_nothing_is_delivered_twice() -> None:
    sent = messages(8, random.Random(1))
    encoder, decoder = FecEncoder(4), FecDecoder()
    datagrams = [d for m in sent for d in encoder.encode(m)]
    kept = [d for i, d in enumerate(datagrams) if i not in (0, 1)]
    got = [m for d in kept + kept for m in decoder.feed(d)]  # every datagram twice
    assert sorted(got) == sorted(sent[2:])


def test_an_early_parity_protects_a_short_group() -> None:
    encoder, decoder = FecEncoder(8), FecDecoder()
    first = encoder.encode(b"cancel")
    second = encoder.encode(b"progress 40%")
    (parity,) = encoder.flush_parity()
    assert encoder.pending == 0
    got = [m for d in (*first, parity) for m in decoder.feed(d)]
    assert got == [b"cancel", b"progress 40%"]
    del second


def test_random_loss_at_5_percent_is_mostly_repaired() -> None:
    rng = random.Random(5)
    sent = messages(4000, rng)
    encoder, decoder = FecEncoder(4), FecDecoder()
    datagrams = [d for m in sent for d in encoder.encode(m)]
    arrived = [d for d in datagrams if rng.random() >= 0.05]
    got = [m for d in arrived for m in decoder.feed(d)]
    assert len(got) == len(set(got))  # nothing twice
    assert len(got) / len(sent) > 0.98  # without parity about 0.95


def test_plain_datagrams_and_bad_ones() -> None:
    decoder = FecDecoder()
    assert decoder.feed(plain(b"hi")) == [b"hi"]
    for bad in (b"", b"\x07x", b"\x01\x00", b"\x01\x00\x00\x05\x04", b"\x02\x00"):
        with pytest.raises(DecodeError):
            decoder.feed(bad)


def test_the_window_bounds_what_the_decoder_keeps() -> None:
    encoder, decoder = FecEncoder(4), FecDecoder(window=8)
    for n in range(400):
        decoder.feed(encoder.encode(n.to_bytes(2, "big"))[0])
    assert len(decoder._groups) <= 8


def test_interleaved_groups_survive_a_lost_packet_of_consecutive_datagrams() -> None:
    sent = messages(64, random.Random(9))
    encoder, decoder = FecEncoder(4, interleave=8), FecDecoder()
    datagrams = [d for m in sent for d in encoder.encode(m)]
    # A packet that carried eight consecutive datagrams is lost.
    lost = set(range(10, 18))
    got = [m for i, d in enumerate(datagrams) if i not in lost for m in decoder.feed(d)]
    assert sorted(got) == sorted(sent)

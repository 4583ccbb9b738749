"""Relay's gossipsub RPCs: every field both ways (subscriptions, messages, GRAFT, PRUNE,
IHAVE, IWANT), a message with an author or signature marked (``StrictNoSign`` drops it), the
bounds on lists and message ids, and random bytes refused with `DecodeError` only.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airlane.wire.errors import DecodeError
from airlane.wire.libp2p.protobuf import Writer
from airlane.wire.waku import RelayMessage, RelayRpc
from airlane.wire.waku.relay import MAX_IDS, MAX_ITEMS

from .chunking import PROPERTY

TOPIC = "/waku/2/rs/42/3"


def test_every_field_round_trips() -> None:
    rpc = RelayRpc(
        subscribe=(TOPIC,),
        unsubscribe=("/waku/2/rs/42/4",),
        messages=(RelayMessage(TOPIC, b"\x0a\x01x"),),
        graft=(TOPIC,),
        prune=("/waku/2/rs/42/5",),
        ihave=((TOPIC, (b"\x01" * 32, b"\x02" * 32)),),
        iwant=(b"\x03" * 32,),
    )
    assert RelayRpc.decode(rpc.encode()) == rpc


def test_a_signed_message_is_marked() -> None:
    message = Writer().data(1, b"author").data(2, b"data").string(4, TOPIC).finish()
    rpc = RelayRpc.decode(Writer().data(2, message).finish())
    assert rpc.messages == (RelayMessage(TOPIC, b"data", signed=True),)


def test_a_message_without_its_topic_is_refused() -> None:
    with pytest.raises(DecodeError, match="topic"):
        RelayRpc.decode(Writer().data(2, Writer().data(2, b"x").finish()).finish())


def test_lists_and_message_ids_are_bounded() -> None:
    many = RelayRpc(subscribe=tuple(f"/waku/2/rs/1/{n}" for n in range(MAX_ITEMS + 1)))
    with pytest.raises(DecodeError, match="entries"):
        RelayRpc.decode(many.encode())
    offered = RelayRpc(ihave=((TOPIC, tuple(bytes([n % 256]) * 2 for n in range(MAX_IDS + 1))),))
    with pytest.raises(DecodeError, match="message ids"):
        RelayRpc.decode(offered.encode())
    asked = RelayRpc(iwant=tuple(b"\x01" * 32 for _ in range(MAX_IDS + 1)))
    with pytest.raises(DecodeError, match="message ids"):
        RelayRpc.decode(asked.encode())


@PROPERTY
@given(st.binary(max_size=300))
def test_random_bytes_raise_decode_error_only(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        RelayRpc.decode(data)

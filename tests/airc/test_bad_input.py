"""Malformed AIRC input over real sockets: the peer gets ``GOAWAY`` with the reason (and, over
WebSocket, close code 4000 + the error code), the socket closes, and the gateway goes on
serving everyone else."""

from __future__ import annotations

import asyncio

import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed as WsConnectionClosed

from airlane.wire.airc import (
    SIGNALLING_STREAM,
    ErrorCode,
    Flags,
    Frame,
    FrameDecoder,
    GoAway,
    decode_signal,
    encode_frame,
)
from tests.servers import ServerProcess

from .conftest import connector

GOOD = encode_frame(Frame(20, 1, 0, b"{}", Flags.EOM))

BAD_INPUTS = {
    "bad-magic": (b"HTTP/1.1 200 OK\r\n\r\n", ErrorCode.BAD_MAGIC),
    "bad-version": (GOOD[:4] + b"\x01" + GOOD[5:], ErrorCode.BAD_VERSION),
    "reserved-flags": (GOOD[:5] + b"\x80" + GOOD[6:], ErrorCode.RESERVED_FLAGS),
    "bad-crc": (GOOD[:-1] + b"!", ErrorCode.BAD_CRC),
    "unknown-signal": (
        encode_frame(Frame(SIGNALLING_STREAM, 1, 0, b"\x7f", Flags.EOM | Flags.PRIORITY)),
        ErrorCode.UNKNOWN_SIGNAL,
    ),
    "truncated-signal": (
        encode_frame(Frame(SIGNALLING_STREAM, 1, 0, b"\x03\x00", Flags.EOM)),
        ErrorCode.BAD_SIGNALLING,
    ),
    "server-only-signal": (
        encode_frame(
            Frame(SIGNALLING_STREAM, 1, 0, b"\x07\x00\x01\x00\x02\x01", Flags.EOM)
        ),  # Cancelled: only servers send it
        ErrorCode.BAD_SIGNALLING,
    ),
    "ack-with-payload": (
        encode_frame(Frame(SIGNALLING_STREAM, 0, 0, b"x", Flags.ACK)),
        ErrorCode.BAD_LENGTH,
    ),
}


def goaway_in(data: bytes) -> GoAway:
    """The GOAWAY among the frames the gateway sent before closing."""
    frames = FrameDecoder().feed(data)
    signals = [
        decode_signal(f.payload)
        for f in frames
        if f.stream_id == SIGNALLING_STREAM and not f.flags & Flags.ACK
    ]
    goaways = [s for s in signals if isinstance(s, GoAway)]
    assert goaways, f"no GOAWAY in {signals}"
    return goaways[-1]


async def still_serving(gateway: ServerProcess, transport: str) -> None:
    async with await connector(gateway, transport)() as client:
        stream = await client.generate(
            {"model": "m", "messages": [{"role": "user", "content": "ok?"}], "max_tokens": 4}
        )
        assert [e async for e in stream][-1].kind == "done"


@pytest.mark.parametrize("how", ["whole", "byte-by-byte"])
@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
async def test_bad_tcp_input_gets_goaway_and_close(
    gateway: ServerProcess, name: str, how: str
) -> None:
    data, code = BAD_INPUTS[name]
    assert gateway.airc is not None
    reader, writer = await asyncio.open_connection(*gateway.airc)
    try:
        pieces = [data] if how == "whole" else [data[i : i + 1] for i in range(len(data))]
        for piece in pieces:
            writer.write(piece)
            await writer.drain()  # the gateway keeps reading after its GOAWAY: no reset
        received = await asyncio.wait_for(reader.read(), 10)  # until the gateway closes
    finally:
        writer.close()
    goaway = goaway_in(received)
    assert goaway.code is code
    assert goaway.reason
    await still_serving(gateway, "tcp")


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
async def test_bad_websocket_input_closes_with_the_code(gateway: ServerProcess, name: str) -> None:
    data, code = BAD_INPUTS[name]
    url = gateway.url.replace("http://", "ws://") + "/v1/ws"
    async with ws_connect(url, subprotocols=["airc.v1.2"], proxy=None) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "airc.v1.2"
        await ws.send(data)
        received = b""
        with pytest.raises(WsConnectionClosed) as closed:
            while True:
                message = await asyncio.wait_for(ws.recv(decode=False), 10)
                received += message
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4000 + code.value
    assert goaway_in(received).code is code
    await still_serving(gateway, "ws")


async def test_a_text_message_closes_1003(gateway: ServerProcess) -> None:
    url = gateway.url.replace("http://", "ws://") + "/v1/ws"
    async with ws_connect(url, subprotocols=["airc.v1.2"], proxy=None) as ws:  # type: ignore[list-item]
        await ws.send("hello")
        with pytest.raises(WsConnectionClosed) as closed:
            while True:
                await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1003

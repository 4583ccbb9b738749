"""The ``airlane.websocket.send_many`` extension: a batch of load-test chunks in one write,
each still its own WebSocket message, with and without permessage-deflate."""

from __future__ import annotations

import orjson
import pytest
from websockets.asyncio.client import connect

from tests.servers import ServerProcess


@pytest.mark.parametrize("compression", [None, "deflate"])
async def test_every_chunk_is_one_valid_text_message(
    server: ServerProcess, compression: str | None
) -> None:
    url = server.url.replace("http://", "ws://") + "/v1/loadtest/ws?chunks=300&mode=burst"
    seqs = []
    async with connect(url, compression=compression, max_size=None) as ws:
        async for message in ws:
            assert isinstance(message, str)
            chunk = orjson.loads(message)
            assert list(chunk)[:2] == ["seq", "ts"]
            seqs.append(chunk["seq"])
        assert ws.close_code == 1000
    assert seqs == list(range(1, 301))

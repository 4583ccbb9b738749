"""SSE compression over a real connection: negotiated per client, decodable as it streams."""

from __future__ import annotations

import httpx
import pytest

from airlane.wire.compression import Compression, make_decompressor
from airlane.wire.sse import SSEDecoder


@pytest.mark.parametrize("method", ["br", "zstd", "lz4"])
def test_each_method_streams_decodable_chunks(server, method):
    url = f"{server.url}/v1/loadtest/sse?chunks=20&compress={method}"
    headers = {"accept-encoding": method}
    decompressor = make_decompressor(Compression(method))
    decoder = SSEDecoder()
    messages = []
    with httpx.stream("GET", url, headers=headers, timeout=10) as response:
        assert response.headers["content-encoding"] == method
        for raw in response.iter_raw():
            messages.extend(decoder.feed(decompressor.decompress(raw)))
    assert [m.data.split(",", 1)[0] for m in messages] == [f'{{"seq":{i}' for i in range(1, 21)]


def test_loopback_clients_get_no_compression_by_default(server):
    url = f"{server.url}/v1/loadtest/sse?chunks=2"
    with httpx.stream("GET", url, headers={"accept-encoding": "br, zstd"}, timeout=10) as r:
        assert "content-encoding" not in r.headers
        r.read()

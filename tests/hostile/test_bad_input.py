"""Bad input gets its wire's clear error, never a 500, a dropped socket or a traceback.

A real gateway, its log kept in a file. Each attack from the hardening probe: a log append
nested 300 deep and one whose data is one level past the event limit, a JSON Schema nested
past the schema limit, MessagePack nested 100,000 deep on a WebSocket, protobuf garbage to a
gRPC method (no key), and a garbage message inside a client stream. Each is refused on its
own wire; the connection that carried it stays usable; the log holds no traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import msgspec
import pytest
import websockets

from airlane.wire.limits import MAX_BODY_DEPTH, MAX_EVENT_DEPTH, MAX_SCHEMA_DEPTH
from tests.servers import ServerProcess, run_server

pytestmark = pytest.mark.timeout(120)


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.fixture(scope="module")
def log_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("log") / "server.log"


@pytest.fixture(scope="module")
def server(log_file: Path) -> Iterator[ServerProcess]:
    with log_file.open("w") as log, run_server(stderr=log) as running:
        yield running
    assert "Traceback" not in log_file.read_text()


def test_deep_json_bodies(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=20) as http:
        too_deep = http.post("/v1/logs/any/events", json={"type": "a.v1", "data": nested(300)})
        assert too_deep.status_code == 400, too_deep.text
        assert too_deep.json()["error"]["code"] == "invalid_json"
        assert f"deeper than {MAX_BODY_DEPTH} levels" in too_deep.json()["error"]["message"]
        assert http.put("/v1/logs/deep").status_code == 201
        past = http.post(
            "/v1/logs/deep/events", json={"type": "a.v1", "data": nested(MAX_EVENT_DEPTH + 1)}
        )
        assert past.status_code == 400, past.text
        assert past.json()["error"]["code"] == "invalid_event"
        at = http.post(
            "/v1/logs/deep/events", json={"type": "a.v1", "data": nested(MAX_EVENT_DEPTH)}
        )
        assert at.status_code == 201, at.text
        schema: Any = {"type": "object"}
        for _ in range(MAX_SCHEMA_DEPTH // 2 + 1):
            schema = {"type": "object", "properties": {"a": schema}}
        refused = http.post("/v1/schemas/deep.v1/versions", json={"schema_type": "json",
                                                                  "schema": schema})  # fmt: skip
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["code"] == "invalid_schema"
        assert "nests deeper than" in refused.json()["error"]["message"]
        assert http.get("/healthz").status_code == 200


async def test_deep_messagepack_on_a_websocket(server: ServerProcess) -> None:
    url = server.url.replace("http://", "ws://") + "/v1/ws"
    offer = [websockets.Subprotocol("airlane.v1.msgpack")]
    async with websockets.connect(url, subprotocols=offer) as ws:
        await ws.send(b"\x91" * 100_000 + b"\xc0")  # arrays of one, 100,000 deep
        reply = msgspec.msgpack.decode(await ws.recv())
        assert (reply["op"], reply["code"]) == ("error", "invalid_message"), reply
        await ws.send(msgspec.msgpack.encode({"op": "ping"}))
        assert msgspec.msgpack.decode(await ws.recv())["op"] == "pong"  # still serving


async def test_protobuf_garbage(server: ServerProcess) -> None:
    assert server.grpc is not None
    async with grpc.aio.insecure_channel(server.grpc) as channel:
        info = channel.unary_unary("/airlane.v1.Airlane/Info")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await info(b"\xff\xff\xff")
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details() == "the request is not a valid airlane.v1.InfoRequest message"
        trailers = dict(caught.value.trailing_metadata() or ())
        assert trailers.get("airlane-error-code") == "invalid_message"
        stream = channel.stream_unary("/airlane.v1.Airlane/PublishStream")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stream(iter([b"\xff\xff\xff"]))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "not a valid airlane.v1.PublishRequest" in (caught.value.details() or "")

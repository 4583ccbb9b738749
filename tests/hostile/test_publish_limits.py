"""One publish must not make a stream unreadable, nor hold more memory than retention counts.

A real gateway; events published over HTTP. Nesting past the limit is refused at publish with
a clear 400 (300 levels: what the attack sent; 65: one past the limit), as is an event over the
size limit (413); an event at the limit is accepted and then read back over SSE, WebSocket
(JSON and MessagePack) and gRPC, whose protobuf stops at 100 levels. Retention counts what a
stream holds: large payloads push the oldest out at the stream's ``max_bytes``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import msgspec
import pytest
import websockets
from google.protobuf import json_format

from airlane.v1 import events_pb2, service_pb2
from airlane.wire.limits import MAX_BODY_DEPTH, MAX_EVENT_BYTES, MAX_EVENT_DEPTH
from tests.grpc_transport.conftest import airlane_stub
from tests.servers import ServerProcess, run_server

pytestmark = pytest.mark.timeout(120)


def nested(depth: int) -> Any:
    value: Any = "deep"
    for level in range(depth):
        value = {"l": value} if level % 2 else [value]
    return value


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with run_server(config="[retention]\nmax_bytes = 4194304\n") as running:
        yield running


def publish(http: httpx.Client, stream: str, payload: Any) -> httpx.Response:
    return http.post(f"/v1/streams/{stream}/events", json={"kind": "message", "payload": payload})


@pytest.mark.parametrize(
    ("depth", "code", "said"),
    [
        (300, "invalid_json", f"deeper than {MAX_BODY_DEPTH} levels"),  # the attack's event
        (MAX_EVENT_DEPTH + 1, "invalid_event", f"deeper than {MAX_EVENT_DEPTH} levels"),
    ],
)
def test_too_deep_is_refused_at_publish(
    server: ServerProcess, depth: int, code: str, said: str
) -> None:
    with httpx.Client(base_url=server.url, timeout=20) as http:
        refused = publish(http, "deep", nested(depth))
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["code"] == code and said in error["message"], error
        assert http.get("/v1/streams/deep").status_code == 404  # nothing was made of it


async def test_too_large_is_refused_at_publish(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=20) as http:
        refused = publish(http, "large", "x" * (MAX_EVENT_BYTES + 1))
        assert refused.status_code == 413, refused.text  # HTTP's body limit says so first
        assert refused.json()["error"]["code"] in ("body_too_large", "event_too_large")
    # gRPC takes messages up to 4 MiB: the event's own limit answers.
    assert server.grpc is not None
    async with grpc.aio.insecure_channel(server.grpc) as channel:
        stub = airlane_stub(channel)
        for event in (
            events_pb2.Event(
                kind=events_pb2.KIND_MESSAGE, payload_json=json.dumps("x" * 1_100_000)
            ),
            events_pb2.Event(kind=events_pb2.KIND_DELTA, delta={"text": "é" * 600_000}),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Publish(service_pb2.PublishRequest(stream_id="large", event=event))
            assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            trailers = dict(caught.value.trailing_metadata() or ())
            assert trailers.get("airlane-error-code") == "event_too_large"
            assert "at most 1,048,576 may be published" in (caught.value.details() or "")


async def test_an_event_at_the_limit_reaches_every_wire(server: ServerProcess) -> None:
    deepest = nested(MAX_EVENT_DEPTH)
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as http:
        published = await http.post(
            "/v1/streams/edge/events", json={"kind": "message", "payload": deepest}
        )
        assert published.status_code == 200, published.text
        epoch = (await http.get("/v1/streams/edge")).json()["epoch"]
        start = f"{epoch}:0"  # the whole history, the message itself (not a snapshot)
        async with http.stream("GET", f"/v1/streams/edge/events?from={start}") as events:
            async for line in events.aiter_lines():
                if line.startswith("data:") and '"message"' in line:
                    assert json.loads(line[5:])["payload"] == deepest
                    break
    ws_url = server.url.replace("http://", "ws://") + "/v1/ws"
    decoders = {"airlane.v1.json": json.loads, "airlane.v1.msgpack": msgspec.msgpack.decode}
    for subprotocol, decode in decoders.items():
        offer = [websockets.Subprotocol(subprotocol)]
        async with websockets.connect(ws_url, subprotocols=offer) as ws:
            await ws.send(_frame(subprotocol, {"op": "subscribe", "stream": "edge", "from": start}))
            while (reply := decode(await ws.recv()))["op"] != "event" or (
                reply["event"]["kind"] != "message"
            ):
                assert reply["op"] in ("subscribed", "event"), reply
            assert reply["event"]["payload"] == deepest, subprotocol
    assert server.grpc is not None
    async with grpc.aio.insecure_channel(server.grpc) as channel:
        after = events_pb2.Position(epoch=epoch, seq=0)
        request = service_pb2.SubscribeRequest(stream_id="edge", after=after)
        call = airlane_stub(channel).Subscribe(request)
        async for item in call:
            if item.event.kind == events_pb2.KIND_MESSAGE:
                payload = json_format.MessageToDict(item.event)["payload"]
                assert payload == deepest
                call.cancel()
                break


def _frame(subprotocol: str, message: dict[str, Any]) -> str | bytes:
    return (
        json.dumps(message) if subprotocol == "airlane.v1.json" else msgspec.msgpack.encode(message)
    )


def test_retention_counts_the_bytes_a_stream_holds(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=20) as http:
        for n in range(12):  # 12 x ~900 KB against max_bytes = 4 MiB
            assert publish(http, "big", {"n": n, "blob": "x" * 900_000}).status_code == 200
        info = http.get("/v1/streams/big").json()
    held = info["retained_bytes"]
    assert 4 * 900_000 <= held <= 4 * 1024 * 1024 + 1_000_000, info
    assert info["retained_events"] <= 5, info

"""``Info``: a stream's status over gRPC is the HTTP API's stream info, field for field (the
JSON of ``airlane.v1.StreamInfo`` round-trips to the body of ``GET /v1/streams/{id}``)."""

from __future__ import annotations

import grpc
import httpx
import orjson
import pytest

from airlane.v1 import service_pb2
from airlane.wire.proto import info_dict
from tests.servers import ServerProcess

from .conftest import SHORT_REQUEST, fresh_stream_id, generate_request


def normalise(value: object) -> object:
    return orjson.loads(orjson.dumps(value))


async def test_info_matches_the_http_stream_info(stub: object, gateway: ServerProcess) -> None:
    call = stub.Generate(generate_request(SHORT_REQUEST))  # type: ignore[attr-defined]
    items = [item async for item in call]
    stream_id = items[-1].stream_id
    reply = await stub.Info(service_pb2.InfoRequest(stream_id=stream_id))  # type: ignore[attr-defined]
    over_http = httpx.get(f"{gateway.url}/v1/streams/{stream_id}", timeout=10).json()
    assert normalise(info_dict(reply)) == normalise(over_http)
    assert reply.ended and reply.finish_reason in ("stop", "length")


async def test_info_of_a_named_stream_and_errors(stub: object, gateway: ServerProcess) -> None:
    stream_id = fresh_stream_id("agents/info")
    httpx.post(
        f"{gateway.url}/v1/streams/{stream_id}/events", json={"kind": "message"}, timeout=10
    ).raise_for_status()
    reply = await stub.Info(service_pb2.InfoRequest(stream_id=stream_id))  # type: ignore[attr-defined]
    over_http = httpx.get(f"{gateway.url}/v1/streams/{stream_id}", timeout=10).json()
    assert normalise(info_dict(reply)) == normalise(over_http)
    assert not reply.ended and not reply.HasField("finish_reason")
    for bad, code in (
        ("nope", grpc.StatusCode.NOT_FOUND),
        ("bad id", grpc.StatusCode.INVALID_ARGUMENT),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Info(service_pb2.InfoRequest(stream_id=bad))  # type: ignore[attr-defined]
        assert refused.value.code() == code

"""The probe's small findings, each against a real gateway: a reader cannot put its reading on
another's name in the usage ledger; a resume position in another script's digits is refused
as the ``Last-Event-ID`` form is; a gRPC call without credentials hears ``unauthenticated``
before anything about its metadata; numbers in paths, ranges and times are ASCII digits."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import httpx
import pytest

from airlane.v1 import service_pb2
from tests.grpc_transport.conftest import airlane_stub
from tests.http.support import chat_body
from tests.servers import ServerProcess, run_server

pytestmark = pytest.mark.timeout(60)

ALICE, BOB = "sk-alice-1", "sk-bob-2"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    keys = ["--api-key", f"alice@team={ALICE}", "--api-key", f"bob@team={BOB}"]
    with run_server(*keys) as running:
        yield running


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def test_a_reader_cannot_read_under_another_name(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=20) as http:
        created = http.post("/v1/streams", json=chat_body("hi", 1, max_tokens=5),
                            headers=bearer(ALICE))  # fmt: skip
        assert created.status_code == 201, created.text
        stream = created.json()["id"]
        with http.stream("GET", f"/v1/streams/{stream}/events?subscriber=alice",
                         headers=bearer(BOB)) as events:  # fmt: skip
            for _ in events.iter_lines():
                pass
        usage = http.get(f"/v1/streams/{stream}", headers=bearer(ALICE)).json()["usage"]
    readers = set(usage["delivered_tokens"]) | set(usage["replayed_tokens"])
    assert "bob/alice" in readers and "alice" not in readers, usage


def test_resume_positions_take_ascii_digits_only(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, headers=bearer(ALICE), timeout=20) as http:
        assert http.post("/v1/streams/notes/events", json={"kind": "message"}).status_code == 200
        epoch = http.get("/v1/streams/notes").json()["epoch"]
        for query in (f"from={epoch}:٣", f"from={epoch}:\uff13", f"from={epoch}:+1"):
            refused = http.get(f"/v1/streams/notes/events?{query}")
            assert refused.status_code == 400, (query, refused.text)
            assert refused.json()["error"]["code"] == "bad_resume_token"
        for path in ("/v1/schemas/s.v1/versions/²", "/v1/logs/none/events?from_time=²",
                     "/v1/streams/notes/events?max_events=٣"):  # fmt: skip
            answer = http.get(path)
            assert answer.status_code in (400, 404), (path, answer.text)  # never a 500


async def test_grpc_says_unauthenticated_before_bad_metadata(server: ServerProcess) -> None:
    assert server.grpc is not None
    twice = (("x-model-id", "a"), ("x-model-id", "b"))
    async with grpc.aio.insecure_channel(server.grpc) as channel:
        stub = airlane_stub(channel)
        request = service_pb2.InfoRequest(stream_id="x")
        with pytest.raises(grpc.aio.AioRpcError) as anonymous:
            await stub.Info(request, metadata=twice)
        assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as known:
            await stub.Info(request, metadata=(*twice, ("authorization", f"Bearer {ALICE}")))
        assert known.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        trailers = dict(known.value.trailing_metadata() or ())
        assert trailers.get("airlane-error-code") == "invalid_metadata"

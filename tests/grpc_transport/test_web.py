"""gRPC-Web and Connect on the HTTP port: connectrpc's own client (gRPC-Web and Connect
protocols), raw HTTP as a browser sends it (binary and text gRPC-Web, Connect JSON), headless
Chromium's fetch(), CORS, API keys and errors. Streamed texts equal the non-streamed answer."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from connectrpc.client import ConnectClient
from connectrpc.compat import google_protobuf_binary_codec
from connectrpc.errors import ConnectError
from connectrpc.method import IdempotencyLevel, MethodInfo, StreamType
from connectrpc.protocol import ProtocolType
from google.protobuf import json_format

from airlane.v1 import events_pb2, service_pb2
from tests.browser.test_eventsource import CHROMIUM, require_browser
from tests.client.conftest import LONG_REQUEST, PACED_SYNTHETIC, reference_text
from tests.servers import ServerProcess, run_server

from .conftest import SHORT_REQUEST, fresh_stream_id

GENERATE = "/airlane.v1.Airlane/Generate"
GRPC_WEB = {"content-type": "application/grpc-web+proto", "x-grpc-web": "1"}


def method(name: str, request: Any, response: Any, stream_type: StreamType) -> MethodInfo[Any, Any]:
    return MethodInfo(
        name=name,
        service_name="airlane.v1.Airlane",
        input=request,
        output=response,
        idempotency_level=IdempotencyLevel.UNKNOWN,
        stream_type=stream_type,
    )


GENERATE_METHOD = method(
    "Generate", service_pb2.GenerateRequest, events_pb2.StreamEvent, StreamType.SERVER_STREAM
)
CANCEL_METHOD = method(
    "Cancel", service_pb2.CancelRequest, service_pb2.CancelResponse, StreamType.UNARY
)


def generate_request(body: dict[str, Any]) -> service_pb2.GenerateRequest:
    chat = json_format.ParseDict(body, service_pb2.ChatCompletionRequest())
    return service_pb2.GenerateRequest(request=chat)


def frames(body: bytes) -> list[tuple[int, bytes]]:
    """The 5-byte-prefixed frames of a gRPC-Web (or Connect streaming) body."""
    out, offset = [], 0
    while offset < len(body):
        flag, length = struct.unpack_from(">BI", body, offset)
        out.append((flag, body[offset + 5 : offset + 5 + length]))
        offset += 5 + length
    return out


def framed(message: bytes) -> bytes:
    return struct.pack(">BI", 0, len(message)) + message


def text_of(messages: list[bytes]) -> str:
    events = [events_pb2.StreamEvent.FromString(m).event for m in messages]
    return "".join(e.delta.text for e in events if e.WhichOneof("body") == "delta")


def trailers(frame: bytes) -> dict[str, str]:
    lines = frame.decode().strip().split("\r\n")
    return dict(line.split(": ", 1) for line in lines if line)


@pytest.mark.parametrize("protocol", [ProtocolType.GRPC_WEB, ProtocolType.CONNECT])
async def test_connectrpc_client_streams_and_errors(
    gateway: ServerProcess, protocol: ProtocolType
) -> None:
    async with ConnectClient(
        gateway.url, codec=google_protobuf_binary_codec(), protocol=protocol
    ) as client:
        items: AsyncIterator[Any] = client.execute_server_stream(
            request=generate_request(LONG_REQUEST), method=GENERATE_METHOD
        )
        events = [item.event async for item in items]
        assert events[-1].kind == events_pb2.KIND_DONE
        text = "".join(e.delta.text for e in events if e.WhichOneof("body") == "delta")
        assert text == reference_text(gateway.url, LONG_REQUEST)
        with pytest.raises(ConnectError) as missing:
            await client.execute_unary(
                request=service_pb2.CancelRequest(stream_id="nope"), method=CANCEL_METHOD
            )
        assert missing.value.code.name == "NOT_FOUND"


async def test_raw_grpc_web_binary_and_text(gateway: ServerProcess) -> None:
    payload = generate_request(SHORT_REQUEST).SerializeToString()
    expected = reference_text(gateway.url, SHORT_REQUEST)
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as http:
        binary = await http.post(GENERATE, content=framed(payload), headers=GRPC_WEB)
        assert binary.status_code == 200
        assert binary.headers["content-type"] == "application/grpc-web+proto"
        parts = frames(binary.content)
        assert text_of([m for flag, m in parts if flag == 0]) == expected
        assert parts[-1][0] == 0x80 and trailers(parts[-1][1])["grpc-status"] == "0"

        text_headers = {"content-type": "application/grpc-web-text", "x-grpc-web": "1"}
        encoded = base64.b64encode(framed(payload))
        text = await http.post(GENERATE, content=encoded, headers=text_headers)
        assert text.headers["content-type"].startswith("application/grpc-web-text")
        # Each chunk is base64 on its own (padded): decode them 4 characters at a time.
        body = b"".join(
            base64.b64decode(text.content[i : i + 4]) for i in range(0, len(text.content), 4)
        )
        parts = frames(body)
        assert text_of([m for flag, m in parts if flag == 0]) == expected

        missing = service_pb2.SubscribeRequest(stream_id="no-such-stream").SerializeToString()
        refused = await http.post(
            "/airlane.v1.Airlane/Subscribe", content=framed(missing), headers=GRPC_WEB
        )
        status = trailers(frames(refused.content)[-1][1])
        assert status["grpc-status"] == "5"  # NOT_FOUND


async def test_connect_json(gateway: ServerProcess) -> None:
    stream_id = fresh_stream_id("agents/connect")
    connect = {"connect-protocol-version": "1"}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as http:
        for n in (1, 2):
            event = {"kind": "KIND_MESSAGE", "payload": {"n": n}}
            reply = await http.post(
                "/airlane.v1.Airlane/Publish",
                json={"streamId": stream_id, "event": event},
                headers=connect,
            )
            assert reply.status_code == 200, reply.text
            assert reply.json()["published"] == 1
        done = {"kind": "KIND_DONE", "fields": {"finish_reason": "stop"}}
        await http.post("/airlane.v1.Airlane/Publish", json={"streamId": stream_id, "event": done})
        body = json.dumps({"streamId": stream_id}).encode()
        streamed = await http.post(
            "/airlane.v1.Airlane/Subscribe",
            content=framed(body),
            headers={"content-type": "application/connect+json", **connect},
        )
        parts = frames(streamed.content)
        items = [json.loads(m) for flag, m in parts if flag == 0]
        assert [i["event"]["payload"] for i in items[:2]] == [{"n": 1}, {"n": 2}]
        assert items[-1]["event"]["kind"] == "KIND_DONE"
        assert parts[-1][0] == 0x02  # the end-of-stream frame
        missing = await http.post(
            "/airlane.v1.Airlane/Cancel", json={"streamId": "nope"}, headers=connect
        )
        assert missing.status_code == 404 and missing.json()["code"] == "not_found"


async def test_api_keys_and_cors() -> None:
    config = PACED_SYNTHETIC + '\n[http]\ncors_origins = ["*"]\n'
    with run_server("--api-key", "alice=k1", config=config) as gateway:
        payload = framed(generate_request(SHORT_REQUEST).SerializeToString())
        async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as http:
            refused = await http.post(GENERATE, content=payload, headers=GRPC_WEB)
            assert trailers(frames(refused.content)[-1][1])["grpc-status"] == "16"
            allowed = await http.post(
                GENERATE, content=payload, headers={**GRPC_WEB, "authorization": "Bearer k1"}
            )
            assert trailers(frames(allowed.content)[-1][1])["grpc-status"] == "0"
            preflight = await http.options(
                GENERATE,
                headers={
                    "origin": "https://app.example",
                    "access-control-request-method": "POST",
                    "access-control-request-headers": "x-grpc-web, content-type",
                },
            )
            assert preflight.status_code == 204
            assert "x-grpc-web" in preflight.headers["access-control-allow-headers"]
            assert "grpc-status" in preflight.headers["access-control-expose-headers"]


BROWSER_SCRIPT = """
async ([url, request]) => {
  const body = new Uint8Array(5 + request.length);
  new DataView(body.buffer).setUint32(1, request.length);
  body.set(request, 5);
  const response = await fetch(url, {method: "POST", body,
    headers: {"content-type": "application/grpc-web+proto", "x-grpc-web": "1"}});
  const reader = response.body.getReader();
  const chunks = [];
  let arrivals = 0;
  for (;;) {
    const {done, value} = await reader.read();
    if (done) break;
    arrivals += 1;
    chunks.push(...value);
  }
  return {status: response.status, bytes: chunks, arrivals};
}
"""


async def test_chromium_fetch_streams_grpc_web(gateway: ServerProcess) -> None:
    """A browser's fetch() reads the server stream as it comes (several reads), and its bytes
    are well-formed gRPC-Web."""
    require_browser()
    from playwright.async_api import async_playwright

    request = list(generate_request(LONG_REQUEST).SerializeToString())
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--headless=new"]
        )
        try:
            page = await browser.new_page()
            await page.goto(f"{gateway.url}/healthz")  # same origin: no CORS needed
            result = await page.evaluate(BROWSER_SCRIPT, [f"{gateway.url}{GENERATE}", request])
        finally:
            await browser.close()
    assert result["status"] == 200
    assert result["arrivals"] > 1  # streamed, not buffered whole
    parts = frames(bytes(result["bytes"]))
    assert text_of([m for flag, m in parts if flag == 0]) == reference_text(
        gateway.url, LONG_REQUEST
    )
    assert trailers(parts[-1][1])["grpc-status"] == "0"

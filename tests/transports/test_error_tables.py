"""One error model, one table per wire: every `ErrorCode` has a row in every transport's table,
``docs/errors.md`` prints the same rows, and every code, raised below the transports, reaches
every wire as its table says (HTTP status and JSON body, WebSocket ``error`` message and close
code, gRPC status with the ``airlane-error-code`` trailer, gRPC-Web/Connect, AIRC ``ERROR``,
RSocket ``ERROR``). The MQTT bridge's table (dead letter or retry) is walked by
``tests/mqtt``, the Waku node's (status codes) by ``tests/waku/test_node.py``.

The walk runs against a real gateway process whose hub raises on purpose
(`tests.transports.failing_gateway`), with the clients users use: httpx, the ``websockets``
library, grpcio, and Airlane's own AIRC client.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import websockets

from airlane.client import RequestRejected
from airlane.client.airc import AircClient
from airlane.core.errors import AirlaneError, ErrorCode
from airlane.transports.airc.errors import AIRC_ERROR
from airlane.transports.grpc.errors import GRPC_STATUS
from airlane.transports.http.app import refuse_websocket
from airlane.transports.http.errors import HTTP_STATUS, WS_CLOSE
from airlane.transports.mqtt.errors import MQTT_REASON, retried
from airlane.transports.rsocket.errors import RSOCKET_ERROR
from airlane.transports.waku.errors import WAKU_STATUS
from airlane.v1 import service_pb2
from airlane.wire.rsocket import FrameType
from tests.grpc_transport.conftest import airlane_stub
from tests.rsocket.raw import raw_peer, setup_frame
from tests.servers import ServerProcess, run_gateway
from tests.transports.failing_gateway import failing_stream

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "errors.md"
CODES = list(ErrorCode)


# -- the tables -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "table",
    [HTTP_STATUS, WS_CLOSE, GRPC_STATUS, AIRC_ERROR, RSOCKET_ERROR, MQTT_REASON, WAKU_STATUS],
    ids=["http", "ws", "grpc", "airc", "rsocket", "mqtt", "waku"],
)
def test_every_code_has_a_row_in_every_table(table):
    assert set(table) == set(ErrorCode)


def test_codes_are_stable_names():
    for code in ErrorCode:
        assert re.fullmatch(r"[a-z][a-z_]{2,40}", code.value), code
        assert len(code.value.encode()) <= 64  # what an AIRC ERROR frame carries


def test_websocket_close_codes_follow_one_convention():
    for code, close in WS_CLOSE.items():
        status = HTTP_STATUS[code]
        if close >= 4000 and close != 4503:
            assert close == 4000 + status, code  # the caller's mistakes: 4000 + the status
        assert 1000 <= close <= 4999 and close not in (1004, 1005, 1006, 1015), code


def doc_rows() -> dict[str, list[str]]:
    rows = {}
    for line in DOCS.read_text().splitlines():
        cells = [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and cells[0] in ErrorCode._value2member_map_:
            rows[cells[0]] = cells[1:8]
    return rows


def test_the_docs_print_every_row_of_every_table():
    rows = doc_rows()
    expected = {
        code.value: [
            str(HTTP_STATUS[code]),
            str(WS_CLOSE[code]),
            GRPC_STATUS[code].name,
            AIRC_ERROR[code],
            RSOCKET_ERROR[code].name,
            "retry" if retried(code) else f"0x{MQTT_REASON[code]:02x}",
            str(WAKU_STATUS[code]),
        ]
        for code in ErrorCode
    }
    assert rows == expected


# -- every code through every wire ------------------------------------------------------------


@pytest.fixture(scope="module")
def failing() -> Iterator[ServerProcess]:
    """A real gateway (all listeners) whose hub raises the code a ``fail/<code>`` id names."""
    command = [sys.executable, "-m", "tests.transports.failing_gateway"]
    with run_gateway(command, timeout=30, cwd=REPO) as running:
        yield running
    assert running.process.returncode == 0, "the failing gateway did not stop cleanly"


async def test_every_code_over_http(failing: ServerProcess) -> None:
    wrong = []
    async with httpx.AsyncClient(base_url=failing.url, timeout=10) as client:
        for code in CODES:
            stream = failing_stream(code).replace("/", "%2F")
            response = await client.get(f"/v1/streams/{stream}")
            error = response.json().get("error", {})
            if response.status_code != HTTP_STATUS[code] or error.get("code") != code.value:
                wrong.append((code.value, response.status_code, error))
            elif error.get("type") != ("server_error" if response.status_code >= 500 else
                                       "invalid_request_error"):  # fmt: skip
                wrong.append((code.value, "type", error.get("type")))
        health = await client.get("/healthz")  # still serving after all of it
    assert wrong == []
    assert health.status_code == 200


async def test_every_code_over_websocket(failing: ServerProcess) -> None:
    url = failing.url.replace("http://", "ws://") + "/v1/ws"
    wrong = []
    async with websockets.connect(url) as ws:
        for ref, code in enumerate(CODES):
            await ws.send(
                json.dumps({"op": "subscribe", "stream": failing_stream(code), "ref": ref})
            )
            reply = json.loads(await ws.recv())
            if (reply.get("op"), reply.get("code"), reply.get("ref")) != ("error", code.value, ref):
                wrong.append((code.value, reply))
        await ws.send(json.dumps({"op": "ping"}))  # the socket stays open through all of it
        assert json.loads(await ws.recv()) == {"op": "pong"}
    assert wrong == []


async def test_every_code_over_grpc(failing: ServerProcess) -> None:
    assert failing.grpc is not None
    wrong = []
    async with grpc.aio.insecure_channel(failing.grpc) as channel:
        stub = airlane_stub(channel)
        for code in CODES:
            call = stub.Info(service_pb2.InfoRequest(stream_id=failing_stream(code)))
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call
            trailer = dict(caught.value.trailing_metadata() or ()).get("airlane-error-code")
            if caught.value.code() != GRPC_STATUS[code] or trailer != code.value:
                wrong.append((code.value, caught.value.code(), trailer))
    assert wrong == []


async def test_every_code_over_connect(failing: ServerProcess) -> None:
    # gRPC-Web and Connect on the HTTP port: the same status (as Connect names it) and the
    # code in the trailers (Connect's unary protocol sends them as trailer- headers).
    wrong = []
    async with httpx.AsyncClient(base_url=failing.url, timeout=10) as client:
        for code in CODES:
            response = await client.post(
                "/airlane.v1.Airlane/Info",
                json={"streamId": failing_stream(code)},
                headers={"connect-protocol-version": "1"},
            )
            body: dict[str, Any] = response.json()
            expected = GRPC_STATUS[code].name.lower()
            expected = "canceled" if expected == "cancelled" else expected
            trailer = response.headers.get("trailer-airlane-error-code")
            if body.get("code") != expected or trailer != code.value:
                wrong.append((code.value, body, trailer))
    assert wrong == []


async def test_every_code_over_airc(failing: ServerProcess) -> None:
    assert failing.airc is not None
    wrong = []
    client = await AircClient.tcp(*failing.airc)
    async with client:
        for code in CODES:
            with pytest.raises(RequestRejected) as caught:
                await client.subscribe(failing_stream(code))
            if caught.value.code != code.value:
                wrong.append((code.value, caught.value.code))
    assert wrong == []


async def test_every_code_over_rsocket(failing: ServerProcess) -> None:
    assert failing.rsocket is not None
    wrong = []
    async with raw_peer(*failing.rsocket, setup_frame()) as peer:
        for n, code in enumerate(CODES):
            request = {"stream_id": failing_stream(code)}
            peer.request(FrameType.REQUEST_RESPONSE, 2 * n + 1, "streams.info", request)
            frame = await peer.next()
            assert frame is not None, "the connection closed"
            expected = (FrameType.ERROR, RSOCKET_ERROR[code])
            if (frame.type, frame.error_code) != expected or not frame.data.startswith(
                f"{code.value}: ".encode()
            ):
                wrong.append((code.value, frame))
    assert wrong == []


async def test_every_code_closes_a_websocket_with_its_code_where_a_handshake_cannot_be_refused():
    # A server without ASGI's denial-response extension: the handshake is accepted, then
    # closed with the table's code and the message as the reason (no sockets: raw ASGI).
    for code in CODES:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "websocket.connect"}

        async def send(message: dict[str, Any], sent: list[dict[str, Any]] = sent) -> None:
            sent.append(message)

        scope = {"type": "websocket", "path": "/v1/nowhere", "extensions": {}}
        await refuse_websocket(scope, receive, send, AirlaneError("x" * 300, code=code))
        accept, close = sent
        assert accept["type"] == "websocket.accept"
        assert close["type"] == "websocket.close" and close["code"] == WS_CLOSE[code]
        assert len(close["reason"].encode()) <= 123  # RFC 6455 5.5

"""A web page on another site cannot drive a local gateway that has no keys.

A real gateway on 127.0.0.1 with no keys (the default) and one allowed origin: requests as a
foreign page's browser would send them (a "simple" POST with ``text/plain``, a cancel, a
WebSocket handshake, a rebound ``Host``) are refused; the same requests from the allowed
origin, from the gateway's own origin and from clients that are not browsers (no ``Origin``)
go through.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
import websockets

from tests.http.support import chat_body
from tests.servers import ServerProcess, run_server

pytestmark = pytest.mark.timeout(60)

EVIL = "https://evil.example"
APP = "https://app.example"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with run_server(config=f'[http]\ncors_origins = ["{APP}"]\n') as running:
        yield running


def test_a_foreign_page_cannot_start_or_cancel(server: ServerProcess) -> None:
    body = json.dumps(chat_body("hi", 1, max_tokens=3))
    with httpx.Client(base_url=server.url, timeout=20) as http:
        simple = http.post("/v1/streams", content=body,
                           headers={"origin": EVIL, "content-type": "text/plain"})  # fmt: skip
        assert simple.status_code == 403, simple.text
        assert simple.json()["error"]["code"] == "permission_denied"
        assert "cors_origins" in simple.json()["error"]["message"]
        created = http.post("/v1/streams", content=body,
                            headers={"content-type": "application/json"})  # fmt: skip
        assert created.status_code == 201, created.text
        stream = created.json()["id"]
        cancel = http.post(f"/v1/streams/{stream}/cancel", headers={"origin": EVIL})
        assert cancel.status_code == 403, cancel.text
        for origin in (APP, server.url):  # the allowed one, and the gateway's own
            allowed = http.post(f"/v1/streams/{stream}/cancel", headers={"origin": origin})
            assert allowed.status_code == 200, (origin, allowed.text)
        reading = http.get(f"/v1/streams/{stream}", headers={"origin": EVIL})
        assert reading.status_code == 200  # reads change nothing (CORS keeps the answer)


def test_a_body_must_say_it_is_json(server: ServerProcess) -> None:
    body = json.dumps(chat_body("hi", 1, max_tokens=3))
    with httpx.Client(base_url=server.url, timeout=20) as http:
        for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = {"content-type": content_type} if content_type else {}
            refused = http.post("/v1/streams", content=body, headers=headers)
            assert refused.status_code == 415, (content_type, refused.text)
            assert refused.json()["error"]["code"] == "unsupported_media_type"
        for content_type in ("application/json; charset=utf-8", "application/merge-patch+json"):
            accepted = http.post("/v1/streams", content=body,
                                 headers={"content-type": content_type})  # fmt: skip
            assert accepted.status_code == 201, (content_type, accepted.text)


def test_a_rebound_host_is_refused(server: ServerProcess) -> None:
    port = server.url.rsplit(":", 1)[1]
    with httpx.Client(base_url=server.url, timeout=20) as http:
        rebound = http.get("/v1/models", headers={"host": f"attacker.example:{port}"})
        assert rebound.status_code == 400, rebound.text
        assert "allowed_hosts" in rebound.json()["error"]["message"]
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost"):
            assert http.get("/v1/models", headers={"host": host}).status_code == 200, host


async def test_a_foreign_page_cannot_open_a_websocket(server: ServerProcess) -> None:
    url = server.url.replace("http://", "ws://") + "/v1/ws"
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(url, origin=websockets.Origin(EVIL)):
            pass
    assert refused.value.response.status_code == 403
    for origin in (None, websockets.Origin(APP), websockets.Origin(server.url)):
        async with websockets.connect(url, origin=origin) as ws:
            await ws.send(json.dumps({"op": "ping"}))
            assert json.loads(await ws.recv())["op"] == "pong"

"""The WebRTC signalling endpoints' refusals and bounds, over loopback HTTP: a malformed offer,
one with no data channel, the wrong content type, an oversized body, a candidate flood, a
session that never connects (closed after the ICE timeout), TURN credentials minted per caller.

Offers are made with aiortc and stripped of their candidates, so the gateway never sends a
connectivity check anywhere: no packet leaves loopback.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.servers import FAST_SYNTHETIC, ServerProcess, run_server
from tests.webrtc.support import require_aiortc

pytestmark = pytest.mark.timeout(60)

SECRET = "lab-secret"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    rules = tmp_path_factory.mktemp("rules")
    config = (
        FAST_SYNTHETIC
        + f"""
[rules]
dir = "{rules}"

[webrtc]
stun = ["stun:stun.lab.invalid:3478"]
turn = ["turn:turn.lab.invalid:3478?transport=udp"]
turn_secret = "{SECRET}"
ice_timeout_s = 1.0
max_candidates = 4
max_sdp_bytes = 20000
"""
    )
    with run_server(config=config) as running:
        yield running


async def _offer() -> str:
    aiortc = require_aiortc()
    pc = aiortc.RTCPeerConnection()
    pc.createDataChannel("airlane")
    await pc.setLocalDescription(await pc.createOffer())
    sdp = pc.localDescription.sdp
    await pc.close()
    lines = [line for line in sdp.splitlines() if not line.startswith("a=candidate")]
    return "\r\n".join(line for line in lines if line != "a=end-of-candidates") + "\r\n"


def _post(server: ServerProcess, body: bytes | str, content_type: str = "application/sdp"):  # type: ignore[no-untyped-def]
    return httpx.post(
        f"{server.url}/v1/webrtc", content=body, headers={"content-type": content_type}
    )


def _alive(server: ServerProcess) -> None:
    assert httpx.get(f"{server.url}/healthz").status_code == 200


@pytest.mark.parametrize(
    ("body", "content_type", "status", "words"),
    [
        ("hello", "application/sdp", 400, "must start with 'v=0'"),
        (
            "v=0\r\no=- 0 0 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n",
            "application/sdp",
            400,
            "no data channel",
        ),
        (
            "v=0\r\nm=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN\r\n",
            "application/sdp",
            400,
            "cannot be used",
        ),
        ("v=0", "text/plain", 415, "JSON"),
        ("v=0" + "x" * 30000, "application/sdp", 413, "exceeds"),
        (b"v=0\xff\xfe", "application/sdp", 400, "UTF-8"),
    ],
)
def test_a_bad_offer_is_a_clear_error_and_the_gateway_goes_on(
    server: ServerProcess, body: str | bytes, content_type: str, status: int, words: str
) -> None:
    response = _post(server, body, content_type)
    assert response.status_code == status, response.text
    assert words in response.json()["error"]["message"]
    _alive(server)


def test_an_offer_is_answered_and_a_session_that_never_connects_is_closed(
    server: ServerProcess,
) -> None:
    offer = asyncio.run(_offer())
    response = _post(server, offer)
    assert response.status_code == 201, response.text
    assert response.headers["content-type"] == "application/sdp"
    assert "webrtc-datachannel" in response.text and "a=candidate" in response.text
    session = response.headers["location"]
    links = response.headers.get_list("link")
    assert '<stun:stun.lab.invalid:3478>; rel="ice-server"' in links
    assert any('credential-type="password"' in link for link in links)

    flood = "".join(
        f"a=candidate:{i} 1 udp 2130706431 10.1.2.{i} 5{i:04d} typ host\r\n" for i in range(10)
    )
    refused = httpx.patch(
        f"{server.url}{session}",
        content=f"a=mid:0\r\n{flood}",
        headers={"content-type": "application/trickle-ice-sdpfrag"},
    )
    assert refused.status_code == 400 and "at most 4 candidates" in refused.text
    time.sleep(1.6)  # past ice_timeout_s: nothing connected
    gone = httpx.patch(
        f"{server.url}{session}",
        content="a=mid:0\r\n",
        headers={"content-type": "application/trickle-ice-sdpfrag"},
    )
    assert gone.status_code == 404
    _alive(server)


def test_turn_credentials_are_minted_per_caller_and_expire(server: ServerProcess) -> None:
    servers = httpx.get(f"{server.url}/v1/webrtc/ice-servers").json()["iceServers"]
    stun, turn = servers
    assert stun == {"urls": ["stun:stun.lab.invalid:3478"]}
    expiry, who = turn["username"].split(":", 1)
    assert who == "anonymous" and 3500 < int(expiry) - time.time() <= 3600
    expected = hmac.new(SECRET.encode(), turn["username"].encode(), hashlib.sha1).digest()
    assert base64.b64decode(turn["credential"]) == expected


def test_an_unknown_session_is_not_found(server: ServerProcess) -> None:
    response = httpx.delete(f"{server.url}/v1/webrtc/nope")
    assert response.status_code == 404
    assert httpx.put(f"{server.url}/v1/webrtc/x", json={}).status_code in (404, 405)


def test_the_webrtc_config_is_checked(tmp_path: Path) -> None:
    from airlane.server.config import ConfigError, load_config

    path = tmp_path / "a.toml"
    path.write_text('[webrtc]\nturn = ["turn:t:3478"]\n')
    with pytest.raises(ConfigError, match="turn_secret"):
        load_config(path)

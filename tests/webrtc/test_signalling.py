"""The WebRTC signalling endpoints' refusals and bounds, over loopback HTTP: a malformed offer,
one with no data channel, the wrong content type, an oversized body, a candidate flood, a
session that never connects (closed after the ICE timeout), an ICE restart (422), TURN
credentials minted per caller; and the same signalling over AIRC (``RTC_*`` messages, on the
TCP listener and over WebSocket).

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

from airlane.client import RequestRejected
from airlane.client.airc import AircClient
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
    # One certificate fingerprint, SHA-256: a peer that keeps only one line (libdatachannel)
    # verifies with the hash it defaults to (see `peer.sha256_fingerprint_only`).
    fingerprints = [line for line in response.text.splitlines() if "a=fingerprint:" in line]
    assert len(fingerprints) == 1 and fingerprints[0].startswith("a=fingerprint:sha-256 ")
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


def test_the_offers_candidates_and_trickled_ones_count_together(server: ServerProcess) -> None:
    # max_candidates (4 here) bounds a connection's candidates, the offer's and trickled
    # ones together; the offer's used to be counted apart (twice the bound got in), and two
    # fragments at once could pass it together.
    def host(i: int) -> str:
        return f"a=candidate:{i} 1 udp 2130706431 127.0.0.1 {9 + i} typ host\r\n"

    offer = asyncio.run(_offer()).replace("a=mid:0\r\n", "a=mid:0\r\n" + host(1) + host(2), 1)
    response = _post(server, offer)
    assert response.status_code == 201, response.text
    url = f"{server.url}{response.headers['location']}"
    headers = {"content-type": "application/trickle-ice-sdpfrag"}
    refused = httpx.patch(url, content=f"a=mid:0\r\n{host(3)}{host(4)}{host(5)}", headers=headers)
    assert refused.status_code == 400 and "at most 4 candidates" in refused.text

    async def both() -> list[int]:
        async with httpx.AsyncClient() as client:
            answers = await asyncio.gather(
                *(
                    client.patch(url, content=f"a=mid:0\r\n{host(n)}{host(n + 1)}", headers=headers)
                    for n in (6, 8)
                )
            )
        return sorted(answer.status_code for answer in answers)

    assert asyncio.run(both()) == [204, 400]  # two fit beside the offer's two, not four
    httpx.delete(url)
    _alive(server)


def _ufrag(sdp: str) -> str:
    return next(line.split(":", 1)[1] for line in sdp.splitlines() if "ice-ufrag" in line)


def test_an_ice_restart_is_refused_with_422_and_says_what_to_do(server: ServerProcess) -> None:
    offer = asyncio.run(_offer())
    session = _post(server, offer).headers["location"]

    def patch(fragment: str) -> httpx.Response:
        return httpx.patch(
            f"{server.url}{session}",
            content=fragment,
            headers={"content-type": "application/trickle-ice-sdpfrag"},
        )

    assert patch(f"a=ice-ufrag:{_ufrag(offer)}\r\na=mid:0\r\n").status_code == 204
    restart = patch("a=ice-ufrag:fresh\r\na=ice-pwd:0123456789abcdefghijkl\r\na=mid:0\r\n")
    assert restart.status_code == 422, restart.text
    error = restart.json()["error"]
    assert error["code"] == "unsupported"
    assert "cannot restart ICE" in error["message"] and "new peer connection" in error["message"]
    assert httpx.delete(f"{server.url}{session}").status_code == 204
    _alive(server)


@pytest.mark.parametrize("link", ["tcp", "websocket"])
async def test_signalling_over_airc_answers_and_refuses_like_http(
    server: ServerProcess, link: str
) -> None:
    if link == "tcp":
        assert server.airc is not None
        airc = await AircClient.tcp(*server.airc)
    else:
        airc = await AircClient.websocket(server.url)
    async with airc:
        with pytest.raises(RequestRejected, match="must start with 'v=0'") as bad:
            await airc.webrtc_offer("hello")
        assert bad.value.code == "invalid_request"
        offer = await _offer()
        session, answer = await airc.webrtc_offer(offer)
        assert "webrtc-datachannel" in answer and "a=candidate" in answer
        await airc.webrtc_candidates(session, "a=mid:0\r\n")
        with pytest.raises(RequestRejected, match="cannot restart ICE") as restart:
            await airc.webrtc_candidates(session, "a=ice-ufrag:fresh\r\na=mid:0\r\n")
        assert restart.value.code == "unsupported"
        with pytest.raises(RequestRejected, match="at most 20000 bytes"):
            await airc.webrtc_offer("v=0" + "x" * 30000)
        await airc.webrtc_close(session)
        with pytest.raises(RequestRejected, match="no WebRTC session") as gone:
            await airc.webrtc_close(session)
        assert gone.value.code == "not_found"
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


def test_past_max_peers_an_offer_is_refused_503_until_a_peer_goes() -> None:
    config = FAST_SYNTHETIC + "\n[webrtc]\nmax_peers = 2\nice_timeout_s = 1.0\n"
    with run_server(config=config) as gateway:
        offer = asyncio.run(_offer())
        assert [_post(gateway, offer).status_code for _ in range(2)] == [201, 201]
        refused = _post(gateway, offer)
        assert refused.status_code == 503, refused.text
        error = refused.json()["error"]
        assert error["code"] == "overloaded" and "2 WebRTC peer connections" in error["message"]
        _alive(gateway)
        time.sleep(1.6)  # past ice_timeout_s: the two that never connected are closed
        assert _post(gateway, offer).status_code == 201

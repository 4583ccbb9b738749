"""Lanes over HTTP/3: a QUIC connection that declares a lane has every datagram marked.

The gateway answers all QUIC connections from one UDP socket, so it marks datagrams, not the
socket (`airlane.runtime.datagram_lanes`). A relay between client and gateway reads the DSCP
of each packet it forwards (`tests.sockets.TosRelay`), as a router on the path would: after
an ``airlane-lane`` header (`H3Client.set_lane`) or a WebTransport session's ``lane`` op, the
gateway's datagrams of that connection carry the lane's code point, another connection's
from the same socket carry none, and a lane that is none gets a 400.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from airlane.artifacts.packer import pack
from airlane.client.h3 import H3Client
from airlane.client.webtransport import WebTransportClient
from tests.artifacts.support import checkpoint
from tests.servers import ServerProcess, run_server
from tests.sockets import TosRelay

pytestmark = pytest.mark.timeout(60)

CONTROL, BULK = 40, 10  # the default DSCP code points of the two lanes (docs/lanes.md)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with run_server() as running:
        yield running


@pytest.fixture
def relay(server: ServerProcess) -> Iterator[TosRelay]:
    assert server.h3 is not None, "the gateway printed no HTTP/3 address"
    with TosRelay(server.h3) as running:
        yield running


async def healthy(client: H3Client) -> None:
    response = await client.request("GET", "/healthz")
    assert response.status == 200
    await response.read()


async def settled() -> None:
    """Wait out the acknowledgements still on their way."""
    await asyncio.sleep(0.2)


async def test_an_airlane_lane_header_marks_the_connections_datagrams(
    server: ServerProcess, relay: TosRelay
) -> None:
    assert server.h3 is not None
    async with await H3Client.connect(*relay.address, verify=False) as client, \
            await H3Client.connect(*server.h3, verify=False) as other:  # fmt: skip
        with TosRelay(server.h3) as other_relay:
            other_client = await H3Client.connect(*other_relay.address, verify=False)
            async with other_client:
                await healthy(client)
                await settled()
                assert set(relay.from_target()) == {0}  # nothing declared: unmarked

                assert client.set_lane("control") == "dscp=40 priority=6"
                await healthy(client)  # the header goes with it
                await settled()
                relay.clear()
                other_relay.clear()
                await healthy(client)
                await healthy(other_client)
                await healthy(other)
                await settled()
                # Both ways: the client marked its socket, the gateway each datagram.
                assert set(relay.to_target()) == {CONTROL}
                assert set(relay.from_target()) == {CONTROL}
                # The same gateway socket, another connection: unmarked.
                assert other_relay.from_target() and set(other_relay.from_target()) == {0}

                client.set_lane("bulk")
                await healthy(client)
                await settled()
                relay.clear()
                await healthy(client)
                await settled()
                assert set(relay.from_target()) == {BULK}


async def test_a_lane_that_is_none_is_a_400_and_the_connection_serves_on(
    server: ServerProcess,
) -> None:
    assert server.h3 is not None
    async with await H3Client.connect(*server.h3, verify=False) as client:
        refused = await client.request("GET", "/healthz", headers=[("airlane-lane", "fastest")])
        assert refused.status == 400
        # The JSON error every other refusal has (it was a text/plain line).
        assert refused.header("content-type") == "application/json"
        error = orjson.loads(await refused.read())["error"]
        assert error["code"] == "invalid_request"
        assert "control, interactive or bulk" in error["message"]
        await healthy(client)


async def test_a_webtransport_lane_op_marks_the_session_s_connection(
    relay: TosRelay,
) -> None:
    async with await WebTransportClient.connect(*relay.address, verify=False) as session:
        reply = await session.call({"op": "lane", "lane": "control"})
        assert reply["marks"] == "dscp=40 priority=6"
        await settled()
        relay.clear()
        reply = await session.call({"op": "lane", "lane": "bulk"})
        assert reply["marks"] == "dscp=10 priority=2"
        await settled()
        # The answer to the second op already went out in the new lane.
        assert relay.from_target() and set(relay.from_target()) == {BULK}


async def test_a_model_update_over_http3_travels_in_the_bulk_lane(tmp_path: Path) -> None:
    store = tmp_path / "store"
    pack([checkpoint(tmp_path / "a.safetensors", seed=1, layers=1, hidden=64)], store,
         name="base", version="1")  # fmt: skip
    config = "[lanes]\nbulk_response_bytes = 4096\n"
    with run_server("--artifacts", str(store), config=config) as gateway:
        assert gateway.h3 is not None
        with TosRelay(gateway.h3) as relay:
            async with await H3Client.connect(*relay.address, verify=False) as client:
                client.set_lane("control")
                response = await client.request("GET", "/v1/artifacts/base/1/manifest.json")
                path = json.loads(await response.read())["files"][0]["path"]
                await settled()
                relay.clear()
                download = await client.request("GET", f"/v1/artifacts/base/1/{path}")
                body = await download.read()
                assert download.status == 200 and len(body) > 4096
                during = relay.from_target()
                await healthy(client)
                await settled()
                after = relay.from_target()[len(during) :]
        # The file's bytes went out bulk; the connection's lane came back after it.
        assert during.count(BULK) > len(body) // 1500 // 2, during
        assert after[-1] == CONTROL


def test_the_docs_example_runs_as_written(server: ServerProcess, tmp_path: Path) -> None:
    """docs/lanes.md's HTTP/3 session, against this gateway."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "lanes.md").read_text()
    code = next(
        block
        for block in re.findall(r"^```python\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
        if "H3Client" in block
    )
    assert '"127.0.0.1", 8420' in code and server.h3 is not None
    script = tmp_path / "h3_lanes.py"
    script.write_text(code.replace("8420", str(server.h3[1])))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[0] == "dscp=40 priority=6"
    assert done.stdout.splitlines()[1].startswith("200 b'{")

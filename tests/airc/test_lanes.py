"""A control connection beside the data connection, over AIRC on TCP and WebSocket against a
real gateway: ``SET_LANE`` marks the gateway's side of the socket (read back with ``ss``
from outside the process), ``CANCEL_STREAM`` on the control connection stops a generation
that runs on the data connection, and a bad lane is a clear error on a connection that goes
on serving."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from airlane.client import RequestRejected
from airlane.client.airc import AircClient
from tests.client.conftest import LONG_REQUEST
from tests.servers import ServerProcess
from tests.sockets import ss_tos

from .conftest import Connect


def _server_side_marks(server: ServerProcess, client: AircClient) -> str:
    """``ss --tos`` of the gateway's end of ``client``'s connection."""
    sock = client._pipe.socket  # the client's end: its local port names the connection
    assert sock is not None
    local_port = sock.getsockname()[1]
    shown = ss_tos("dport", local_port)
    assert shown.strip(), f"no connection to port {local_port}"
    return shown


async def test_set_lane_marks_both_ends_of_the_connection(
    client: AircClient, gateway: ServerProcess
) -> None:
    marks = await client.set_lane("control")
    assert marks == "dscp=40 priority=6"
    assert client.marks == "dscp=40 priority=6"  # this end, marked by the client itself
    shown = _server_side_marks(gateway, client)
    assert "tos:0xa0" in shown and "class_id:0x6" in shown, shown
    assert await client.set_lane("bulk") == "dscp=10 priority=2 notsent_lowat=131072"
    shown = _server_side_marks(gateway, client)
    assert "tos:0x28" in shown and "class_id:0x2" in shown, shown


async def test_cancel_on_the_control_connection_stops_the_data_connections_generation(
    connect: Connect,
) -> None:
    async with await connect() as data, await connect() as control:
        await control.set_lane("control")
        await data.set_lane("bulk")
        stream = await data.generate(LONG_REQUEST)
        await anext(stream)
        assert await control.cancel_stream(stream.stream_id) is True
        rest = [event async for event in stream]
        assert rest[-1].kind == "done"
        assert rest[-1].data.get("finish_reason") == "cancelled"
        # Ended: a second cancel finds nothing running.
        assert await control.cancel_stream(stream.stream_id) is False


async def test_a_bad_lane_or_stream_is_an_error_and_the_connection_goes_on(
    client: AircClient,
) -> None:
    from airlane.wire.airc import SetLane

    request_id = client._next_id()
    with pytest.raises(RequestRejected, match="lane must be 0") as info:
        await client._request(request_id, SetLane(request_id, 7))
    assert info.value.code == "invalid_request"
    with pytest.raises(RequestRejected) as missing:
        await client.cancel_stream("no-such-stream")
    assert missing.value.code == "stream_not_found"
    assert await client.set_lane("interactive") == "dscp=18 priority=0"


def test_the_docs_example_runs_as_written(gateway: ServerProcess, tmp_path: Path) -> None:
    """docs/lanes.md's Python session, against this gateway's AIRC listener."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "lanes.md").read_text()
    code = re.findall(r"^```python\n(.*?)^```", page, re.MULTILINE | re.DOTALL)[0]
    assert '"127.0.0.1", 8421' in code and gateway.airc is not None
    script = tmp_path / "lanes.py"
    script.write_text(code.replace("8421", str(gateway.airc[1])))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "dscp=40 priority=6",
        "dscp=10 priority=2 notsent_lowat=131072",
        "True",
    ]

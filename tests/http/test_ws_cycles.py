"""A finished WebSocket connection leaves no reference cycle behind: websockets' protocol and
its parser generator refer to each other (and so does the traceback of the error that stopped
the parser), and `airlane.transports.http.ws_protocol` breaks those when the connection is
lost, so the connection's objects go as soon as it does rather than at the next full pass of
the collector (minutes apart under `airlane.server.gcpacer`). Checked in a fresh interpreter
with the collector off, counting the server protocols still alive."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = """
import asyncio, gc
import websockets
import websockets.server
from airlane.server.gcpacer import GcConfig
from airlane.server import ServerConfig, serve

gc.disable()  # nothing but reference counting frees what the connections leave

async def main():
    ready = asyncio.Event()
    urls = []
    def on_ready(listening):
        urls.append(listening.http)
        ready.set()
    config = ServerConfig(port=0, log_level="warning", gc=GcConfig(paced=False))
    server = asyncio.create_task(serve(config, on_ready=on_ready))
    await asyncio.wait_for(ready.wait(), 30)
    url = urls[0].replace("http://", "ws://") + "/v1/loadtest/ws?chunks=5"
    for _ in range(5):
        async with websockets.connect(url, compression=None) as ws:
            async for _message in ws:
                pass
    for _ in range(3):  # closed by the server for a message over the limit (1009)
        async with websockets.connect(url, compression=None, max_size=None) as ws:
            await ws.send("x" * ((1 << 20) + 1))
            try:
                async for _message in ws:
                    pass
            except websockets.ConnectionClosed:
                pass
    await asyncio.sleep(0.5)  # the server's side of the last close
    gc.disable()  # serve() tuned the collector; keep it off for the count
    alive = sum(1 for o in gc.get_objects() if type(o) is websockets.server.ServerProtocol)
    print("alive", alive)
    server.cancel()
    try:
        await server
    except asyncio.CancelledError:
        pass

asyncio.run(main())
"""


def test_finished_websocket_connections_leave_no_protocol_behind() -> None:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-1] == "0", result.stdout

"""Yjs editors leaving a room while updates flow to them: a peer whose socket is closing is
written to by the room until its reader sees the close, and that write must end quietly.

Before Airlane's own server, such a write (``yjs._write`` -> ``send_many`` -> websockets'
``send_binary``) raised ``InvalidState: connection is closing`` out of the application and
logged a traceback whenever an editor left a busy room. Now a send on a closing socket raises
`ClientDisconnected`, an `OSError` the Yjs session treats as the peer gone."""

from __future__ import annotations

import asyncio
import logging

import pytest
from pycrdt import Text
from websockets.asyncio.client import connect

from airlane.hub import MemoryHub
from airlane.sync.yjs import YRoomsConfig

from .support import PyClient, py_client, running_node

ROUNDS = 12
"""Editors that join and leave, one after the other, while the writer writes."""
UPDATES = 400
"""Changes the writer makes, a few per loop turn (the updates keep flowing)."""


async def test_editors_leaving_while_updates_flow_log_nothing(
    hub: MemoryHub, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with (
        running_node(hub, YRoomsConfig()) as node,
        py_client(node, "busy", name="writer") as writer,
    ):
        text = writer.doc.get("text", type=Text)
        stop = asyncio.Event()

        async def write() -> None:
            for n in range(UPDATES):
                if stop.is_set():
                    return
                text.insert(len(text), f"{n} ")
                await writer.flush()
                if n % 4 == 0:
                    await asyncio.sleep(0)  # let the room fan the updates out

        writing = asyncio.create_task(write())
        for round_ in range(ROUNDS):
            ws = await connect(f"{node.url}/busy")
            editor = PyClient(ws, f"editor-{round_}")
            await editor.start()
            await asyncio.wait_for(editor.synced.wait(), 10)
            if round_ % 2:
                await ws.close()  # a clean leave: the Close handshake
            else:
                ws.transport.abort()  # the tab closed: the connection is gone
            await editor.aclose()
        stop.set()
        await asyncio.wait_for(writing, 30)
        room = node.rooms.get("busy")
        assert room is not None
        async with asyncio.timeout(10):
            while room.peers > 1:  # every editor has been let go of
                await asyncio.sleep(0.01)
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, [r.getMessage() for r in bad]

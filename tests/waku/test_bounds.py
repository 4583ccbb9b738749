"""Bounds that hostile or merely long-lived peers reach, with real peers: a js-waku light node
that gets hundreds of filter pushes (it never closes its side of a push stream), a relay peer
that stops reading and asks (IWANT) for one large cached message thousands of times, and a
light-push client that pushes to more content topics than the node relays.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib

import pytest

from airlane.core import Event
from airlane.wire.libp2p import PeerId
from tests.waku.support import TOPIC, js_waku, local_node, node_binary

pytestmark = pytest.mark.timeout(90)


async def test_a_js_waku_light_node_keeps_receiving_past_the_stream_limit() -> None:
    """js-waku reads each filter-push stream to its end and never closes its own side, so a
    stream per push would leave every push stream half open on both sides: past the
    connection's stream limit (64 here) or js-libp2p's 100 filter-push streams per
    connection, pushes (and the peer's own requests) would be refused."""
    node_binary()
    async with local_node() as node, js_waku(str(node.multiaddrs[0])) as light:
        await light.command("subscribe", contentTopic=TOPIC)
        peer = PeerId.parse((await light.command("peers"))["peerId"])
        connection = node.connection_to(peer)
        assert connection is not None
        for n in range(200):  # paced: each push goes out on its own, as a chat's would
            await node.gateway.publish(
                node.bridge.principal, "waku" + TOPIC, Event.message({"n": n})
            )
            await asyncio.sleep(0.01)
        with contextlib.suppress(TimeoutError):  # the count is what the assertion shows
            await light.wait_messages(200, timeout=20)
        received = light.messages
        numbers = [int(base64.b64decode(m["payload"])[5:-1]) for m in received]
        assert numbers == list(range(200))
        assert node.filter.stats.dropped == 0
        # One push stream held open, not one per push: the connection stays far from its
        # limit (js-waku keeps a few streams of its own open ahead of use).
        assert connection.open_streams < 16
        # The light node's own requests still get a stream.
        pushed = await light.command(
            "push", contentTopic=TOPIC, payload=base64.b64encode(b"after").decode()
        )
        assert pushed["successes"] and not pushed["failures"]
        await light.wait_messages(201)
        # A subscription that ends resets its push stream; the next one gets a new stream.
        await light.command("unsubscribe", contentTopic=TOPIC)
        async with asyncio.timeout(10):
            while node.filter.topics_of(peer):
                await asyncio.sleep(0.02)
        await light.command("subscribe", contentTopic=TOPIC)
        await node.gateway.publish(node.bridge.principal, "waku" + TOPIC, Event.message("again"))
        again = await light.wait_messages(202)
        assert base64.b64decode(again[-1]["payload"]) == b'"again"'
        assert connection.open_streams < 16

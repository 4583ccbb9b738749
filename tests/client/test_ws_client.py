"""`WsClient` against a real gateway: generate, subscribe, errors, a slow reader, and a socket
cut mid-stream (re-subscribed from the last id, nothing lost or repeated)."""

from __future__ import annotations

import asyncio

import pytest

from airlane.client import (
    ClientClosed,
    RetryPolicy,
    StreamNotFound,
    TextAccumulator,
    WsClient,
    WsSubscription,
)
from tests.client.conftest import LONG_REQUEST, reference_text
from tests.client.proxy import TcpProxy
from tests.servers import ServerProcess


async def drain(subscription: WsSubscription, delay_s: float = 0.0) -> TextAccumulator:
    state = TextAccumulator()
    async for event in subscription:
        assert state.apply(event), f"event {event.id} arrived twice"
        if delay_s:
            await asyncio.sleep(delay_s)
    return state


async def test_generate_streams_the_exact_text(gateway: ServerProcess) -> None:
    async with WsClient(gateway.url) as ws:
        subscription = await ws.generate(LONG_REQUEST)
        state = await drain(subscription)
        assert subscription.finished and subscription.last_id is not None
        await ws.ping()
    assert state.finish_reason is not None
    assert state.content == reference_text(gateway.url, LONG_REQUEST)


async def test_many_streams_share_one_socket(gateway: ServerProcess) -> None:
    requests = [
        {**LONG_REQUEST, "max_tokens": 40, "messages": [{"role": "user", "content": f"q{n}"}]}
        for n in range(12)
    ]
    async with WsClient(gateway.url) as ws:
        subscriptions = await asyncio.gather(*(ws.generate(r) for r in requests))
        states = await asyncio.gather(*(drain(s) for s in subscriptions))
    assert len({s.stream_id for s in subscriptions}) == 12
    for request, state in zip(requests, states, strict=True):
        assert state.content == reference_text(gateway.url, request)


async def test_subscribe_replays_an_ended_stream(gateway: ServerProcess) -> None:
    async with WsClient(gateway.url) as ws:
        first = await ws.generate({**LONG_REQUEST, "max_tokens": 20})
        await drain(first)
        again = await drain(await ws.subscribe(first.stream_id))
    assert again.content == reference_text(gateway.url, {**LONG_REQUEST, "max_tokens": 20})


async def test_subscribe_to_an_unknown_stream(gateway: ServerProcess) -> None:
    async with WsClient(gateway.url) as ws:
        with pytest.raises(StreamNotFound):
            await ws.subscribe("no-such-stream")
        await ws.ping()  # the socket stays usable


async def test_a_slow_reader_catches_up_from_the_log(gateway: ServerProcess) -> None:
    # Two buffered events at most: the subscription overflows, turns lagging, and is
    # re-subscribed from its last event; the gateway sends the rest from its log.
    async with WsClient(gateway.url, max_queue=2) as ws:
        subscription = await ws.generate(LONG_REQUEST)
        state = await drain(subscription, delay_s=0.003)
        assert ws.catch_ups >= 1
    assert state.content == reference_text(gateway.url, LONG_REQUEST)


async def test_reconnects_after_a_cut_socket(gateway: ServerProcess) -> None:
    retry = RetryPolicy(max_retries=3, base_delay_s=0.01, max_delay_s=0.05)
    async with TcpProxy(gateway.url) as proxy, WsClient(proxy.url, retry=retry) as ws:
        subscription = await ws.generate(LONG_REQUEST)
        state, severed = TextAccumulator(), False
        async for event in subscription:
            assert state.apply(event), f"event {event.id} arrived twice"
            if event.seq >= 20 and not severed:
                proxy.sever()
                severed = True
        assert ws.reconnects == 1
    assert state.content == reference_text(gateway.url, LONG_REQUEST)


async def test_requests_after_close_fail_locally(gateway: ServerProcess) -> None:
    ws = WsClient(gateway.url)
    await ws.connect()
    await ws.aclose()
    with pytest.raises(ClientClosed):
        await ws.ping()

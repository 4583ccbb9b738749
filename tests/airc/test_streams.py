"""Generate, subscribe, resume and cancel Airlane streams over AIRC, on TCP and WebSocket,
against a real gateway process. Every text is compared with the same request answered
without streaming, so a lost, repeated or reordered event shows as a wrong text."""

from __future__ import annotations

import asyncio
import itertools

import httpx
import pytest

from airlane.client import RequestRejected, StreamEvent
from airlane.client.airc import AircClient
from airlane.wire.airc import AUDIO_STREAMS
from tests.client.conftest import LONG_REQUEST, reference_text
from tests.servers import ServerProcess

from .conftest import Connect

SHORT_REQUEST = {
    "model": "airlane-synthetic",
    "messages": [{"role": "user", "content": "Say something short."}],
    "max_tokens": 24,
}


async def read_all(stream: object) -> list[StreamEvent]:
    return [event async for event in stream]  # type: ignore[attr-defined]


def text_of(events: list[StreamEvent]) -> str:
    return "".join(event.text for event in events if event.kind == "delta")


async def test_generate_streams_the_whole_answer(
    client: AircClient, gateway: ServerProcess
) -> None:
    stream = await client.generate(LONG_REQUEST)
    events = await read_all(stream)
    assert text_of(events) == reference_text(gateway.url, LONG_REQUEST)
    # Increasing; deltas a busy machine could not send at once arrive coalesced
    # (one frame carrying the last seq of the run, by design), so seqs may skip: the text,
    # compared above, is what proves nothing was lost.
    seqs = [e.seq for e in events]
    assert seqs[0] >= 1 and seqs == sorted(set(seqs))
    assert events[-1].kind == "done"
    ack = client.last_gen_ack
    assert ack is not None and ack.stream >= 20 and ack.airlane_stream == stream.stream_id
    assert ack.jitter_buffer_us == 60_000
    assert events[-1].id == f"{ack.epoch}:{events[-1].seq}"


async def test_many_streams_share_one_connection(
    client: AircClient, gateway: ServerProcess
) -> None:
    requests = [
        {**SHORT_REQUEST, "messages": [{"role": "user", "content": f"question {i}"}]}
        for i in range(20)
    ]
    streams = await asyncio.gather(*(client.generate(r) for r in requests))
    # Each answer is routed to its own stream: a mix-up would show as a wrong text.
    texts = await asyncio.gather(*(read_all(s) for s in streams))
    for request, events in zip(requests, texts, strict=True):
        assert text_of(events) == reference_text(gateway.url, request)


async def test_requested_stream_id_is_honoured(client: AircClient) -> None:
    stream = await client.generate(SHORT_REQUEST, requested_stream=3, sample_rate=24_000)
    assert client.last_gen_ack is not None and client.last_gen_ack.stream == 3
    assert 3 in AUDIO_STREAMS
    assert (await read_all(stream))[-1].kind == "done"
    # Concurrent requests for the same StreamID: one gets it, the others another one.
    # (Long answers, so that none has ended and left its StreamID before they are looked up.)
    streams = await asyncio.gather(
        *(client.generate(LONG_REQUEST, requested_stream=5) for _ in range(4))
    )
    numbers = [client._number_of(s) for s in streams]
    assert 5 in numbers and len(set(numbers)) == 4
    for each in streams:
        assert (await read_all(each))[-1].kind == "done"


async def test_subscribe_from_the_start_and_resume_after_a_lost_connection(
    connect: Connect, gateway: ServerProcess
) -> None:
    expected = reference_text(gateway.url, LONG_REQUEST)
    first = await connect()
    stream = await first.generate(LONG_REQUEST)
    seen: list[StreamEvent] = []
    async for event in stream:
        seen.append(event)
        if len(seen) == 40:
            break
    # The connection dies mid-stream: no goodbye, the transport is just gone.
    await first._pipe.aclose()
    await first.aclose()
    async with await connect() as second:
        resumed = await second.subscribe(stream.stream_id, resume=seen[-1].id)
        rest = await read_all(resumed)
    events = seen + rest
    # A reader that resumes behind the producer gets the deltas it missed coalesced (each
    # carries the last seq it covers), so seqs only have to increase.
    assert all(a.seq < b.seq for a, b in itertools.pairwise(events))
    assert text_of(events) == expected
    async with await connect() as third:
        # From the start, another reader of the same stream gets everything again.
        again = await read_all(await third.subscribe(stream.stream_id))
        assert text_of(again) == expected


async def test_resume_at_the_end_of_a_finished_stream_yields_nothing(
    client: AircClient,
) -> None:
    stream = await client.generate(SHORT_REQUEST)
    last = (await read_all(stream))[-1]
    assert last.kind == "done"
    at_end = await client.subscribe(stream.stream_id, resume=last.id)
    assert await read_all(at_end) == []


async def test_cancel_ends_the_stream_with_done_cancelled(client: AircClient) -> None:
    stream = await client.generate(LONG_REQUEST)
    first = await anext(stream)
    assert first.seq == 1
    assert await client.cancel(stream) is True
    rest = await read_all(stream)
    assert rest[-1].kind == "done"
    assert rest[-1].data.get("finish_reason") == "cancelled"


async def test_unsubscribe_detaches_without_cancelling(
    client: AircClient, gateway: ServerProcess
) -> None:
    stream = await client.generate(LONG_REQUEST)
    await anext(stream)
    token = await client.unsubscribe(stream.stream_id)
    assert token is not None
    info = httpx.get(f"{gateway.url}/v1/streams/{stream.stream_id}", timeout=10).json()
    assert info["finish_reason"] != "cancelled"


async def test_refused_requests_get_an_error_and_the_connection_stays_open(
    client: AircClient,
) -> None:
    with pytest.raises(RequestRejected) as missing:
        await client.subscribe("no-such-stream")
    assert missing.value.code == "stream_not_found"
    with pytest.raises(RequestRejected) as invalid:
        await client.generate({"model": "m", "messages": []})
    assert invalid.value.code == "invalid_parameter"
    assert "messages" in invalid.value.message
    with pytest.raises(ValueError, match="not a resume token"):
        await client.subscribe("x", resume="not-a-token:abc")
    with pytest.raises(RequestRejected) as beyond:
        stream = await client.generate(SHORT_REQUEST)
        last = (await read_all(stream))[-1]
        await client.subscribe(stream.stream_id, resume=f"{last.id.rpartition(':')[0]}:999")
    assert beyond.value.code == "invalid_resume"
    # Still serving.
    assert (await read_all(await client.generate(SHORT_REQUEST)))[-1].kind == "done"


async def test_clock_offset_is_measured(client: AircClient) -> None:
    offset = await client.sync_clock()
    # Both clocks count from their own session start, a few milliseconds apart at most here.
    assert abs(offset) < 2_000_000
    assert client.connection.clock.delay_us is not None

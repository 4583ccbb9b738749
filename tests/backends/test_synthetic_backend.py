"""The synthetic backend: deterministic text, tool calls, timing and benchmark chunks."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from airlane.backends import synthetic
from airlane.backends.base import Backend, BackendError, GenerationRequest, LoadTestSpec
from airlane.backends.synthetic import (
    DEFAULT_YIELD_EVERY,
    LOADTEST_CHUNK_BYTES,
    LOADTEST_TOKENS_PER_CHUNK,
    SyntheticBackend,
    SyntheticConfig,
    SyntheticScript,
)
from airlane.core.events import Channel, Event, Kind

FAST = SyntheticConfig(speed=0)
MESSAGES = [{"role": "user", "content": "Tell me about rivers and harbors."}]
TOOLS = [
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}},
]


def request(**fields: object) -> GenerationRequest:
    values: dict[str, object] = {"model": "synthetic-1", "messages": MESSAGES, "seed": 7}
    values.update(fields)
    return GenerationRequest(**values)  # type: ignore[arg-type]


async def collect(req: GenerationRequest, config: SyntheticConfig = FAST) -> list[Event]:
    return [event async for batch in SyntheticBackend(config).stream(req) for event in batch]


def text_of(events: list[Event], channel: Channel = Channel.CONTENT) -> str:
    return "".join(e.text for e in events if e.kind is Kind.DELTA and e.channel is channel)


def finish_reason(events: list[Event]) -> str:
    assert events[-1].kind is Kind.DONE
    assert events[-1].data is not None
    return str(events[-1].data["finish_reason"])


def usage_of(events: list[Event]) -> dict[str, int]:
    assert events[-2].kind is Kind.USAGE
    assert events[-2].data is not None
    return events[-2].data


def test_is_a_backend() -> None:
    backend: Backend = SyntheticBackend()  # mypy checks the protocol here
    assert isinstance(backend, Backend)
    assert backend.name == "synthetic"


# -- determinism ---------------------------------------------------------------------------


async def test_equal_requests_get_equal_text() -> None:
    first, second = await collect(request()), await collect(request())
    assert text_of(first) == text_of(second)
    assert [e.text for e in first] == [e.text for e in second]
    assert finish_reason(first) == finish_reason(second)


async def test_text_does_not_depend_on_grouping_or_timing() -> None:
    plain = text_of(await collect(request()))
    grouped = SyntheticConfig(speed=0, tokens_per_delta=3, itl_distribution="uniform")
    assert text_of(await collect(request(), grouped)) == plain


@pytest.mark.parametrize(
    "change",
    [
        {"seed": 8},
        {"seed": None},
        {"model": "synthetic-2"},
        {"messages": [{"role": "user", "content": "Something else."}]},
    ],
)
async def test_seed_model_and_messages_select_the_text(change: dict[str, object]) -> None:
    assert text_of(await collect(request(**change))) != text_of(await collect(request()))


def test_text_is_stable_across_processes() -> None:
    # Python's hash() is salted per process; the text must not depend on it.
    code = (
        "import asyncio\n"
        "from tests.backends.test_synthetic_backend import collect, request, text_of\n"
        "print(text_of(asyncio.run(collect(request()))))\n"
    )
    outputs = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONIOENCODING": "utf-8"}
        result = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            cwd=Path(__file__).parents[2],
            capture_output=True,
            check=True,
            timeout=30,
        )
        outputs.add(result.stdout.decode("utf-8").strip())
    assert len(outputs) == 1


async def test_text_reads_like_sentences_with_some_non_ascii() -> None:
    texts = [text_of(await collect(request(seed=seed, max_tokens=200))) for seed in range(30)]
    for text in texts:
        assert text[0].isupper() or not text[0].isascii()
        assert not text.startswith(" ")
        assert "  " not in text
    joined = " ".join(texts)
    assert any(not word.isascii() for word in joined.split())
    assert any(mark in joined for mark in ".?!")


# -- limits and finish reasons -------------------------------------------------------------


@pytest.mark.parametrize("max_tokens", [1, 5, 17, None])
async def test_max_tokens_bounds_the_completion(max_tokens: int | None) -> None:
    limit = max_tokens or synthetic.DEFAULT_DEFAULT_MAX_TOKENS
    reasons = set()
    for seed in range(40):
        events = await collect(request(seed=seed, max_tokens=max_tokens))
        deltas = [e for e in events if e.kind is Kind.DELTA]
        completion = usage_of(events)["completion_tokens"]
        assert completion == sum(e.tokens for e in deltas) <= limit
        reason = finish_reason(events)
        reasons.add(reason)
        if reason == "length":
            assert completion == limit
        else:
            assert reason == "stop"
            assert text_of(events)[-1] in ".?!"
    assert "length" in reasons
    if limit >= 17:
        assert "stop" in reasons


async def test_usage_then_done_end_every_stream() -> None:
    events = await collect(request())
    assert [e.kind for e in events[-2:]] == [Kind.USAGE, Kind.DONE]
    assert usage_of(events)["prompt_tokens"] == len(MESSAGES[0]["content"].split())
    assert sum(e.terminal for e in events) == 1


async def test_tokens_per_delta_groups_tokens() -> None:
    events = await collect(
        request(max_tokens=10, seed=3), SyntheticConfig(speed=0, tokens_per_delta=4)
    )
    deltas = [e for e in events if e.kind is Kind.DELTA]
    assert all(e.tokens == 4 for e in deltas[:-1])
    assert 1 <= deltas[-1].tokens <= 4


async def test_invalid_max_tokens_is_the_clients_fault() -> None:
    with pytest.raises(BackendError) as info:
        SyntheticBackend(FAST).stream(request(max_tokens=0))
    assert info.value.code == "invalid_request"


@pytest.mark.parametrize(
    "fields",
    [{"ttft_ms": -1}, {"speed": float("nan")}, {"tokens_per_delta": 0}, {"itl_distribution": "x"}],
)
def test_config_is_validated(fields: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SyntheticConfig(**fields)  # type: ignore[arg-type]


# -- reasoning and tool calls --------------------------------------------------------------


async def test_reasoning_comes_before_content() -> None:
    events = await collect(request(reasoning=True))
    channels = [e.channel for e in events if e.kind is Kind.DELTA]
    assert channels[0] is Channel.REASONING
    first_content = channels.index(Channel.CONTENT)
    assert all(c is Channel.REASONING for c in channels[:first_content])
    assert all(c is Channel.CONTENT for c in channels[first_content:])
    assert usage_of(events)["completion_tokens"] <= synthetic.DEFAULT_DEFAULT_MAX_TOKENS
    # The answer itself is the one a request without reasoning gets, up to the budget.
    assert text_of(await collect(request())).startswith(text_of(events))


async def test_tool_call_streams_json_arguments() -> None:
    events = await collect(request(tools=TOOLS))
    calls = [e for e in events if e.kind is Kind.TOOL_CALL]
    assert len(calls) >= 3
    assert text_of(events) == ""
    first = calls[0].data
    assert first is not None
    assert first["name"] == "search"
    assert first["id"].startswith("call_")
    int(first["id"].removeprefix("call_"), 16)
    assert all(e.data == {"index": 0} for e in calls[1:])
    arguments = orjson.loads("".join(e.text for e in calls))
    assert isinstance(arguments["query"], str) and arguments["query"]
    assert finish_reason(events) == "tool_calls"
    assert usage_of(events)["completion_tokens"] == len(calls)
    assert [e.text for e in await collect(request(tools=TOOLS))] == [e.text for e in events]


async def test_tool_choice_none_and_named() -> None:
    assert finish_reason(await collect(request(tools=TOOLS, tool_choice="none"))) != "tool_calls"
    named = {"type": "function", "function": {"name": "lookup"}}
    events = await collect(request(tools=TOOLS, tool_choice=named))
    assert events[0].data is not None and events[0].data["name"] == "lookup"


async def test_reasoning_then_tool_call() -> None:
    events = await collect(request(tools=TOOLS, reasoning=True))
    kinds = [e.kind for e in events]
    assert kinds[0] is Kind.DELTA and events[0].channel is Channel.REASONING
    assert Kind.TOOL_CALL in kinds


# -- timing --------------------------------------------------------------------------------


def test_script_due_times_follow_ttft_and_itl() -> None:
    config = SyntheticConfig(ttft_ms=100, itl_ms=10, itl_distribution="constant")
    steps = list(SyntheticScript(request(max_tokens=5, seed=3), config))
    deltas = [due for due, event in steps if event.kind is Kind.DELTA]
    assert deltas == pytest.approx([0.1 + 0.01 * i for i in range(len(deltas))])
    assert steps[-1][0] == pytest.approx(0.1 + 0.01 * len(deltas))


@pytest.mark.parametrize("distribution", ["uniform", "gamma"])
def test_itl_distribution_has_the_configured_mean(distribution: str) -> None:
    import random

    config = SyntheticConfig(itl_ms=20, itl_jitter_ms=5, itl_distribution=distribution)  # type: ignore[arg-type]
    rng = random.Random(1)
    samples = [config.sample_itl_ms(rng) for _ in range(4000)]
    assert min(samples) >= 0
    assert sum(samples) / len(samples) == pytest.approx(20, rel=0.05)
    assert max(samples) > 22 and min(samples) < 18


async def test_stream_is_paced_by_absolute_deadlines() -> None:
    config = SyntheticConfig(ttft_ms=40, itl_ms=10, itl_distribution="constant")
    loop = asyncio.get_running_loop()
    start = loop.time()
    arrivals: list[float] = []
    async for batch in SyntheticBackend(config).stream(request(max_tokens=8, seed=3)):
        arrivals += [loop.time() - start for event in batch if event.kind is Kind.DELTA]
    # Loose bounds only: never early, and not wildly late on a busy machine.
    for index, arrival in enumerate(arrivals):
        assert arrival >= 0.040 + 0.010 * index - 0.002
    assert arrivals[-1] < 2.0


async def test_speed_scales_time() -> None:
    config = SyntheticConfig(ttft_ms=400, itl_ms=0, speed=10)
    start = time.monotonic()
    await collect(request(max_tokens=3), config)
    assert 0.035 <= time.monotonic() - start < 0.35


async def test_speed_zero_never_sleeps_but_shares_the_loop() -> None:
    order: list[int] = []

    async def consume(which: int) -> None:
        async for batch in SyntheticBackend(SyntheticConfig(ttft_ms=10_000, speed=0)).stream(
            request(max_tokens=64, seed=which)
        ):
            assert 1 <= len(batch) <= DEFAULT_YIELD_EVERY
            order.extend([which] * len(batch))

    start = time.monotonic()
    await asyncio.gather(consume(1), consume(2))
    assert time.monotonic() - start < 1.0
    # Both streams progressed before either finished.
    assert order.index(2) < len(order) - order[::-1].index(1) - 1


# -- cancellation --------------------------------------------------------------------------


async def test_cancelling_the_consumer_stops_the_stream() -> None:
    got: list[Event] = []
    config = SyntheticConfig(ttft_ms=10, itl_ms=5_000, itl_distribution="constant")

    async def consume() -> None:
        async for batch in SyntheticBackend(config).stream(request()):
            got.extend(batch)

    task = asyncio.create_task(consume())
    while not got:
        await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=2)
    assert len(got) == 1


async def test_aclose_stops_the_stream() -> None:
    config = SyntheticConfig(ttft_ms=0, itl_ms=5_000, itl_distribution="constant")
    stream = SyntheticBackend(config).stream(request())
    (first,) = await anext(stream)
    assert first.kind is Kind.DELTA
    await asyncio.wait_for(stream.aclose(), timeout=2)
    with pytest.raises(StopAsyncIteration):
        await anext(stream)


# -- load-test chunks ----------------------------------------------------------------------


def check_chunk(raw: bytes | None, seq: int, *, padded: bool = True) -> dict[str, Any]:
    assert raw is not None
    if padded:
        assert 1150 <= len(raw) <= 1250
    chunk: dict[str, Any] = orjson.loads(raw)
    assert list(chunk)[:2] == ["seq", "ts"]
    assert chunk["seq"] == seq
    assert isinstance(chunk["ts"], int)
    assert chunk["object"] == "chat.completion.chunk"
    (choice,) = chunk["choices"]
    assert len(choice["logprobs"]["content"]) == LOADTEST_TOKENS_PER_CHUNK
    assert "".join(t["token"] for t in choice["logprobs"]["content"]) == choice["delta"]["content"]
    return chunk


async def test_burst_load_test_chunks() -> None:
    before = time.monotonic_ns()
    events = await collect(request(loadtest=LoadTestSpec(chunks=200)))
    after = time.monotonic_ns()
    chunks = events[:-2]
    assert len(chunks) == 200
    stamps = []
    for seq, event in enumerate(chunks, start=1):
        assert event.kind is Kind.MESSAGE
        assert event.tokens == LOADTEST_TOKENS_PER_CHUNK
        stamps.append(check_chunk(event.raw, seq)["ts"])
    assert stamps == sorted(stamps)
    assert before <= stamps[0] and stamps[-1] <= after
    assert usage_of(events)["completion_tokens"] == 200 * LOADTEST_TOKENS_PER_CHUNK
    assert finish_reason(events) == "stop"


@pytest.mark.parametrize("model", ["m", "a-rather-longer-model-name-for-the-benchmark-2024"])
async def test_chunk_size_holds_for_model_names(model: str) -> None:
    events = await collect(request(model=model, loadtest=LoadTestSpec(chunks=1)))
    check_chunk(events[0].raw, 1)


async def test_burst_streams_share_the_loop() -> None:
    order: list[int] = []

    async def consume(which: int) -> None:
        async for batch in SyntheticBackend().stream(request(loadtest=LoadTestSpec(chunks=50))):
            order.extend([which] * len(batch))

    await asyncio.gather(consume(1), consume(2))
    assert order.index(2) < 20


async def test_paced_load_test_stamps_scheduled_times() -> None:
    spec = LoadTestSpec(chunks=6, mode="paced", interval_ms=15)
    before = time.monotonic_ns()
    received: list[tuple[int, int]] = []
    async for batch in SyntheticBackend().stream(request(loadtest=spec)):
        for event in batch:
            if event.kind is Kind.MESSAGE:
                ts = check_chunk(event.raw, len(received) + 1)["ts"]
                received.append((ts, time.monotonic_ns()))
    after = time.monotonic_ns()
    stamps = [ts for ts, _ in received]
    assert [ts - stamps[0] for ts in stamps] == [i * 15_000_000 for i in range(6)]
    assert before <= stamps[0] <= after
    # A chunk never arrives before its scheduled time (1 ms for clock granularity).
    assert all(arrival >= ts - 1_000_000 for ts, arrival in received)
    assert 70_000_000 <= after - before < 2_000_000_000


async def test_cancelling_a_paced_load_test() -> None:
    spec = LoadTestSpec(chunks=1000, mode="paced", interval_ms=50)
    stream = SyntheticBackend().stream(request(loadtest=spec))
    await anext(stream)
    task = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await stream.aclose()


async def test_invalid_load_test_spec() -> None:
    with pytest.raises(BackendError):
        SyntheticBackend().stream(request(loadtest=LoadTestSpec(chunks=-1)))


async def test_empty_load_test() -> None:
    events = await collect(request(loadtest=LoadTestSpec(chunks=0)))
    assert [e.kind for e in events] == [Kind.USAGE, Kind.DONE]


@pytest.mark.parametrize("mode", ["burst", "paced"])
async def test_varied_load_test_chunks_differ_like_a_models(mode: str) -> None:
    spec = LoadTestSpec(chunks=40, mode=mode, interval_ms=0.1, varied=True)
    streams = [await collect(request(loadtest=spec)) for _ in range(2)]
    bodies = []
    for events in streams:
        chunks = [
            check_chunk(event.raw, seq, padded=False)
            for seq, event in enumerate(events[:-2], start=1)
        ]
        assert len(chunks) == 40
        assert all(len(event.raw) < LOADTEST_CHUNK_BYTES for event in events[:-2])  # no padding
        bodies.append([c["choices"][0]["delta"]["content"] for c in chunks])
    assert len(set(bodies[0])) == 40  # every chunk of a stream its own tokens
    assert bodies[0] != bodies[1]  # and each stream its own walk through them


def test_a_load_test_spec_takes_varied_as_a_boolean_only() -> None:
    assert LoadTestSpec.checked(10, "burst", 20, True).varied is True
    with pytest.raises(ValueError, match="varied"):
        LoadTestSpec.checked(10, "burst", 20, "yes")

"""`LocalModelBackend` on the tiny model: text as the tokenizer decodes the model's tokens,
settings honoured, stop sequences, limits, and cancellation that reaches the model."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from airlane.backends.base import BackendError, GenerationRequest
from airlane.backends.local import LocalModelBackend, ModelDirError, load_model
from airlane.backends.local.model import prompt_ids
from airlane.core.errors import ErrorCode
from airlane.core.events import Event, Kind

MESSAGES = [{"role": "user", "content": "Größe 数据 🙂 hello"}]


@pytest.fixture(scope="module")
def backend(model_dir: Path) -> LocalModelBackend:
    return LocalModelBackend(load_model(model_dir), max_queued=0)


def request(**fields: Any) -> GenerationRequest:
    extra = {key: fields.pop(key) for key in ("top_p", "stop") if key in fields}
    return GenerationRequest(model="tiny", messages=MESSAGES, extra=extra, **fields)


async def run(backend: LocalModelBackend, generation: GenerationRequest) -> list[Event]:
    events: list[Event] = []
    async with contextlib.aclosing(backend.stream(generation)) as batches:
        async for batch in batches:
            events += batch
    return events


def text_of(events: list[Event]) -> str:
    return "".join(event.text for event in events if event.kind is Kind.DELTA)


def direct(backend: LocalModelBackend, seed: int, max_tokens: int, **sampling: Any) -> str:
    """``generate`` called directly, decoded at once: what the streamed text must equal."""
    import torch

    loaded = backend.loaded
    ids = torch.tensor([prompt_ids(loaded, MESSAGES)])
    torch.manual_seed(seed)
    out = loaded.model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=max_tokens,
        do_sample=True,
        top_k=0,
        eos_token_id=list(loaded.eos_token_ids),
        pad_token_id=loaded.eos_token_ids[0],
        **sampling,
    )
    text: str = loaded.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    return text


async def test_the_streamed_text_is_the_decode_of_the_tokens(backend: LocalModelBackend) -> None:
    for seed in (1, 2, 3):
        events = await run(backend, request(seed=seed, max_tokens=40, temperature=1.0))
        assert text_of(events) == direct(backend, seed, 40, temperature=1.0)
        # Whole characters in every delta: nothing that a later delta completes. (The last
        # may end in U+FFFD: a generation cut by max_tokens in the middle of a character ends
        # so, as the direct decode does; sampling on several threads makes that vary.)
        deltas = [e for e in events if e.kind is Kind.DELTA]
        assert all(not e.text.endswith("\ufffd") for e in deltas[:-1])
        usage, done = events[-2:]
        assert usage.kind is Kind.USAGE and done.kind is Kind.DONE
        assert usage.data["completion_tokens"] <= 40
        assert usage.data["prompt_tokens"] == len(prompt_ids(backend.loaded, MESSAGES))


async def test_seed_top_p_and_greedy(backend: LocalModelBackend) -> None:
    same = [text_of(await run(backend, request(seed=7, max_tokens=20))) for _ in range(2)]
    assert same[0] == same[1]
    assert text_of(await run(backend, request(seed=8, max_tokens=20))) != same[0]
    narrow = await run(backend, request(seed=7, max_tokens=20, top_p=0.1))
    assert text_of(narrow) == direct(backend, 7, 20, temperature=1.0, top_p=0.1)
    greedy = [
        text_of(await run(backend, request(seed=s, temperature=0, max_tokens=12))) for s in (1, 2)
    ]
    assert greedy[0] == greedy[1]


async def test_max_tokens_ends_with_length(backend: LocalModelBackend) -> None:
    events = await run(backend, request(seed=1, max_tokens=5))
    assert events[-2].data["completion_tokens"] == 5
    assert events[-1].data["finish_reason"] == "length"


async def test_a_stop_sequence_cuts_the_text_and_stops_the_model(
    backend: LocalModelBackend,
) -> None:
    full = text_of(await run(backend, request(seed=4, max_tokens=60)))
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    assert stop and full.find(stop) > 0
    events = await run(backend, request(seed=4, max_tokens=60, stop=[stop]))
    assert text_of(events) == full[: full.find(stop)]
    assert events[-1].data["finish_reason"] == "stop"
    assert events[-2].data["completion_tokens"] < 60


async def test_bad_settings_are_refused_with_the_reason(backend: LocalModelBackend) -> None:
    for bad in ({"temperature": 3.0}, {"top_p": 0}, {"stop": ["a"] * 5}, {"stop": 7}):
        with pytest.raises(BackendError) as refused:
            await run(backend, request(seed=1, **bad))
        assert refused.value.code is ErrorCode.INVALID_REQUEST


async def test_cancel_stops_the_model_within_one_token(backend: LocalModelBackend) -> None:
    before = backend.stats.tokens_after_cancel
    for _ in range(3):
        batches = backend.stream(request(seed=5, max_tokens=400))
        seen = 0
        async for _batch in batches:
            seen += 1
            if seen == 3:
                break
        await batches.aclose()  # what the gateway does on cancel
        # The worker has returned: nothing generates after aclose.
        assert not backend.stats.running
    assert backend.stats.tokens_after_cancel - before <= 3  # at most one per cancel


async def test_a_full_queue_is_refused_as_overloaded(backend: LocalModelBackend) -> None:
    first = backend.stream(request(seed=5, max_tokens=400))
    await anext(first)  # the model is busy with it; max_queued is 0
    with pytest.raises(BackendError) as refused:
        backend.admit(request(seed=1))
    assert refused.value.code is ErrorCode.OVERLOADED
    await first.aclose()
    backend.admit(request(seed=1))  # room again


async def test_generation_runs_off_the_event_loop(backend: LocalModelBackend) -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    ticker = asyncio.create_task(tick())
    await run(backend, request(seed=1, max_tokens=200))
    ticker.cancel()
    assert ticks > 20  # the loop kept turning while the model worked


def test_a_missing_or_broken_model_directory_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelDirError, match="does not exist"):
        load_model(tmp_path / "nowhere")
    with pytest.raises(ModelDirError, match=r"has no config\.json"):
        load_model(tmp_path)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    (broken / "model.safetensors").write_bytes(b"\0" * 16)
    (broken / "tokenizer.json").write_text("{}")
    with pytest.raises(ModelDirError, match="does not load"):
        load_model(broken)


async def test_max_tokens_stops_where_the_models_context_ends(backend: LocalModelBackend) -> None:
    context = backend.loaded.context
    assert context == 512
    prompt = len(prompt_ids(backend.loaded, MESSAGES))
    events = await run(backend, request(seed=6, max_tokens=5000))
    assert events[-2].data["completion_tokens"] <= context - prompt
    long_prompt = [{"role": "user", "content": "stream " * 600}]
    with pytest.raises(BackendError, match="context"):
        await run(backend, GenerationRequest(model="tiny", messages=long_prompt))

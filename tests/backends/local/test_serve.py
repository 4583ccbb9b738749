"""``airlane serve --model-dir`` driven by the official openai SDK: streaming equals
non-streaming for the same seed, multi-byte text arrives intact, cancel ends the stream, a full
queue answers 503, and a bad model directory stops the start with one line."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from airlane.backends.local import LocalModelBackend, load_model
from tests.servers import ServerProcess, run_server

from .test_backend import MESSAGES, direct


@pytest.fixture(scope="module")
def gateway(model_dir: Path) -> Iterator[ServerProcess]:
    with run_server("--model-dir", str(model_dir), config="[local]\nmax_queued = 0\n") as running:
        yield running


def client(gateway: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0, timeout=30)


def test_streaming_equals_non_streaming_for_the_same_seed(
    gateway: ServerProcess, model_dir: Path
) -> None:
    sdk = client(gateway)
    local = LocalModelBackend(load_model(model_dir))
    for seed in (11, 12):
        whole = sdk.chat.completions.create(
            model="tiny",
            messages=MESSAGES,
            seed=seed,
            max_tokens=30,  # type: ignore[arg-type]
        )
        chunks = sdk.chat.completions.create(
            model="tiny",
            messages=MESSAGES,
            seed=seed,
            max_tokens=30,
            stream=True,  # type: ignore[arg-type]
            stream_options={"include_usage": True},
        )
        streamed, usage = "", None
        for chunk in chunks:
            if chunk.choices:
                streamed += chunk.choices[0].delta.content or ""
            if chunk.usage is not None:
                usage = chunk.usage
        assert streamed == whole.choices[0].message.content
        # Multi-byte characters intact through the gateway: the text is the tokenizer's decode
        # of what the model generates for this seed, called directly.
        assert streamed == direct(local, seed, 30, temperature=1.0)
        assert usage is not None and whole.usage is not None
        assert usage.completion_tokens == whole.usage.completion_tokens <= 30
        assert usage.prompt_tokens == whole.usage.prompt_tokens > 0


def test_cancel_ends_the_stream_and_frees_the_model(gateway: ServerProcess) -> None:
    sdk = client(gateway)
    response = sdk.chat.completions.with_raw_response.create(
        model="tiny",
        messages=MESSAGES,
        seed=3,
        max_tokens=2000,
        stream=True,  # type: ignore[arg-type]
    )
    stream_id = response.headers["x-airlane-stream-id"]
    chunks = response.parse()
    next(iter(chunks))
    cancelled = httpx.post(f"{gateway.url}/v1/streams/{stream_id}/cancel", timeout=10)
    assert cancelled.status_code == 200, cancelled.text
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finish == ["cancelled"] or finish == []
    chunks.close()
    # The model is free again within a token's time (the stream ended first: the gateway ends
    # it at once and the model stops at its next token): a new request is served, not
    # refused (max_queued is 0).
    deadline = time.monotonic() + 5
    while True:
        try:
            again = sdk.chat.completions.create(
                model="tiny",
                messages=MESSAGES,
                seed=1,
                max_tokens=3,  # type: ignore[arg-type]
            )
            break
        except openai.APIStatusError as busy:
            assert busy.status_code == 503 and time.monotonic() < deadline
            time.sleep(0.01)
    assert again.choices[0].finish_reason == "length"


def metric(gateway: ServerProcess, name: str) -> float:
    text = httpx.get(f"{gateway.url}/metrics", timeout=10).text
    line = next(line for line in text.splitlines() if line.startswith(f"{name} "))
    return float(line.split()[1])


def test_a_reader_that_leaves_stops_the_model_under_orphan_cancel(gateway: ServerProcess) -> None:
    sdk = client(gateway)
    tokens_before = metric(gateway, "airlane_local_tokens_total")
    # The server is the module's: other tests' cancels count too, so this one's is a delta.
    after_cancel_before = metric(gateway, "airlane_local_tokens_after_cancel_total")
    chunks = sdk.chat.completions.create(
        model="tiny",
        messages=MESSAGES,
        max_tokens=400,
        stream=True,
        extra_body={"airlane": {"orphan": "cancel"}},
    )  # type: ignore[call-overload]
    next(iter(chunks))
    chunks.close()  # the only reader disconnects
    deadline = time.monotonic() + 5
    while metric(gateway, "airlane_local_pending") > 0:
        assert time.monotonic() < deadline, "the model kept generating for its lost reader"
        time.sleep(0.01)
    made = metric(gateway, "airlane_local_tokens_total") - tokens_before
    assert 1 <= made < 400  # stopped early: not every token it was allowed
    after_cancel = metric(gateway, "airlane_local_tokens_after_cancel_total") - after_cancel_before
    assert after_cancel <= 2  # the model stops within a token or two of the cancel


def test_a_full_queue_answers_503_before_the_stream_starts(gateway: ServerProcess) -> None:
    sdk = client(gateway)
    busy = sdk.chat.completions.create(
        model="tiny",
        messages=MESSAGES,
        seed=2,
        max_tokens=3000,
        stream=True,  # type: ignore[arg-type]
    )
    next(iter(busy))  # the model is generating it; nothing may wait behind it
    with pytest.raises(openai.APIStatusError) as refused:
        sdk.chat.completions.create(
            model="tiny",
            messages=MESSAGES,
            max_tokens=3,
            stream=True,  # type: ignore[arg-type]
        )
    assert refused.value.status_code == 503
    assert "busy" in str(refused.value)
    busy.close()


@pytest.mark.parametrize("broken", ["missing", "empty", "corrupt"])
def test_a_bad_model_directory_stops_the_start_with_one_line(broken: str, tmp_path: Path) -> None:
    directory = tmp_path / "model"
    if broken != "missing":
        directory.mkdir()
    if broken == "corrupt":
        (directory / "config.json").write_text("{not json")
        (directory / "model.safetensors").write_bytes(b"\0" * 16)
        (directory / "tokenizer.json").write_text("{}")
    result = subprocess.run(
        [sys.executable, "-m", "airlane", "serve", "--port", "0", "--model-dir", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(directory) in lines[0], result.stderr
    assert "Traceback" not in result.stderr

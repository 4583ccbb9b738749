"""`LocalModelBackend`: a model from a local directory as a backend, generating off the loop.

One generation runs at a time, on one worker thread, with ``transformers``' ``generate``:
sampling (``temperature``, ``top_p``), ``seed`` (the thread's generator is seeded just before,
so the same seed gives the same tokens, streamed or not), ``max_tokens``. Tokens come back to
the event loop one at a time; `IncrementalDetokenizer` turns them into whole characters and
`StopMatcher` cuts the text at a stop sequence.

Bounded everywhere:

- requests waiting for the model: at most ``max_queued``; `admit` refuses the next with
  ``overloaded`` (HTTP 503) before its stream exists, and `stream` checks again;
- tokens made but not yet taken by the loop: at most ``max_ahead``; the worker waits for
  room, so a slow reader slows the model instead of growing a queue;
- cancellation (the gateway closes the iterator: cancel, an orphan policy, shutdown) sets a
  flag that a stopping criterion reads before every token, so the model stops at the next
  token; the iterator waits for the worker to return before it does, and no thread is left
  generating.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from airlane.backends.base import BackendError, GenerationRequest
from airlane.backends.local.detokenize import IncrementalDetokenizer
from airlane.backends.local.model import LoadedModel, prompt_ids
from airlane.backends.local.stops import StopMatcher
from airlane.core.errors import ErrorCode
from airlane.core.events import Event

__all__ = ["LocalModelBackend", "LocalStats"]

MAX_STOPS = 4
"""Stop sequences per request, as OpenAI's API allows."""
MAX_STOP_CHARS = 200


@dataclass
class LocalStats:
    """Counters a test or a benchmark reads."""

    generations: int = 0
    tokens: int = 0
    """Tokens the model produced, all generations."""
    tokens_after_cancel: int = 0
    """Tokens produced after a generation was asked to stop (the stopping criterion's
    promise: at most one per cancelled generation)."""
    refused: int = 0
    """Requests refused as overloaded."""
    running: bool = False


class _Generation:
    """The state one generation shares between the worker thread and the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, max_ahead: int) -> None:
        self.loop = loop
        self.tokens: asyncio.Queue[int | None] = asyncio.Queue()
        self.room = threading.Semaphore(max_ahead)
        self.stop = threading.Event()
        self.stopped_after = 0  # tokens produced after `stop` was set
        self.produced = 0


class _Streamer:
    """``transformers``' streamer interface: receives the prompt, then each new token."""

    def __init__(self, generation: _Generation) -> None:
        self._generation = generation
        self._prompt_seen = False

    def put(self, value: Any) -> None:
        if not self._prompt_seen:  # generate() hands over the prompt first
            self._prompt_seen = True
            return
        generation = self._generation
        for token in value.reshape(-1).tolist():
            generation.produced += 1
            if generation.stop.is_set():
                generation.stopped_after += 1
            # Wait for the loop to take earlier tokens (a slow reader slows the model), but
            # never past a stop: nobody may be reading any more.
            while not generation.room.acquire(timeout=0.05):
                if generation.stop.is_set():
                    return
            generation.loop.call_soon_threadsafe(generation.tokens.put_nowait, int(token))

    def end(self) -> None:
        generation = self._generation
        generation.loop.call_soon_threadsafe(generation.tokens.put_nowait, None)


class LocalModelBackend:
    """Generates with a model loaded by `airlane.backends.local.model.load_model`."""

    name = "local"

    def __init__(
        self,
        loaded: LoadedModel,
        *,
        max_queued: int = 8,
        max_ahead: int = 64,
        default_max_tokens: int = 256,
    ) -> None:
        if max_queued < 0 or max_ahead < 1 or default_max_tokens < 1:
            raise ValueError("need max_queued >= 0, max_ahead >= 1, default_max_tokens >= 1")
        self.loaded = loaded
        self.max_queued = max_queued
        self.max_ahead = max_ahead
        self.default_max_tokens = default_max_tokens
        self.stats = LocalStats()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="airlane-model")
        self._pending = 0  # generations admitted to `stream` and not finished

    # -- admission ----------------------------------------------------------------------------

    def admit(self, request: GenerationRequest) -> None:
        """Refuse (``overloaded``, HTTP 503) when the model is busy and ``max_queued``
        requests already wait; the gateway asks before it creates the stream."""
        if self._pending > self.max_queued:
            self.stats.refused += 1
            raise BackendError(
                f"the local model is busy: {self._pending - 1} requests are waiting, the "
                f"limit is {self.max_queued}",
                code=ErrorCode.OVERLOADED,
            )

    # -- generation ---------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        """The model's counters, for ``/metrics``."""
        stats = self.stats
        yield CounterMetricFamily(
            "airlane_local_generations", "Generations the local model ran.", value=stats.generations
        )
        yield CounterMetricFamily(
            "airlane_local_tokens", "Tokens the local model produced.", value=stats.tokens
        )
        yield CounterMetricFamily(
            "airlane_local_tokens_after_cancel",
            "Tokens produced after a generation was told to stop (at most one each).",
            value=stats.tokens_after_cancel,
        )
        yield CounterMetricFamily(
            "airlane_local_refused", "Requests refused as overloaded.", value=stats.refused
        )
        yield GaugeMetricFamily(
            "airlane_local_pending",
            "Generations running or waiting for the model.",
            value=self._pending,
        )

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[list[Event], None]:
        """One generation's events: deltas as whole characters, then usage and done."""
        self.admit(request)
        settings = _settings(request, self.default_max_tokens)
        prompt = self._prompt(request, settings)
        self._pending += 1
        generation = _Generation(asyncio.get_running_loop(), self.max_ahead)
        work = asyncio.wrap_future(
            self._executor.submit(self._generate, prompt, settings, generation)
        )
        detokenizer = IncrementalDetokenizer(self._decode)
        stops = StopMatcher(settings["stop"])
        completion = 0
        finish = "stop"
        try:
            while True:
                token = await generation.tokens.get()
                if token is None:
                    break
                generation.room.release()
                completion += 1
                text = stops.feed(detokenizer.push(token))
                if text:
                    yield [Event.delta(text)]
                if stops.stopped:
                    generation.stop.set()  # the model stops at its next token
                    break
            await work  # raises what the model raised
            if not stops.stopped:
                text = stops.feed(detokenizer.flush()) + stops.flush()
                if text:
                    yield [Event.delta(text)]
                if completion >= settings["max_new_tokens"] and not self._ended_by_eos(
                    detokenizer.ids
                ):
                    finish = "length"
            usage = Event.usage(prompt_tokens=len(prompt), completion_tokens=completion)
            yield [usage, Event.done(finish)]
        except BackendError:
            raise
        except Exception as exc:  # the model's own failure (cancellation is not an Exception)
            raise BackendError(f"the local model failed: {exc}") from exc
        finally:
            generation.stop.set()
            # Not a thread left running: wait (it stops at its next token) before leaving.
            with contextlib.suppress(BaseException):
                await asyncio.shield(work)
            self._pending -= 1
            self.stats.tokens_after_cancel += generation.stopped_after

    def _prompt(self, request: GenerationRequest, settings: dict[str, Any]) -> list[int]:
        """The prompt's ids; ``max_new_tokens`` capped where the model's context ends (the
        stream then ends with ``length`` there), a prompt that fills it refused."""
        prompt = prompt_ids(self.loaded, request.messages)
        context = self.loaded.context
        if context is not None:
            if len(prompt) >= context:
                raise BackendError(
                    f"the prompt is {len(prompt)} tokens; the model's context is {context}",
                    code=ErrorCode.INVALID_REQUEST,
                )
            settings["max_new_tokens"] = min(settings["max_new_tokens"], context - len(prompt))
        return prompt

    def _generate(
        self, prompt: list[int], settings: dict[str, Any], generation: _Generation
    ) -> None:
        """On the worker thread: run ``generate`` until EOS, the token limit or a stop."""
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        class Stop(StoppingCriteria):  # read before every token
            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                return torch.full((input_ids.shape[0],), generation.stop.is_set(), dtype=torch.bool)

        if generation.stop.is_set():  # cancelled while it waited for the model
            generation.loop.call_soon_threadsafe(generation.tokens.put_nowait, None)
            return
        self.stats.running = True
        self.stats.generations += 1
        try:
            model = self.loaded.model
            if settings["seed"] is not None:
                torch.manual_seed(settings["seed"])
            temperature = settings["temperature"]
            sampling: dict[str, Any] = {"do_sample": False}
            if temperature > 0:
                # top_k 0: no top-k cut (generate's default is 50), so top_p alone narrows.
                sampling = {
                    "do_sample": True,
                    "temperature": temperature,
                    "top_p": settings["top_p"],
                    "top_k": 0,
                }
            ids = torch.tensor([prompt], dtype=torch.long)
            eos = list(self.loaded.eos_token_ids) or None
            with torch.inference_mode():
                model.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=settings["max_new_tokens"],
                    streamer=_Streamer(generation),
                    stopping_criteria=StoppingCriteriaList([Stop()]),
                    eos_token_id=eos,
                    pad_token_id=eos[0] if eos else 0,
                    **sampling,
                )
        except BaseException:
            generation.loop.call_soon_threadsafe(generation.tokens.put_nowait, None)
            raise
        finally:
            self.stats.running = False
            self.stats.tokens += generation.produced

    def _decode(self, ids: Any) -> str:
        text: str = self.loaded.tokenizer.decode(list(ids), skip_special_tokens=True)
        return text

    def _ended_by_eos(self, ids: list[int]) -> bool:
        return bool(ids) and ids[-1] in self.loaded.eos_token_ids

    async def aclose(self) -> None:
        """Stop the worker thread (after the generation it runs, which was told to stop)."""
        self._executor.shutdown(wait=False, cancel_futures=True)


def _settings(request: GenerationRequest, default_max_tokens: int) -> dict[str, Any]:
    """The request's sampling settings, checked (`BackendError` ``invalid_request`` else)."""
    extra = request.extra
    temperature = 1.0 if request.temperature is None else float(request.temperature)
    if not 0 <= temperature <= 2:
        raise BackendError("'temperature' must be between 0 and 2", code=ErrorCode.INVALID_REQUEST)
    top_p = extra.get("top_p", 1.0)
    if isinstance(top_p, bool) or not isinstance(top_p, int | float) or not 0 < top_p <= 1:
        raise BackendError("'top_p' must be a number in (0, 1]", code=ErrorCode.INVALID_REQUEST)
    stop = extra.get("stop")
    stops = [stop] if isinstance(stop, str) else stop if stop is not None else []
    if (
        not isinstance(stops, list)
        or len(stops) > MAX_STOPS
        or not all(isinstance(s, str) and len(s) <= MAX_STOP_CHARS for s in stops)
    ):
        raise BackendError(
            f"'stop' must be a string or up to {MAX_STOPS} strings of at most "
            f"{MAX_STOP_CHARS} characters",
            code=ErrorCode.INVALID_REQUEST,
        )
    max_new = default_max_tokens if request.max_tokens is None else request.max_tokens
    return {
        "temperature": temperature,
        "top_p": float(top_p),
        "stop": stops,
        "seed": request.seed,
        "max_new_tokens": max(1, int(max_new)),
    }

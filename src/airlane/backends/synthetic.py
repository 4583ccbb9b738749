"""The synthetic backend: deterministic text with realistic timing, for demos and load tests.

Two halves, kept apart so the text can be tested without a clock:

* `SyntheticScript` is pure. From a request and a `SyntheticConfig` it derives the events of a
  generation and, for each, the time (seconds after the start, before `SyntheticConfig.speed`
  is applied) at which it is due. Its text depends only on ``(seed, model, messages)``, so two
  equal requests, one streamed and one not, read exactly the same; its timing is seeded too.
* `SyntheticBackend` sleeps until each due time and yields the event (a batch of one). Sleeps
  target absolute deadlines on the event loop's clock, so a late wake-up shortens the next gap
  instead of pushing every later event back ("no drift"). A stream that never sleeps
  (``speed=0``, burst load tests) yields `SyntheticConfig.yield_every` events per batch.

Load-test mode (``request.loadtest``) skips the text model and emits the seed's benchmark
chunks: ``LoadTestSpec.chunks`` pre-encoded JSON messages of 16 tokens and about 1.2 KB each,
built once per stream by `LoadTestChunk`; only the sequence number and timestamp are spliced in
per batch, because this path is what the benchmarks measure. A timed stream (text at a speed
above 0, a paced load test) can also be pushed rather than pulled (`SyntheticBackend.feed`,
`airlane.backends.paced`).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import itertools
import math
import random
import time
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from airlane.backends.base import BackendError, GenerationRequest, LoadTestSpec
from airlane.backends.paced import PacedFeed, PacedSchedule, ScheduleArgs, TimedFeed
from airlane.backends.pacing import Pacer
from airlane.core.errors import ErrorCode
from airlane.core.events import Channel, Event, Kind, Lane
from airlane.runtime.eager import yield_to_loop

__all__ = [
    "DEFAULT_DEFAULT_MAX_TOKENS",
    "DEFAULT_ITL_DISTRIBUTION",
    "DEFAULT_ITL_JITTER_MS",
    "DEFAULT_ITL_MS",
    "DEFAULT_SPEED",
    "DEFAULT_TOKENS_PER_DELTA",
    "DEFAULT_TTFT_MS",
    "DEFAULT_YIELD_EVERY",
    "LOADTEST_CHUNK_BYTES",
    "LOADTEST_TOKENS_PER_CHUNK",
    "VARIED_POOL",
    "ItlDistribution",
    "LoadTestChunk",
    "SyntheticBackend",
    "SyntheticConfig",
    "SyntheticScript",
    "VariedLoadTestChunks",
    "estimate_prompt_tokens",
]

ItlDistribution = Literal["constant", "uniform", "gamma"]
"""Shape of the inter-token time: fixed, uniform around the mean, or gamma (right-skewed)."""

DEFAULT_TTFT_MS = 150.0
DEFAULT_ITL_MS = 20.0
DEFAULT_ITL_JITTER_MS = 5.0
# Real decoders show a right-skewed inter-token time (occasional slow steps), which a gamma
# distribution with the same mean and standard deviation models better than a uniform one.
DEFAULT_ITL_DISTRIBUTION: ItlDistribution = "gamma"
DEFAULT_DEFAULT_MAX_TOKENS = 64
DEFAULT_TOKENS_PER_DELTA = 1
DEFAULT_SPEED = 1.0
# A never-sleeping stream hands over at most this many events per batch and then yields to
# the loop, so it cannot monopolise it. A loop round-trip and a socket write cost as much as
# a few dozen chunks (docs/performance-journal.md), so batches are large; a stream's first batches
# are smaller (1, 2, 4, ...) so that its first chunk goes out at once.
DEFAULT_YIELD_EVERY = 32

LOADTEST_TOKENS_PER_CHUNK = 16
"""Tokens carried by one benchmark chunk (the seed's "200 x 16-token chunks")."""
LOADTEST_CHUNK_BYTES = 1200
"""Target size of one encoded benchmark chunk ("about 1.2 KB per chunk")."""

_ITL_DISTRIBUTIONS = ("constant", "uniform", "gamma")


@dataclass(frozen=True, slots=True)
class SyntheticConfig:
    """How the synthetic backend paces and sizes its output."""

    ttft_ms: float = DEFAULT_TTFT_MS
    """Time to first token: delay before the first event, in milliseconds."""
    itl_ms: float = DEFAULT_ITL_MS
    """Mean inter-token latency in milliseconds."""
    itl_jitter_ms: float = DEFAULT_ITL_JITTER_MS
    """Spread of the inter-token latency: half-width for ``uniform``, standard deviation for
    ``gamma``; ignored by ``constant``."""
    itl_distribution: ItlDistribution = DEFAULT_ITL_DISTRIBUTION
    """Distribution of the inter-token latency."""
    default_max_tokens: int = DEFAULT_DEFAULT_MAX_TOKENS
    """Completion-token limit used when the request sets no ``max_tokens``."""
    tokens_per_delta: int = DEFAULT_TOKENS_PER_DELTA
    """How many tokens each ``delta`` event carries; the text does not depend on it."""
    speed: float = DEFAULT_SPEED
    """Time multiplier: 2.0 runs twice as fast; 0 never sleeps (tests). Load-test pacing
    follows the `LoadTestSpec` and ignores it."""
    yield_every: int = DEFAULT_YIELD_EVERY
    """When not sleeping (``speed=0``, burst load tests), hand over this many events per
    batch and yield to the event loop after each batch so that other streams progress."""

    def __post_init__(self) -> None:
        for name in ("ttft_ms", "itl_ms", "itl_jitter_ms", "speed"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, not {value!r}")
        for name in ("default_max_tokens", "tokens_per_delta", "yield_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, not {getattr(self, name)!r}")
        if self.itl_distribution not in _ITL_DISTRIBUTIONS:
            raise ValueError(
                f"itl_distribution must be one of {_ITL_DISTRIBUTIONS}, "
                f"not {self.itl_distribution!r}"
            )

    def sample_itl_ms(self, rng: random.Random) -> float:
        """Draw one inter-token latency, in milliseconds, from ``rng``."""
        mean, jitter = self.itl_ms, self.itl_jitter_ms
        if self.itl_distribution == "constant" or jitter == 0 or mean == 0:
            return mean
        if self.itl_distribution == "uniform":
            return max(0.0, rng.uniform(mean - jitter, mean + jitter))
        # Gamma with mean k*theta and variance k*theta**2 matching (mean, jitter).
        shape = (mean / jitter) ** 2
        return rng.gammavariate(shape, jitter * jitter / mean)


# -- text model ----------------------------------------------------------------------------

# About 200 words; a handful are non-ASCII (two-byte Latin, three-byte CJK, a four-byte
# emoji) so that every UTF-8 code path downstream sees multi-byte characters.
_WORD_LIST = """
    the a an of to and in on for with from by at as into over under between through after
    before while during without within about across along around against toward beyond
    stream token model signal packet message event cursor buffer window frame channel lane
    gateway client server browser device edge cloud cluster node router queue log snapshot
    river mountain harbor garden lantern compass bridge meadow forest island valley canyon
    morning evening winter summer autumn spring weather thunder rain snow wind light shadow
    quiet bright gentle rapid steady careful simple honest curious patient clever modest
    small large early late warm cold open narrow distant nearby ancient modern certain
    runs moves carries sends holds reads writes waits listens answers builds measures keeps
    finds follows returns resumes folds joins counts checks shares opens closes starts ends
    every each some many few most other several whole single final first second third next
    idea reason answer question story pattern detail number letter word sentence paragraph
    teacher student engineer traveler pilot baker gardener writer reader listener builder
    quickly slowly softly clearly nearly rarely often always never again together apart
    because although unless until since whether though however therefore meanwhile
    coffee bread apple orange paper pencil lamp table chair door street city village
    café naïve résumé jalapeño Zürich façade 日本 東京 über 🚀
"""
_WORDS: tuple[str, ...] = tuple(_WORD_LIST.split())

_SENTENCE_MIN_WORDS = 5
_SENTENCE_MAX_WORDS = 16
_COMMA_PROBABILITY = 0.08
# Chance of ending the answer at each sentence end: about five sentences on average.
_STOP_PROBABILITY = 0.2
_SENTENCE_ENDS = (".", ".", ".", ".", "?", "!")
_REASONING_MIN_TOKENS = 8
_REASONING_MAX_TOKENS = 24
_TOOL_QUERY_MIN_WORDS = 2
_TOOL_QUERY_MAX_WORDS = 5


def _seed_material(request: GenerationRequest) -> bytes:
    """A stable digest of what selects the text: seed, model and messages.

    Python's ``hash()`` is salted per process; blake2b of a canonical JSON encoding is not.
    """
    key = [request.seed, request.model, request.messages]
    canonical = orjson.dumps(key, option=orjson.OPT_SORT_KEYS, default=str)
    return hashlib.blake2b(canonical, digest_size=16).digest()


def _rng(material: bytes, purpose: bytes) -> random.Random:
    """An independent generator per purpose, so e.g. timing draws never shift the text."""
    return random.Random(hashlib.blake2b(purpose, key=material, digest_size=16).digest())


def _sentences(rng: random.Random) -> Iterator[tuple[str, bool]]:
    """Endless English-ish words, each with its punctuation and whether it ends a sentence."""
    while True:
        length = rng.randint(_SENTENCE_MIN_WORDS, _SENTENCE_MAX_WORDS)
        for position in range(length):
            word = rng.choice(_WORDS)
            if position == 0:
                word = word[0].upper() + word[1:]
            if position == length - 1:
                yield word + rng.choice(_SENTENCE_ENDS), True
            elif position > 0 and rng.random() < _COMMA_PROBABILITY:
                yield word + ",", False
            else:
                yield word, False


def _text_tokens(rng: random.Random, limit: int) -> tuple[list[str], str]:
    """Up to ``limit`` tokens (words with a leading space) and the finish reason.

    The answer stops with ``"stop"`` at a sentence end chosen by ``rng``, or with ``"length"``
    when it reaches ``limit`` first.
    """
    tokens: list[str] = []
    for word, sentence_end in _sentences(rng):
        tokens.append(word if not tokens else " " + word)
        if sentence_end and rng.random() < _STOP_PROBABILITY:
            return tokens, "stop"
        if len(tokens) >= limit:
            return tokens, "length"
    raise AssertionError("unreachable: _sentences is endless")


def _plain_words(rng: random.Random, count: int) -> list[str]:
    return [rng.choice(_WORDS) for _ in range(count)]


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def estimate_prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """A deterministic prompt-token estimate: whitespace-separated words in the messages."""
    return sum(len(_message_text(message).split()) for message in messages)


# -- the script: events and their due times -------------------------------------------------


class SyntheticScript:
    """The events of one synthetic generation, each with the time it is due.

    Iterating yields ``(due_s, event)`` pairs in order, ``due_s`` counted in seconds from the
    start of the stream at speed 1. The ``done`` event carries the finish reason:
    ``"stop"``, ``"length"`` or ``"tool_calls"``. Nothing here sleeps or reads a clock.
    """

    def __init__(self, request: GenerationRequest, config: SyntheticConfig) -> None:
        max_tokens = config.default_max_tokens if request.max_tokens is None else request.max_tokens
        if max_tokens < 1:
            raise BackendError(
                f"max_tokens must be >= 1, not {max_tokens}", code=ErrorCode.INVALID_REQUEST
            )
        self._request = request
        self._config = config
        self._max_tokens = max_tokens
        self._material = _seed_material(request)
        self._timing = _rng(self._material, b"timing")
        self._due_s = config.ttft_ms / 1000.0
        self._completion_tokens = 0

    def __iter__(self) -> Iterator[tuple[float, Event]]:
        budget = self._max_tokens
        if self._request.reasoning:
            reasoning = self._reasoning_tokens(budget)
            budget -= len(reasoning)
            yield from self._deltas(reasoning, Channel.REASONING)
        tool = _chosen_tool(self._request)
        if tool is not None:
            finish_reason = "tool_calls"
            yield from self._tool_call(tool)
        else:
            content, finish_reason = _text_tokens(_rng(self._material, b"content"), budget)
            yield from self._deltas(content, Channel.CONTENT)
        prompt_tokens = estimate_prompt_tokens(self._request.messages)
        usage = Event.usage(prompt_tokens=prompt_tokens, completion_tokens=self._completion_tokens)
        yield self._due_s, usage
        yield self._due_s, Event.done(finish_reason)

    def _reasoning_tokens(self, budget: int) -> list[str]:
        # Reasoning takes at most a quarter of the budget, so that max_tokens bounds the
        # completion as a whole (reasoning + content), as it does upstream.
        share = budget // 4
        if share == 0:
            return []
        rng = _rng(self._material, b"reasoning")
        wanted = rng.randint(_REASONING_MIN_TOKENS, _REASONING_MAX_TOKENS)
        tokens, _ = _text_tokens(rng, min(wanted, share))
        return tokens

    def _advance(self, tokens: int) -> float:
        """The due time of an event carrying ``tokens`` tokens; the first one is due at TTFT."""
        due = self._due_s
        for _ in range(tokens):
            self._due_s += self._config.sample_itl_ms(self._timing) / 1000.0
        self._completion_tokens += tokens
        return due

    def _deltas(self, tokens: list[str], channel: Channel) -> Iterator[tuple[float, Event]]:
        step = self._config.tokens_per_delta
        for start in range(0, len(tokens), step):
            group = tokens[start : start + step]
            due = self._advance(len(group))
            yield due, Event.delta("".join(group), channel=channel, tokens=len(group))

    def _tool_call(self, tool: dict[str, Any]) -> Iterator[tuple[float, Event]]:
        rng = _rng(self._material, b"tool_call")
        call_id = f"call_{rng.getrandbits(96):024x}"
        words = _plain_words(rng, rng.randint(_TOOL_QUERY_MIN_WORDS, _TOOL_QUERY_MAX_WORDS))
        arguments = orjson.dumps({"query": " ".join(words)}).decode()
        for index, piece in enumerate(_split(arguments, len(words) + 2)):
            due = self._advance(1)
            if index == 0:
                yield due, Event.tool_call(0, piece, call_id=call_id, name=_tool_name(tool))
            else:
                yield due, Event.tool_call(0, piece)


def _chosen_tool(request: GenerationRequest) -> dict[str, Any] | None:
    """The tool to call: the one ``tool_choice`` names, else the first; None for no call."""
    if not request.tools or request.tool_choice == "none":
        return None
    choice = request.tool_choice
    if isinstance(choice, dict):
        wanted = (choice.get("function") or {}).get("name")
        for tool in request.tools:
            if _tool_name(tool) == wanted:
                return tool
    return request.tools[0]


def _tool_name(tool: dict[str, Any]) -> str:
    function = tool.get("function")
    name = function.get("name") if isinstance(function, dict) else tool.get("name")
    return name if isinstance(name, str) else "tool"


def _split(text: str, parts: int) -> list[str]:
    """``text`` cut into ``parts`` pieces of nearly equal length (at least 3 pieces)."""
    size = math.ceil(len(text) / max(3, parts))
    return [text[start : start + size] for start in range(0, len(text), size)]


# -- load-test chunks ----------------------------------------------------------------------


def _chunk_body(rng: random.Random, model: str) -> dict[str, Any]:
    """An OpenAI ``chat.completion.chunk`` of `LOADTEST_TOKENS_PER_CHUNK` tokens drawn from
    ``rng``, with their log-probabilities."""
    tokens = [" " + word for word in _plain_words(rng, LOADTEST_TOKENS_PER_CHUNK)]
    return {
        "id": f"chatcmpl-{rng.getrandbits(96):024x}",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "system_fingerprint": "fp_airlane",
        "choices": [
            {
                "index": 0,
                "delta": {"content": "".join(tokens)},
                "logprobs": {
                    "content": [
                        {"token": token, "logprob": round(-rng.random() * 2, 4)} for token in tokens
                    ]
                },
                "finish_reason": None,
            }
        ],
    }


class LoadTestChunk:
    """The seed's benchmark chunk for one stream, encoded once; `encode` splices in the rest.

    An encoded chunk is one JSON object whose first two keys are ``seq`` (1-based chunk number)
    and ``ts`` (the chunk's scheduled send time in CLOCK_MONOTONIC nanoseconds, comparable with
    `time.monotonic_ns`; in burst mode, when its batch was made), followed by an OpenAI
    ``chat.completion.chunk`` body carrying `LOADTEST_TOKENS_PER_CHUNK` tokens with their
    log-probabilities, padded to about
    `LOADTEST_CHUNK_BYTES`.
    """

    __slots__ = ("_tail",)

    def __init__(self, model: str, material: bytes, *, ts_digits: int = 16) -> None:
        body = _chunk_body(_rng(material, b"loadtest"), model)
        self._tail = orjson.dumps(body)[1:]  # without "{": encode() writes it with seq and ts
        # Pad with a trailing field to the target size, counting a three-digit seq.
        overhead = len(self.encode(100, 10 ** (ts_digits - 1))) + len(b',"padding":""')
        if overhead < LOADTEST_CHUNK_BYTES:
            body["padding"] = "." * (LOADTEST_CHUNK_BYTES - overhead)
            self._tail = orjson.dumps(body)[1:]

    def encode(self, seq: int, ts_ns: int) -> bytes:
        """The chunk numbered ``seq``, scheduled at ``ts_ns``, as JSON bytes."""
        return b'{"seq":%d,"ts":%d,%b' % (seq, ts_ns, self._tail)

    def encode_range(self, first: int, stop: int, ts_ns: int) -> list[bytes]:
        """Chunks ``first`` to ``stop - 1``, all scheduled at ``ts_ns`` (the same bytes as
        `encode` for each; the shared part is formatted once)."""
        rest = b',"ts":%d,%b' % (ts_ns, self._tail)
        return [b'{"seq":%d%b' % (seq, rest) for seq in range(first, stop)]


VARIED_POOL = 4096
"""Distinct chunk bodies `VariedLoadTestChunks` draws from (a power of two: an odd stride
through it visits every one)."""


@functools.lru_cache(maxsize=8)
def _varied_bodies(model: str) -> tuple[bytes, ...]:
    """The bodies of varied load-test chunks, made once per model (~20 us each): each an
    OpenAI ``chat.completion.chunk`` of `LOADTEST_TOKENS_PER_CHUNK` tokens of its own with
    their log-probabilities, without the leading ``{``."""
    rng = random.Random(b"airlane varied load-test chunks")
    bodies = []
    for _ in range(VARIED_POOL):
        bodies.append(orjson.dumps(_chunk_body(rng, model))[1:])
    return tuple(bodies)


class VariedLoadTestChunks:
    """Load-test chunks that differ from one another as a model's do (`LoadTestSpec.varied`):
    the same ``{"seq":N,"ts":T,`` head as `LoadTestChunk`, then one of `VARIED_POOL` bodies,
    each stream walking the pool from its own place with its own stride."""

    __slots__ = ("_bodies", "_offset", "_stride")

    def __init__(self, model: str, rng: random.Random) -> None:
        self._bodies = _varied_bodies(model)
        self._offset = rng.randrange(VARIED_POOL)
        self._stride = rng.randrange(1, VARIED_POOL, 2)

    def _body(self, seq: int) -> bytes:
        return self._bodies[(self._offset + seq * self._stride) % VARIED_POOL]

    def encode(self, seq: int, ts_ns: int) -> bytes:
        """The chunk numbered ``seq``, scheduled at ``ts_ns``, as JSON bytes."""
        return b'{"seq":%d,"ts":%d,%b' % (seq, ts_ns, self._body(seq))

    def encode_range(self, first: int, stop: int, ts_ns: int) -> list[bytes]:
        """Chunks ``first`` to ``stop - 1``, all scheduled at ``ts_ns``."""
        return [self.encode(seq, ts_ns) for seq in range(first, stop)]


def _checked(spec: LoadTestSpec) -> LoadTestSpec:
    if spec.chunks < 0 or not (math.isfinite(spec.interval_ms) and spec.interval_ms >= 0):
        raise BackendError(f"invalid load-test spec: {spec}", code=ErrorCode.INVALID_REQUEST)
    return spec


def _chunks_for(
    request: GenerationRequest, spec: LoadTestSpec, ts_digits: int
) -> LoadTestChunk | VariedLoadTestChunks:
    """The chunks of one load-test stream: varied, or the seed's one body per request."""
    if spec.varied:
        return VariedLoadTestChunks(request.model, random.Random())
    return _loadtest_chunk(request.model, _seed_material(request), ts_digits)


@functools.lru_cache(maxsize=64)
def _loadtest_chunk(model: str, material: bytes, ts_digits: int) -> LoadTestChunk:
    """The `LoadTestChunk` for a request, made once: building one (words, log-probabilities,
    padding) costs ~90 us, a fifth of setting up a load-test stream, and every request with
    the same model and messages gets the same chunk body anyway. Chunks are immutable."""
    return LoadTestChunk(model, material, ts_digits=ts_digits)


# -- the backend ---------------------------------------------------------------------------


class SyntheticBackend:
    """A `Backend` that makes up deterministic text (or benchmark chunks); serves any model.

    `stream` raises `BackendError` (status 400) for a request it cannot serve, before any
    event; otherwise the stream always ends with ``done``.
    """

    name = "synthetic"

    def __init__(self, config: SyntheticConfig | None = None) -> None:
        self.config = config if config is not None else SyntheticConfig()
        """The pacing and sizing in effect."""
        self._pacer: Pacer | None = None

    def stream(self, request: GenerationRequest) -> AsyncGenerator[list[Event], None]:
        """Yield the events of one synthetic generation, in batches."""
        if request.loadtest is not None:
            return self._loadtest(request, _checked(request.loadtest))
        return self._generate(SyntheticScript(request, self.config))

    def feed(self, request: GenerationRequest) -> PacedFeed | TimedFeed | None:
        """The stream pushed by the loop's pacer, where it is timed: a paced load test as a
        `PacedFeed` (the same batches as `stream`, the end with the last chunks), text at a
        speed above 0 as a `TimedFeed` (the same events, each at its due time and in a batch
        of its own, as `stream` yields them). None for a burst load test or ``speed=0``."""
        spec = request.loadtest
        if spec is not None:
            if _checked(spec).mode != "paced":
                return None
            self._pacer = pacer = Pacer.for_loop(self._pacer)
            tail = self._loadtest_tail(request, spec)
            return PacedFeed(pacer, tail, **self._schedule(request, spec))
        speed = self.config.speed
        if speed == 0:
            return None
        script = SyntheticScript(request, self.config)  # refuses a bad request, as stream does
        self._pacer = pacer = Pacer.for_loop(self._pacer)
        start_ns = time.monotonic_ns()
        timed = ((start_ns + round(due_s / speed * 1e9), event) for due_s, event in script)
        # One event a batch, a loop turn apart when several are due: what `stream` does, and
        # what readers see (each delta on its own, unless they are behind).
        return TimedFeed(pacer, timed, 1)

    async def aclose(self) -> None:
        """Nothing to release: the synthetic backend holds no connections."""

    async def _generate(self, script: SyntheticScript) -> AsyncGenerator[list[Event], None]:
        speed = self.config.speed
        if speed == 0:
            events = (event for _, event in script)
            while batch := list(itertools.islice(events, self.config.yield_every)):
                yield batch
                await asyncio.sleep(0)
            return
        self._pacer = pacer = Pacer.for_loop(self._pacer)
        start_ns = time.monotonic_ns()
        for due_s, event in script:
            await pacer.sleep_until(start_ns + round(due_s / speed * 1e9))
            yield [event]

    def _loadtest(
        self, request: GenerationRequest, spec: LoadTestSpec
    ) -> AsyncGenerator[list[Event], None]:
        # One generator per mode, not a shared one delegating to a per-mode one: a generator
        # hop per chunk is measurable on this path.
        if spec.mode == "paced":
            schedule = PacedSchedule(**self._schedule(request, spec))
            return self._paced(schedule, self._loadtest_tail(request, spec))
        ts_digits = len(str(time.monotonic_ns()))
        chunk = _chunks_for(request, spec, ts_digits)
        return self._burst(chunk, spec, self._loadtest_tail(request, spec))

    def _schedule(self, request: GenerationRequest, spec: LoadTestSpec) -> ScheduleArgs:
        # Chunk i is due at start + i * interval on CLOCK_MONOTONIC, and that is its ts; the
        # first chunk is due at once.
        start_ns = time.monotonic_ns()
        chunk = _chunks_for(request, spec, len(str(start_ns)))
        return {
            "start_ns": start_ns,
            "interval_ns": spec.interval_ms * 1_000_000,
            "count": spec.chunks,
            "cap": self.config.yield_every,
            "encode": chunk.encode,
            "event": _chunk_event,
        }

    @staticmethod
    def _loadtest_tail(request: GenerationRequest, spec: LoadTestSpec) -> list[Event]:
        usage = Event.usage(
            prompt_tokens=estimate_prompt_tokens(request.messages),
            completion_tokens=spec.chunks * LOADTEST_TOKENS_PER_CHUNK,
        )
        return [usage, Event.done("stop")]

    async def _burst(
        self, chunk: LoadTestChunk | VariedLoadTestChunks, spec: LoadTestSpec, tail: list[Event]
    ) -> AsyncGenerator[list[Event], None]:
        # Slow start: batches of 1, 2, 4, ... up to yield_every chunks. The first chunk goes
        # out alone, at once; later ones in batches large enough to amortise the loop
        # round-trip and the socket write that each batch costs.
        cap = self.config.yield_every
        end = spec.chunks + 1
        first, size = 1, 1
        while first < end:
            stop = min(first + size, end)
            # One clock read per batch: its chunks are released together.
            yield list(map(_chunk_event, chunk.encode_range(first, stop, time.monotonic_ns())))
            first, size = stop, min(size * 2, cap)
            await yield_to_loop()
        yield tail

    async def _paced(
        self, schedule: PacedSchedule, tail: list[Event]
    ) -> AsyncGenerator[list[Event], None]:
        # The pacer wakes every stream of the loop with one timer, never before the due time;
        # a stream that is behind gets every due chunk in one batch (`PacedSchedule`).
        self._pacer = pacer = Pacer.for_loop(self._pacer)
        sleep_until = pacer.sleep_until
        while not schedule.finished:
            if schedule.index:  # no wait for the first chunk, not even a loop turn
                await sleep_until(schedule.due_ns)
            yield schedule.take(time.monotonic_ns())
        yield tail


_chunk_event = functools.partial(
    Event, Kind.MESSAGE, "", None, Channel.CONTENT, Lane.INTERACTIVE, LOADTEST_TOKENS_PER_CHUNK
)
"""A load-test chunk's event from its JSON bytes: `Event.message` with ``raw`` and the
chunk's tokens, minus a call frame (positional, in `Event`'s field order)."""

"""The backend contract: where tokens come from.

A backend turns a `GenerationRequest` into an async iterator of `Event`s (``delta``,
``tool_call``, ``message``, ``usage``, ``status``), ending with one terminal event (``done`` or
``error``). It yields them in batches: each item is a non-empty list of the events it has ready
now (one upstream read, one burst), so the gateway appends a batch with one hub call and wakes
readers once for it; the terminal event ends the last batch. It knows nothing of hubs or
transports: the gateway appends what it yields to the stream log. Cancelling the iteration
(``aclose()`` or task cancellation) must stop the work and release the upstream request.

A backend may also offer a `Feed` for a request (`FeedingBackend.feed`): the same batches,
pushed into a sink from loop call-backs as they fall due, with no task step per batch. The
gateway takes it where its hub can append without waiting (`airlane.hub.Hub.appender`);
everywhere else it iterates `Backend.stream`, so a feed is an optimisation, never the only way
to a stream.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from airlane.core.errors import AirlaneError, ErrorCode
from airlane.core.events import Event

__all__ = [
    "AdmittingBackend",
    "Backend",
    "BackendError",
    "Feed",
    "FeedingBackend",
    "GenerationRequest",
    "LoadTestSpec",
    "Sink",
]


class BackendError(AirlaneError):
    """A backend could not produce the stream; the message is shown to the client, and
    ``code`` (``backend_error`` unless the backend knows better) ends the stream's ``error``
    event."""

    code = ErrorCode.BACKEND_ERROR

    def __init__(self, message: str, *, code: ErrorCode = ErrorCode.BACKEND_ERROR) -> None:
        super().__init__(message, code=ErrorCode(code))
        self.message = message


@dataclass(frozen=True, slots=True)
class LoadTestSpec:
    """The seed's benchmark workload: ``chunks`` chunks of 16 tokens (~1.2 KB of JSON)."""

    chunks: int = 200
    """How many chunks the stream carries."""
    mode: Literal["burst", "paced"] = "burst"
    """``burst``: as fast as possible; ``paced``: one chunk every ``interval_ms``."""
    interval_ms: float = 20.0
    """Pacing interval in paced mode."""
    varied: bool = False
    """Chunks that differ from one another as a model's do (tokens and log-probabilities
    drawn per chunk, no padding: ~0.8 KB) instead of one body per stream with its counters
    spliced in: what compression makes of real traffic."""

    @classmethod
    def checked(cls, chunks: Any, mode: Any, interval_ms: Any, varied: Any = False) -> LoadTestSpec:
        """A spec from a client's values, within the limits every wire applies.

        Raises:
            ValueError: a value is out of range, with the reason.
        """
        if isinstance(chunks, bool) or not isinstance(chunks, int) or not 1 <= chunks <= 100_000:
            raise ValueError("'chunks' must be an integer from 1 to 100000")
        if mode not in ("burst", "paced"):
            raise ValueError("'mode' must be 'burst' or 'paced'")
        if isinstance(interval_ms, bool) or not isinstance(interval_ms, int | float):
            raise ValueError("'interval_ms' must be a number")
        if not 0.1 <= interval_ms <= 60_000:
            raise ValueError("'interval_ms' must be between 0.1 and 60000")
        if not isinstance(varied, bool):
            raise ValueError("'varied' must be true or false")
        return cls(chunks=chunks, mode=mode, interval_ms=float(interval_ms), varied=varied)


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """A request for one generated stream, independent of the wire it arrived on."""

    model: str
    """Model name as the client sent it."""
    messages: list[dict[str, Any]] = field(default_factory=list)
    """OpenAI-style chat messages."""
    seed: int | None = None
    """Selects the synthetic text; forwarded upstream."""
    max_tokens: int | None = None
    """Upper bound on completion tokens."""
    temperature: float | None = None
    """Forwarded upstream; ignored by the synthetic backend."""
    tools: list[dict[str, Any]] | None = None
    """OpenAI tool definitions; the synthetic backend calls the first one when asked to."""
    tool_choice: Any = None
    """Forwarded upstream."""
    reasoning: bool = False
    """Ask the synthetic backend for ``reasoning`` deltas before the content."""
    loadtest: LoadTestSpec | None = None
    """When set, the synthetic backend emits benchmark chunks instead of text."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Other request fields, forwarded to an upstream unchanged."""


@runtime_checkable
class Backend(Protocol):
    """A source of generated events."""

    name: str
    """Short name for logs and metrics."""

    def stream(self, request: GenerationRequest) -> AsyncGenerator[list[Event], None]:
        """Yield the events of one generation in batches (non-empty lists, see the module
        docstring); the last event is ``done`` or ``error``."""
        ...

    async def aclose(self) -> None:
        """Release connections and other resources."""
        ...


Sink = Callable[[list[Event]], None]
"""Where a `Feed` puts a batch: appended to the stream at once. It raises if the stream can
take nothing more (it was cancelled or deleted); the feed then stops and `Feed.run` raises
that exception."""


class Feed(Protocol):
    """One generation's events, pushed: the batches `Backend.stream` would yield, each handed
    to a sink as it falls due, from plain loop call-backs (a shared timer's), with no task
    woken per batch: per chunk, no future, no task step, no resumption of the producer's
    frames (docs/performance.md has what that saves)."""

    async def run(self, sink: Sink) -> None:
        """Feed every batch to ``sink``, the last one ending with the terminal event, then
        return. Cancelling the awaiting task stops the feed: ``sink`` is not called again.
        An exception from ``sink`` stops it too and is raised here."""
        ...

    def pause(self) -> None:
        """Hand ``sink`` nothing until `resume` (the store behind it is behind: backpressure).
        Callable from within ``sink``. What falls due meanwhile waits, in order: a paced
        feed hands it over late, an upstream one stops reading its response (past the
        connection's buffer the socket is not read either, so the model server is held back
        too)."""
        ...

    def resume(self) -> None:
        """Hand ``sink`` what waited, at once, and go on as before `pause` (not from within
        ``sink``: the next batch would be handed over before the current one returned)."""
        ...


@runtime_checkable
class AdmittingBackend(Protocol):
    """A `Backend` with a bounded queue of its own (a local model, one generation at a time)."""

    def admit(self, request: GenerationRequest) -> None:
        """Raise `BackendError` (code ``overloaded``) if ``request`` would find no room now. The
        gateway asks before it creates the stream, so that the client gets the refusal as its
        answer (HTTP 503) rather than as a stream's error event; the backend checks again
        when the stream starts."""
        ...


@runtime_checkable
class FeedingBackend(Protocol):
    """A `Backend` that can push some of its streams (`Feed`)."""

    def feed(self, request: GenerationRequest) -> Feed | None:
        """A feed for ``request``, or None where only `Backend.stream` serves it. Raises
        `BackendError` for a request it cannot serve, as `Backend.stream` would."""
        ...

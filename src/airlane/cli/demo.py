"""``airlane demo``: the main job in one command.

Starts a gateway on a free loopback port (unless ``--url`` points at one), streams one chat
completion over SSE and one over WebSocket, printing the tokens as they arrive, then shows
what each transport measured and which streams it used. With ``--stay`` (the default when
run from a terminal) the gateway then keeps serving, with a generation read every couple of
seconds, and the web console's address is printed: the console shows them live until Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from airlane.bench.spawn import GatewayStartError, LocalGateway

# The transports' clients are imported where they are used: other commands load none of them.
from airlane.client.accumulator import TextAccumulator
from airlane.client.errors import ClientError

__all__ = ["DEFAULT_PROMPT", "TTFT_MEANING", "DemoRun", "demo_command"]

DEFAULT_PROMPT = "What does Airlane do?"
"""What the demo asks (the synthetic backend answers anything: this gets about 70 tokens)."""
DEFAULT_MODEL = "airlane-synthetic"

TTFT_MEANING = (
    "TTFT: from sending the request, on a connection already open (each client connects and "
    "loads its libraries first), to the first token printed"
)
"""What the demo's time to first token measures: the same span for both transports, so that
neither includes connecting or the client's one-time set-up and the two compare."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class DemoRun:
    """What one transport's completion measured."""

    transport: str
    stream_id: str
    ttft_ms: float
    tokens: int
    total_s: float
    bytes_received: int

    @property
    def tokens_per_s(self) -> float:
        """Completion tokens per second after the first token."""
        decode_s = self.total_s - self.ttft_ms / 1000
        return self.tokens / decode_s if decode_s > 0 else 0.0


class _Clock:
    """Time to first token and total time of one completion."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.first: float | None = None

    def token(self) -> None:
        if self.first is None:
            self.first = time.perf_counter()

    def ttft_ms(self) -> float:
        return 1000 * ((self.first or time.perf_counter()) - self.start)

    def total_s(self) -> float:
        return time.perf_counter() - self.start


def _show(console: Console, text: str, channel: str = "content") -> None:
    if text:
        console.print(text, end="", style="dim" if channel == "reasoning" else None, soft_wrap=True)


async def stream_sse(console: Console, url: str, request: dict[str, Any]) -> DemoRun:
    """One completion over ``POST /v1/chat/completions`` (SSE), printed as it arrives."""
    from airlane.client.sse import AirlaneClient

    async with AirlaneClient(url) as client:
        await client.health()  # connected (see TTFT_MEANING)
        clock, count, usage = _Clock(), 0, None
        params = {**request, "stream_options": {"include_usage": True}}
        model, messages = params.pop("model"), params.pop("messages")
        async for piece in client.chat_stream(model, messages, **params):
            if piece.text:
                clock.token()
                count += 1
                _show(console, piece.text, piece.channel)
            usage = piece.usage or usage
        tokens = int(usage.get("completion_tokens", count)) if usage else count
        return DemoRun(
            "SSE", client.stream_id or "?", clock.ttft_ms(), tokens, clock.total_s(),
            client.bytes_received,
        )  # fmt: skip


async def stream_ws(console: Console, url: str, request: dict[str, Any]) -> DemoRun:
    """One completion over ``/v1/ws`` (``generate``), printed as it arrives."""
    from airlane.client.ws import WsClient

    async with WsClient(url) as ws:
        clock, state = _Clock(), TextAccumulator()
        subscription = await ws.generate(request)
        async for event in subscription:
            if event.kind == "delta" and event.text:
                clock.token()
                _show(console, event.text, event.channel)
            state.apply(event)
        usage = state.usage or {}
        tokens = int(usage.get("completion_tokens", 0))
        return DemoRun(
            "WebSocket", subscription.stream_id, clock.ttft_ms(), tokens, clock.total_s(),
            ws.bytes_received,
        )  # fmt: skip


async def run_demo(console: Console, url: str, request: dict[str, Any]) -> list[DemoRun]:
    """Both completions, one after the other."""
    runs = []
    for title, stream in (("SSE", stream_sse), ("WebSocket", stream_ws)):
        console.rule(f"[bold]{title}[/bold]")
        runs.append(await stream(console, url, request))
        console.print()
    return runs


def demo_table(runs: list[DemoRun]) -> Table:
    """One row per transport."""
    table = Table(title="one chat completion per transport")
    for column in ("transport", "TTFT (ms)", "tokens", "tokens/s", "bytes received", "total (s)"):
        table.add_column(column, justify="left" if column == "transport" else "right")
    for run in runs:
        table.add_row(
            run.transport,
            f"{run.ttft_ms:.1f}",
            str(run.tokens),
            f"{run.tokens_per_s:.1f}",
            f"{run.bytes_received:,}",
            f"{run.total_s:.2f}",
        )
    return table


async def live_feed(url: str, request: dict[str, Any], every_s: float, limit: int) -> int:
    """Start and read a generation every ``every_s`` seconds, ``limit`` at most (what the
    console shows while the demo stays); the number read."""
    from airlane.client.sse import AirlaneClient

    params = dict(request)
    model, messages = params.pop("model"), params.pop("messages")
    read = 0
    async with AirlaneClient(url) as client:
        for n in range(limit):
            started = time.monotonic()
            async for _ in client.chat_stream(model, messages, seed=n, **params):
                pass
            read += 1
            await asyncio.sleep(max(0.0, every_s - (time.monotonic() - started)))
    return read


def demo_command(
    url: Annotated[
        str | None, typer.Option(help="A running gateway; default: start one on a free port.")
    ] = None,
    prompt: Annotated[str, typer.Option(help="The user message.")] = DEFAULT_PROMPT,
    model: Annotated[str, typer.Option(help="Model name sent in the request.")] = DEFAULT_MODEL,
    max_tokens: Annotated[int, typer.Option(help="Completion length limit.", min=1)] = 80,
    stay: Annotated[
        bool | None,
        typer.Option(
            "--stay/--no-stay",
            help="Keep the gateway serving afterwards, with live streams for the web console "
            "(default: when run from a terminal).",
        ),
    ] = None,
    stay_limit: Annotated[
        int, typer.Option(help="Generations to read while staying, at most.", min=1)
    ] = 100_000,
) -> None:
    """Stream a chat completion over SSE and over WebSocket, and compare them."""
    console = Console()
    messages = [{"role": "user", "content": prompt}]
    request: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens}
    gateway = LocalGateway() if url is None else None
    try:
        if gateway is not None:
            with console.status("starting a gateway (synthetic backend)..."):
                url = gateway.start()
            console.print(f"gateway [bold]{url}[/bold] (pid {gateway.pid}, synthetic backend)")
        assert url is not None
        runs = _run(run_demo(console, url, request))
        console.print(demo_table(runs))
        console.print(TTFT_MEANING, highlight=False)
        ids = ", ".join(f"{run.transport} [bold]{run.stream_id}[/bold]" for run in runs)
        console.print(f"streams used: {ids}")
        replay = f"airlane stream --url {url} --stream-id {runs[0].stream_id}"
        if gateway is None:
            console.print(f"replay one from the start: [bold]{replay}[/bold]")
        if stay if stay is not None else (sys.stdin.isatty() and sys.stdout.isatty()):
            console.print(
                f"web console: [bold]{url}/console/[/bold] (a generation every 2 s; Ctrl-C "
                "stops the gateway)",
                highlight=False,
            )
            console.print(f"meanwhile, in another terminal: [bold]{replay}[/bold]")
            with contextlib.suppress(KeyboardInterrupt):
                _run(live_feed(url, request, 2.0, stay_limit))
    except (ClientError, GatewayStartError) as exc:
        console.print(f"[red]demo failed:[/red] {exc}")
        raise typer.Exit(1) from None
    finally:
        if gateway is not None:
            gateway.stop()


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on uvloop where available."""
    if sys.platform != "win32":
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)  # pragma: no cover

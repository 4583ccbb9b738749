"""`H3Client`: requests to an Airlane gateway over HTTP/3 (QUIC), on aioquic.

One QUIC connection carries many requests at once, each on its own stream: a lost packet
delays only the stream it belonged to. `request` answers with the response's head at once and
its body as it arrives (`H3Response.chunks`), so an SSE stream reads event by event::

    async with await H3Client.connect("127.0.0.1", 8420, verify=False) as client:
        response = await client.request("GET", "/healthz")
        print(response.status, await response.read())

``verify=False`` trusts any certificate (the gateway's self-signed one, made at start when it
has none configured); ``cafile`` names the CA of a configured one.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Any

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, QuicEvent, StreamReset

from airlane.client.errors import (
    ConnectFailed,
    ConnectionLost,
    ProtocolViolation,
    RequestRejected,
    StreamNotFound,
)
from airlane.client.events import StreamEvent
from airlane.client.sse import stream_path
from airlane.runtime.quic_congestion import ALGORITHM
from airlane.wire.errors import SSEError
from airlane.wire.sse import SSEDecoder

__all__ = ["H3Client", "H3Response"]

_END = b""  # queued after a stream's last body bytes


class H3Response:
    """A response's status and headers, and its body as it arrives."""

    def __init__(self, stream_id: int, status: int, headers: list[tuple[str, str]]) -> None:
        self.stream_id = stream_id
        self.status = status
        self.headers = headers
        """Field names lower-case, in the order received (``:status`` left out)."""
        self._body: asyncio.Queue[bytes | BaseException] = asyncio.Queue()

    def header(self, name: str) -> str | None:
        """The first value of field ``name`` (lower-case), or None."""
        return next((value for key, value in self.headers if key == name), None)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body, piece by piece as the stream delivers it; `ConnectionLost` if the stream
        or connection ends before the body does."""
        while True:
            item = await self._body.get()
            if isinstance(item, BaseException):
                raise item
            if item is _END:
                return
            yield item

    async def read(self) -> bytes:
        """The whole body."""
        return b"".join([chunk async for chunk in self.chunks()])


class _Stream:
    """One request's side of the connection, until its response head arrives."""

    def __init__(self, stream_id: int, loop: asyncio.AbstractEventLoop) -> None:
        self.stream_id = stream_id
        self.head: asyncio.Future[H3Response] = loop.create_future()
        self.response: H3Response | None = None

    def fail(self, exc: BaseException) -> None:
        if not self.head.done():
            self.head.set_exception(exc)
        elif self.response is not None:
            self.response._body.put_nowait(exc)


class _Protocol(QuicConnectionProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.streams: dict[int, _Stream] = {}
        self.lost: str | None = None

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, StreamReset):
            stream = self.streams.pop(event.stream_id, None)
            if stream is not None:
                stream.fail(ConnectionLost(f"the gateway reset stream {event.stream_id}"))
        elif isinstance(event, ConnectionTerminated):
            self.lost = f"the connection closed ({event.reason_phrase or event.error_code})"
            for stream in self.streams.values():
                stream.fail(ConnectionLost(self.lost))
            self.streams.clear()
        for h3_event in self.h3.handle_event(event):
            stream = self.streams.get(getattr(h3_event, "stream_id", -1))
            if stream is None:
                continue
            if isinstance(h3_event, HeadersReceived) and stream.response is None:
                fields = [(k.decode(), v.decode("latin-1")) for k, v in h3_event.headers]
                status = int(next((v for k, v in fields if k == ":status"), "0"))
                stream.response = H3Response(
                    stream.stream_id, status, [(k, v) for k, v in fields if k[0] != ":"]
                )
                stream.head.set_result(stream.response)
                if h3_event.stream_ended:
                    self._ended(stream)
            elif isinstance(h3_event, DataReceived) and stream.response is not None:
                if h3_event.data:
                    stream.response._body.put_nowait(h3_event.data)
                if h3_event.stream_ended:
                    self._ended(stream)

    def _ended(self, stream: _Stream) -> None:
        assert stream.response is not None
        stream.response._body.put_nowait(_END)
        self.streams.pop(stream.stream_id, None)


class H3Client:
    """One HTTP/3 connection to a gateway (see the module docstring)."""

    def __init__(self, protocol: _Protocol, host: str, closing: Any) -> None:
        self._protocol = protocol
        self._host = host
        self._closing = closing
        self.last_id: str | None = None
        """The id of the last event `events` handed out: where a reconnection resumes."""

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        verify: bool = True,
        cafile: str | None = None,
        server_name: str | None = None,
        timeout_s: float = 10.0,
        congestion_control: str = ALGORITHM,
        max_datagram_size: int = 1200,
    ) -> H3Client:
        """Connect to ``host``:``port`` (UDP); `ConnectFailed` if no handshake completes in
        ``timeout_s``. ``congestion_control`` is the controller of what this client sends
        (``airlane-bbr``, or aioquic's ``reno``/``cubic``)."""
        configuration = QuicConfiguration(
            is_client=True,
            alpn_protocols=list(H3_ALPN),
            server_name=server_name or host,
            congestion_control_algorithm=congestion_control,
            max_datagram_size=max_datagram_size,
        )
        if not verify:
            configuration.verify_mode = ssl.CERT_NONE
        elif cafile is not None:
            configuration.load_verify_locations(cafile)
        manager = connect(host, port, configuration=configuration, create_protocol=_Protocol)
        try:
            async with asyncio.timeout(timeout_s):
                protocol = await manager.__aenter__()
        except (OSError, TimeoutError, ConnectionError) as exc:
            raise ConnectFailed(f"no HTTP/3 connection to {host}:{port}: {exc}") from exc
        assert isinstance(protocol, _Protocol)
        return cls(protocol, host, manager)

    async def request(
        self,
        method: str,
        path: str,
        *,
        headers: Sequence[tuple[str, str]] = (),
        body: bytes = b"",
        authority: str | None = None,
    ) -> H3Response:
        """Send a request; its response once the head has arrived."""
        protocol = self._protocol
        if protocol.lost is not None:
            raise ConnectionLost(protocol.lost)
        stream_id = protocol._quic.get_next_available_stream_id()
        stream = protocol.streams[stream_id] = _Stream(stream_id, asyncio.get_running_loop())
        head = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", (authority or self._host).encode()),
            (b":path", path.encode()),
            *((name.lower().encode(), value.encode()) for name, value in headers),
        ]
        protocol.h3.send_headers(stream_id, head, end_stream=not body)
        if body:
            protocol.h3.send_data(stream_id, body, end_stream=True)
        protocol.transmit()
        return await stream.head

    async def start_stream(
        self, request: dict[str, Any], *, headers: Sequence[tuple[str, str]] = ()
    ) -> str:
        """Start a generation of ``request`` (an OpenAI chat body) through the streams API;
        its stream id (`events` reads it). `RequestRejected` for the gateway's refusal."""
        fields = [("content-type", "application/json"), *headers]
        response = await self.request(
            "POST", "/v1/streams", headers=fields, body=json.dumps(request).encode()
        )
        body = await response.read()
        if response.status != 201:
            raise _refusal(response.status, body)
        return str(json.loads(body)["id"])

    async def events(
        self, stream_id: str, *, resume: str | None = None, headers: Sequence[tuple[str, str]] = ()
    ) -> AsyncIterator[StreamEvent]:
        """A stream's events from after ``resume`` (``<epoch>:<seq>``; None: from its start)
        to its end, read once: `last_id` says where a reconnection resumes. `StreamNotFound`
        and `RequestRejected` for the gateway's refusals; `ConnectionLost` when the connection
        goes first."""
        fields = [*headers, *((("last-event-id", resume),) if resume else ())]
        response = await self.request("GET", stream_path(stream_id, "events"), headers=fields)
        if response.status == 204:  # resumed at the very end of a finished stream
            return
        if response.status != 200:
            raise _refusal(response.status, await response.read())
        decoder = SSEDecoder()
        async for chunk in response.chunks():
            try:
                messages = decoder.feed(chunk)
            except SSEError as exc:
                raise ProtocolViolation(str(exc)) from None
            for message in messages:
                event = StreamEvent.from_json(message.data, message.id)
                if message.id:
                    self.last_id = message.id
                yield event

    async def aclose(self) -> None:
        """Close the connection."""
        await self._closing.__aexit__(None, None, None)

    async def __aenter__(self) -> H3Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _refusal(status: int, body: bytes) -> RequestRejected:
    """The gateway's error answer as the client's error (its code and message)."""
    try:
        error = json.loads(body)["error"]
        code, message = str(error.get("code")), str(error.get("message"))
    except (ValueError, KeyError, TypeError):
        code, message = "http_error", body[:200].decode("utf-8", "replace")
    if code == "stream_not_found":
        return StreamNotFound(message, status=status, code=code)
    return RequestRejected(f"HTTP {status}: {message}", status=status, code=code)

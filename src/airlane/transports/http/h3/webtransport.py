"""`WebTransportSession`: the ``/v1/ws`` multiplex over a WebTransport session.

A browser (or `airlane.client.webtransport`) opens a session with an extended CONNECT
(``:protocol webtransport``) to ``/v1/ws`` on the HTTP/3 listener. The application serves it
as it serves a WebSocket on that path (same ops, authentication by ``?ticket=``, error
messages and close codes), seeing an ASGI ``websocket`` scope whose ``receive`` and ``send``
are this session's, plus the ``airlane.webtransport`` extension (`WebTransportChannel`). What
changes is where bytes travel:

- **ops and replies** on the client's bidirectional stream (its first one: the control
  stream), each message framed by `airlane.wire.framing` (a 4-byte length, then the JSON);
- **each subscription's events on a unidirectional stream of their own**, which the server
  opens: a lost packet delays one subscription, not every stream multiplexed on the session
  (over a WebSocket, everything waits behind it in TCP);
- **datagrams** for small real-time messages, unreliable and unordered: an op sent as a
  datagram is answered by one, and a subscription made with ``"datagrams": true`` (presence,
  progress) gets its events as datagrams. With ``?fec=N`` each N datagrams the server sends
  are followed by an XOR parity datagram (`airlane.wire.fec`), which rebuilds one loss per
  group. Every datagram starts with `airlane.wire.fec`'s kind byte, so a client reads both.

A client that stops a subscription's stream (STOP_SENDING) ends that subscription at once
(its sender's `StreamSender.on_stopped` call-back; a write to it raises `StreamStopped`); one
that stops the control stream ends the session.

Bounded: at most ``max_inbox`` messages wait for the application (past that the session is
closed, 1008), a message is at most ``max_message`` bytes (1009), a stream writer waits once
its stream holds ``max_buffered_bytes`` unacknowledged, and a datagram that would not fit in
one packet travels on the control stream instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from airlane.wire.capsule import encode_close, parse_close
from airlane.wire.errors import DecodeError, FrameTooLarge
from airlane.wire.fec import FecDecoder, FecEncoder, plain
from airlane.wire.framing import FrameDecoder, encode_frame

if TYPE_CHECKING:
    from airlane.transports.http.h3.protocol import H3Protocol

__all__ = ["WEBTRANSPORT", "StreamStopped", "WebTransportChannel", "WebTransportSession"]

log = logging.getLogger("airlane.http3")

WEBTRANSPORT = "airlane.webtransport"
"""The ASGI extension a WebTransport session's scope carries (a `WebTransportChannel`)."""
DATAGRAM_LIMIT = 1000
"""Largest datagram message sent as one (a QUIC packet of 1200 bytes holds it with headers)."""
FEC_INTERLEAVE = 8
"""Parity groups open at once: QUIC packs up to about eight small datagrams in a packet, and
each group may lose only one of them."""
PARITY_DELAY_S = 0.02
"""A group left open this long gets its parity early, so the last messages are protected."""
CLOSE_POLICY = 1008
CLOSE_TOO_BIG = 1009


class StreamStopped(Exception):
    """The client stopped reading a subscription's stream (STOP_SENDING, or a reset): what
    is written to it would go nowhere, so its subscription ends."""

    def __init__(self, stream_id: int) -> None:
        super().__init__(f"the client stopped stream {stream_id}")
        self.stream_id = stream_id


class WebTransportSession:
    """One session (see the module docstring); `H3Protocol` feeds it, the app runs on it."""

    def __init__(
        self,
        protocol: H3Protocol,
        session_id: int,
        *,
        fec_group: int | None = None,
        max_inbox: int = 1024,
        max_message: int = 1 << 20,
    ) -> None:
        self.protocol = protocol
        self.session_id = session_id
        self.max_message = max_message
        self.accepted = False
        self.closed = False
        self.control: int | None = None
        """The client's first bidirectional stream: where ops arrive and replies go."""
        self.channel = WebTransportChannel(self)
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue(max_inbox)
        self._inbox.put_nowait({"type": "websocket.connect"})
        self._decoders: dict[int, FrameDecoder] = {}
        self._fec_in = FecDecoder()
        self._fec_out = FecEncoder(fec_group, FEC_INTERLEAVE) if fec_group else None
        self._parity_timer: asyncio.TimerHandle | None = None
        self._send_lock = asyncio.Lock()
        self._on_stopped: dict[int, Callable[[], None]] = {}
        """What to call when the client stops a server stream, by stream id."""

    # -- from the connection ----------------------------------------------------------------

    def stream_data(self, stream_id: int, data: bytes, ended: bool) -> None:
        """Bytes on a stream of this session, from the client."""
        if self.closed:
            return
        if self.control is None and stream_id % 4 == 0:  # client-initiated bidirectional
            self.control = stream_id
        decoder = self._decoders.get(stream_id)
        if decoder is None:
            decoder = self._decoders[stream_id] = FrameDecoder(self.max_message)
        try:
            messages = decoder.feed(data)
        except FrameTooLarge as exc:
            self.close(CLOSE_TOO_BIG, str(exc))
            return
        for message in messages:
            self._deliver(message, datagram=False)
        if ended:
            self._decoders.pop(stream_id, None)

    def datagram(self, data: bytes) -> None:
        """A datagram of this session, from the client (dropped when the app is behind)."""
        if self.closed:
            return
        try:
            messages = self._fec_in.feed(data)
        except DecodeError:
            return  # unreliable by nature: a bad one is as good as lost
        for message in messages:
            if self._inbox.full():
                return
            try:
                message.decode("utf-8")
            except UnicodeDecodeError:
                continue  # garbled on the way, or garbage: a datagram is as good as lost
            self._deliver(message, datagram=True)

    def _deliver(self, message: bytes, *, datagram: bool) -> None:
        try:
            text: str | None = message.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        item: dict[str, Any] = {"type": "websocket.receive", "airlane.datagram": datagram}
        item["text" if text is not None else "bytes"] = text if text is not None else message
        try:
            self._inbox.put_nowait(item)
        except asyncio.QueueFull:
            self.close(CLOSE_POLICY, "too many messages waiting; wait for replies")

    def ended(self) -> None:
        """The session is over: the client closed it, or the connection went."""
        if self.closed:
            return
        self.closed = True
        if self._parity_timer is not None:
            self._parity_timer.cancel()
        # The application's receive must see the end even when the inbox is full.
        while self._inbox.full():
            self._inbox.get_nowait()
        self._inbox.put_nowait({"type": "websocket.disconnect", "code": 1001})

    # -- the ASGI side ----------------------------------------------------------------------

    async def run(self, app: Callable[..., Awaitable[None]], scope: dict[str, Any]) -> None:
        """Serve the session with ``app`` (its ``websocket`` scope is ``scope``)."""
        await app(scope, self.receive, self.send)

    async def receive(self) -> dict[str, Any]:
        """The next ASGI message for the application."""
        return await self._inbox.get()

    async def send(self, message: dict[str, Any]) -> None:
        """An ASGI message from the application."""
        kind = message["type"]
        if kind == "websocket.accept":
            self.accepted = True
            head = [(b":status", b"200"), (b"sec-webtransport-http3-draft", b"draft02")]
            self.protocol.send_head(self.session_id, head, end=False)
        elif kind == "websocket.http.response.start":  # a refusal with an HTTP status
            status = int(message["status"])
            head = [(b":status", b"%d" % status), *message.get("headers", [])]
            self.protocol.send_head(self.session_id, list(head), end=False)
            self.accepted = True  # answered: what follows is the refusal's body
        elif kind == "websocket.http.response.body":
            more = bool(message.get("more_body"))
            self.protocol.send_body(self.session_id, bytes(message.get("body", b"")), not more)
            if not more:
                self.ended()
        elif kind == "websocket.close":
            self.close(int(message.get("code", 1000)), str(message.get("reason", "")))
        elif kind == "websocket.send" and message.get("airlane.datagram"):
            for data in _messages(message):
                self.send_datagram(data)
        elif kind in ("websocket.send", "websocket.send_many") and self.control is not None:
            await self.write(self.control, _messages(message))

    async def write(self, stream_id: int, messages: list[bytes], end: bool = False) -> None:
        """Frame ``messages`` onto ``stream_id``, then wait while it holds too much.

        Raises `StreamStopped` when the client stopped ``stream_id`` (a subscription's); the
        client stopping the control stream, where replies go, ends the session instead."""
        if self.closed:
            return
        if not self.protocol.writable(stream_id):
            if stream_id != self.control:
                raise StreamStopped(stream_id)
            # No reply can reach the client any more: the session is over, and says so.
            self.close(1000, "the control stream was stopped")
            return
        payload = b"".join(encode_frame(m) for m in messages)
        self.protocol.send_body(stream_id, payload, end, raw=True)
        waiter: Awaitable[None] | None = self.protocol.drained(stream_id)
        if waiter is not None:
            await waiter

    def send_datagram(self, message: bytes) -> None:
        """``message`` as a datagram (with parity when the session asked for it); one too
        large for a packet goes on the control stream instead."""
        if self.closed:
            return
        if len(message) > DATAGRAM_LIMIT:
            if self.control is not None:
                self.protocol.send_body(self.control, encode_frame(message), False, raw=True)
            return
        encoder = self._fec_out
        datagrams = [plain(message)] if encoder is None else encoder.encode(message)
        for datagram in datagrams:
            self.protocol.send_datagram(self.session_id, datagram)
        if encoder is not None and encoder.pending and self._parity_timer is None:
            self._parity_timer = asyncio.get_running_loop().call_later(
                PARITY_DELAY_S, self._flush_parity
            )

    def _flush_parity(self) -> None:
        self._parity_timer = None
        encoder = self._fec_out
        if encoder is not None and encoder.pending and not self.closed:
            for parity in encoder.flush_parity():
                self.protocol.send_datagram(self.session_id, parity)

    def close(self, code: int, reason: str) -> None:
        """Close the session with ``code`` and ``reason`` (CLOSE_WEBTRANSPORT_SESSION), or
        refuse it (403) if it was never accepted."""
        if self.closed:
            return
        if not self.accepted:
            head = [(b":status", b"403"), (b"content-type", b"text/plain")]
            self.protocol.send_head(self.session_id, head, end=False)
            self.protocol.send_body(self.session_id, reason.encode(), True)
        else:
            self.protocol.send_body(self.session_id, encode_close(code, reason), True)
        self.ended()

    def stream_stopped(self, stream_id: int) -> None:
        """The client stopped (or reset) ``stream_id``: if it is the control stream, where
        replies go, the session is over; if a server stream's sender asked to know, it is
        told now (an idle subscription would otherwise hold its slot until its next write)."""
        if stream_id == self.control and not self.closed:
            self.close(1000, "the control stream was stopped")
        callback = self._on_stopped.pop(stream_id, None)
        if callback is not None:
            callback()

    def watch_stop(self, stream_id: int, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` (once) when the client stops server stream ``stream_id``; None
        forgets the one set."""
        if callback is None:
            self._on_stopped.pop(stream_id, None)
        else:
            self._on_stopped[stream_id] = callback

    def capsules(self, data: bytes, ended: bool) -> None:
        """Bytes on the CONNECT stream after the head: capsules (a close, or grease that is
        ignored); its end ends the session."""
        if ended or parse_close(data) is not None:
            self.ended()


def _messages(message: dict[str, Any]) -> list[bytes]:
    """The messages an ASGI ``websocket.send`` or ``websocket.send_many`` carries, as bytes."""
    if message["type"] == "websocket.send_many":
        return list(message.get("texts") or message.get("bytes") or [])
    data = message.get("bytes")
    return [data if data is not None else str(message.get("text", "")).encode()]


class WebTransportChannel:
    """The ``airlane.webtransport`` extension: lets the ``/v1/ws`` session put each
    subscription on a stream of its own, or on datagrams."""

    def __init__(self, session: WebTransportSession) -> None:
        self._session = session

    def open_stream(self) -> StreamSender:
        """A new unidirectional stream to the client, as an ASGI ``send``."""
        session = self._session
        stream_id = session.protocol.open_webtransport_stream(session.session_id)
        return StreamSender(session, stream_id)

    def datagrams(self) -> DatagramSender:
        """The session's datagrams, as an ASGI ``send``."""
        return DatagramSender(self._session)

    def copy(self, message: bytes) -> None:
        """``message`` as a datagram too, beside its stream (dropped if too large for one)."""
        if len(message) <= DATAGRAM_LIMIT:
            self._session.send_datagram(message)


class StreamSender:
    """ASGI ``send`` onto one server stream of a session (``websocket.send`` and
    ``websocket.send_many``); `aclose` ends the stream."""

    def __init__(self, session: WebTransportSession, stream_id: int) -> None:
        self.session = session
        self.stream_id = stream_id

    async def __call__(self, message: dict[str, Any]) -> None:
        """Write the message's frames; raises `StreamStopped` once the client stopped the
        stream."""
        await self.session.write(self.stream_id, _messages(message))

    def on_stopped(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (once) if the client stops this stream before `aclose`."""
        self.session.watch_stop(self.stream_id, callback)

    async def aclose(self) -> None:
        """End the stream (its subscription ended), unless the client stopped it first."""
        self.session.watch_stop(self.stream_id, None)
        with contextlib.suppress(StreamStopped):
            await self.session.write(self.stream_id, [], end=True)


class DatagramSender:
    """ASGI ``send`` as datagrams of a session."""

    def __init__(self, session: WebTransportSession) -> None:
        self.session = session

    async def __call__(self, message: dict[str, Any]) -> None:
        for frame in _messages(message):
            self.session.send_datagram(frame)

    def on_stopped(self, callback: Callable[[], None]) -> None:
        """Never called: datagrams have no stream to stop."""

    async def aclose(self) -> None:
        """Nothing to end: datagrams have no stream."""

"""`HttpProtocol`: Airlane's HTTP/1.1 connection, parsed by httptools, answered through ASGI.

One protocol per connection. httptools (llhttp) parses the bytes and calls the protocol back
(``on_url``, ``on_header``, ``on_headers_complete``, ``on_body``, ``on_message_complete``);
each request becomes a `RequestCycle` (`airlane.transports.http.server.cycle`), whose
application runs in a task this connection owns.

- **Keep-alive and pipelining.** Requests are answered one at a time, in order. A request that
  arrives while another is being answered waits in a queue of at most
  `ServerSettings.max_pipelined` (the connection stops reading meanwhile); past that, the
  connection answers what it has and closes. An idle connection closes after
  `ServerSettings.keep_alive_s`.
- **Bounds.** The request target, the header fields (count and bytes) and the request body
  buffered for an application that is not reading are bounded (`ServerSettings`); a request
  past a bound gets 414 or 431, a malformed one 400, each with ``connection: close``, in its
  turn after the responses before it. Nothing the server answers itself carries more than a
  line of text.
- **Owned tasks.** When the client goes, the request's task is told (``http.disconnect``)
  and, if it is still running `ServerSettings.disconnect_grace_s` later, cancelled.
- **WebSocket upgrades** (``Upgrade: websocket``) are handed over as parsed: the scope is
  built from what httptools read, the handshake is checked and negotiated by ``websockets``'
  sans-I/O `ServerProtocol` from a `Request` made of the same headers, and the transport goes
  to a `WebSocketProtocol` (`airlane.transports.http.ws_protocol`) with whatever bytes followed
  the request. Nothing is parsed twice. Other upgrades (``h2c``) are ignored, as RFC 9110
  allows: the request is answered as HTTP/1.1.

Each request's scope carries the ``airlane.http.write_body`` extension (`WRITE_BODY`): a plain
call that writes one chunk of a started chunked response body at once. An ASGI ``send`` is a
coroutine: a coroutine object, its frame and a ``StopIteration`` per chunk, plus the message
dict and its checks, for what is a single ``transport.write``. The SSE pump writes through it
whenever it can (a paced chunk cost about 65 bytecodes and 6 % of gateway CPU less,
docs/performance.md) and sends through ASGI otherwise: whenever the response is not in that
state, flow control has paused the transport, or the client has gone, `BodyWriter.write`
writes nothing and says so.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from typing import TYPE_CHECKING, Any

import httptools

from airlane.transports.http.asgi import (
    HAND_OVER_EXTENSION,
    HANDED_OVER,
    PEER_EXTENSION,
    PLACE_EXTENSION,
    SOCKET_EXTENSION,
)
from airlane.transports.http.server.cycle import BodyWriter, RequestCycle
from airlane.transports.http.server.flow import WriteFlow
from airlane.transports.http.server.state import ServerState, cancel_later, log
from airlane.transports.http.server.status import plain_response
from airlane.transports.http.server.target import BadTarget, address, split_target
from airlane.transports.http.ws_protocol import upgrade_to_websocket

if TYPE_CHECKING:
    from airlane.gateway import PeerIdentity

__all__ = [
    "HANDED_BODY_BYTES",
    "LINGER_BYTES",
    "LINGER_S",
    "PEER",
    "WRITE_BODY",
    "BodyWriter",
    "HttpProtocol",
]

LINGER_S = 2.0
"""How long a connection ended by the server goes on reading what the client still sends."""
LINGER_BYTES = 64 << 20
"""How much it reads (and discards) meanwhile, at most."""

HANDED_BODY_BYTES = 64 * 1024
"""The largest request body a request is handed to a sibling process with (with a larger one
it stays where it arrived): a stream's create, a chat completion's request or an append, not
an upload."""

WRITE_BODY = "airlane.http.write_body"
"""Scope extension: a call-back that writes one more chunk of a chunked response body at
once, if the response can take it without waiting; see `BodyWriter.write`."""
PEER = PEER_EXTENSION
"""Scope extension: the `airlane.gateway.PeerIdentity` of the connection's TLS client
certificate, or None."""

_ASGI = {"version": "3.0", "spec_version": "2.4"}


class _Refused(Exception):
    """Raised from a parser call-back to stop parsing a request the server refuses."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


class HttpProtocol(asyncio.Protocol):
    """One HTTP/1.1 connection (see the module docstring)."""

    # Slots: thousands of these live at once, and a dict each (over 30 attributes, not
    # sharing its keys) would be 1.5 KB more per connection and one more object for the
    # garbage collector to walk.
    __slots__ = (
        "__weakref__",
        "_body_seen",
        "_body_timer",
        "_done",
        "_expect_continue",
        "_feeding",
        "_handed_in",
        "_head_bytes",
        "_header_bytes",
        "_headers",
        "_high_water",
        "_idle",
        "_in_head",
        "_linger_timer",
        "_lingering",
        "_lost",
        "_max_head_bytes",
        "_max_header_bytes",
        "_max_headers",
        "_max_target",
        "_parsing",
        "_pipeline",
        "_preface",
        "_read_paused",
        "_refusal",
        "_resting",
        "_target",
        "_tasks",
        "_upgrade",
        "client",
        "cycle",
        "flow",
        "loop",
        "parser",
        "peer",
        "server",
        "settings",
        "socket",
        "state",
        "transport",
    )

    def __init__(self, state: ServerState, preface: bytes = b"") -> None:
        self.state = state
        self._preface = preface
        """A request a sibling process read on this connection and handed over with it
        (`airlane.runtime.handoff`): read first, as if the client had just sent it."""
        self._handed_in = bool(preface)  # that request is not handed on again
        self.loop = state.loop
        self.settings = settings = state.settings
        self._max_target = settings.max_target_bytes
        self._max_header_bytes = settings.max_header_bytes
        self._max_head_bytes = settings.max_target_bytes + settings.max_header_bytes + 4096
        self._max_headers = settings.max_headers
        self._high_water = settings.body_high_water
        self.parser: httptools.HttpRequestParser | None = self._new_parser()
        self._resting = False  # the parser was let go while a response streams (`_rest`)
        self._feeding = False  # inside the parser's `feed_data`
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.flow = WriteFlow()
        self.client: tuple[str, int] | None = None
        self.server: tuple[str, int] | None = None
        self.peer: PeerIdentity | None = None
        self.socket: Any = None
        """The transport's socket (for `SOCKET_EXTENSION`)."""
        """Who the client's TLS certificate says it is (None: plain HTTP, or none sent)."""
        self.cycle: RequestCycle | None = None
        """The request being answered."""
        self._parsing: RequestCycle | None = None  # the request whose body is being read
        self._pipeline: deque[RequestCycle | _Upgrade] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._idle: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None  # a body that stops arriving
        self._body_seen = 0.0  # when the last piece of the body being read came
        self._lingering = 0  # bytes discarded after an answer that ends the connection, + 1
        # httptools hands a header over only once it is whole, holding its pieces meanwhile:
        # the bytes that arrive while a head is incomplete are counted here instead.
        self._in_head = False
        self._head_bytes = 0
        self._linger_timer: asyncio.TimerHandle | None = None
        self._read_paused = False
        self._done = False  # no more requests: answer those read, then close
        self._refusal: _Refused | None = None  # a response owed after those before it
        self._lost = False
        # The request being parsed.
        self._target = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._header_bytes = 0
        self._expect_continue = False
        self._upgrade: _Upgrade | None = None

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.client = address(transport, "peername")
        self.server = address(transport, "sockname")
        self.socket = transport.get_extra_info("socket")
        tls = self.state.tls
        if tls is not None:
            sslobj = transport.get_extra_info("ssl_object")
            self.peer = None if sslobj is None else tls.peer_identity(sslobj.getpeercert())
        self.state.connections.add(self)
        if self.state.stopping:
            self.transport.close()
            return
        self._arm_idle()
        if self._preface:
            preface, self._preface = self._preface, b""
            self.data_received(preface)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self.state.connections.discard(self)
        self._disarm_idle()
        self._disarm_body_timer()
        if self._linger_timer is not None:
            self._linger_timer.cancel()
        self.flow.resume()  # a sender waiting for the buffer to drain must see the loss
        cycles = [cycle for cycle in (self.cycle, self._parsing) if cycle is not None]
        cycles += [item for item in self._pipeline if isinstance(item, RequestCycle)]
        for cycle in cycles:
            cycle.lost()
        self.cycle = self._parsing = None
        self._pipeline.clear()
        # The parser holds this protocol's call-backs: a reference cycle otherwise.
        self.parser = None
        self._resting = False
        cancel_later(self.loop, self._tasks, self.settings.disconnect_grace_s)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            self._lingering += len(data)
            if self._lingering > LINGER_BYTES:
                self.transport.close()
            return
        # The idle timer keeps running until a request's head is complete (`_queue`): a
        # client that sends part of a head and stops is closed like an idle one.
        if self._in_head:
            self._head_bytes += len(data)
            if self._head_bytes > self._max_head_bytes:
                self._head_too_large()
                return
        parser = self.parser
        if parser is None and self._resting:
            # More from a client whose response streams (a pipelined request, or the next
            # one after it ended): a new parser, in the state the old one was left in.
            parser = self.parser = self._new_parser()
            self._resting = False
        self._feeding = True
        try:
            while parser is not None and data:
                try:
                    parser.feed_data(data)
                    return
                except httptools.HttpParserUpgrade as exc:
                    rest = data[exc.args[0] :]
                    upgrade, self._upgrade = self._upgrade, None
                    if upgrade is None:
                        data = rest  # not a WebSocket: answered as HTTP, the parser goes on
                        continue
                    upgrade.rest = rest
                    self._queue(upgrade)
                    return
                except httptools.HttpParserError as exc:
                    self._parse_failed(exc)
                    return
        finally:
            self._feeding = False
            if self.cycle is not None:
                self._rest()  # a response that began streaming while the parser ran

    def eof_received(self) -> bool | None:
        # The client has closed its side: nothing more will come; let the transport close.
        return None

    def pause_writing(self) -> None:
        self.flow.pause()
        if self.cycle is not None:
            self.cycle.writes_paused(True)

    def resume_writing(self) -> None:
        self.flow.resume()
        if self.cycle is not None:
            self.cycle.writes_paused(False)

    # -- httptools call-backs ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        """A request begins."""
        self._target = b""
        self._headers = []
        self._header_bytes = 0
        self._head_bytes = 0
        self._in_head = True
        self._expect_continue = False

    def on_url(self, url: bytes) -> None:
        """A piece of the request target."""
        target = self._target = self._target + url if self._target else url
        if len(target) > self._max_target:
            raise self._refuse(414, "the request target is too long")

    def on_header(self, name: bytes, value: bytes) -> None:
        """A header field."""
        headers = self._headers
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > self._max_header_bytes or len(headers) >= self._max_headers:
            raise self._refuse(431, "the request's header fields are too large")
        name = name.lower()
        # llhttp keeps trailing whitespace, which is not part of the value (RFC 9110 5.5).
        value = value.rstrip(b" \t")
        if name == b"expect" and value.lower() == b"100-continue":
            self._expect_continue = True
        headers.append((name, value))

    def on_headers_complete(self) -> None:
        """The request's head is complete: make its scope and queue it."""
        self._in_head = False
        parser = self.parser
        assert parser is not None
        try:
            path, raw_path, query = split_target(self._target)
        except BadTarget as exc:
            raise self._refuse(400, str(exc)) from None
        method = parser.get_method().decode("ascii")
        version = parser.get_http_version()
        root = self.settings.root_path
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": _ASGI,
            "http_version": version,
            "method": method,
            "scheme": "http" if self.state.tls is None else "https",
            "root_path": root,
            "path": root + path if root else path,
            "raw_path": raw_path,
            "query_string": query,
            "headers": self._headers,
            "client": self.client,
            "server": self.server,
            "state": self.state.app_state.copy(),
            "extensions": {PEER: self.peer, SOCKET_EXTENSION: self.socket},
        }
        if parser.should_upgrade() and _is_websocket(self._headers):
            self._upgrade = _Upgrade(scope, method, version)
            self._parsing = None
            return
        cycle = RequestCycle(
            self,
            scope,
            keep_alive=parser.should_keep_alive() and not self._done,
            wants_continue=self._expect_continue,
        )
        scope["extensions"][WRITE_BODY] = BodyWriter(cycle).write
        if (
            self.state.handoff is not None
            and not self._handed_in
            and self.state.tls is None
            and not self._expect_continue  # (its client waits to be asked for the body)
            and _small_body(self._headers)
        ):
            extensions = scope["extensions"]
            extensions[HAND_OVER_EXTENSION] = functools.partial(self._pass_to, cycle)
            if self.state.board is not None:
                extensions[PLACE_EXTENSION] = functools.partial(self._place, cycle)
        self._handed_in = False  # a sibling's request is answered here; the next may go on
        self._parsing = cycle
        self._queue(cycle)
        # Until the body is complete (for a request without one: until the parser says so, in
        # this same call of `data_received`).
        self._body_seen = self.loop.time()
        self._body_timer = self.loop.call_later(self.settings.body_timeout_s, self._body_check)

    def on_body(self, body: bytes) -> None:
        """A piece of the request body."""
        cycle = self._parsing
        if cycle is None:
            return  # a request being dropped
        self._body_seen = self.loop.time()
        cycle.feed(body)
        if cycle.buffered > self._high_water:
            self._pause_reading()

    def on_message_complete(self) -> None:
        """The request has been read."""
        self._disarm_body_timer()
        cycle = self._parsing
        if cycle is not None:
            cycle.end_of_request()
            if not cycle.keep_alive:
                self._done = True  # whatever follows a `Connection: close` request is dropped

    # -- what the cycles call ----------------------------------------------------------------

    @property
    def reading(self) -> bool:
        """Whether the connection reads now (not paused for pipelining or a full body
        buffer)."""
        return not self._read_paused

    @property
    def stopping(self) -> bool:
        """The server is shutting down."""
        return self.state.stopping

    def date(self) -> bytes:
        """The ``date`` header line."""
        return self.state.date.line

    def alt_svc(self) -> bytes:
        """The ``alt-svc`` header line every response carries (empty: none)."""
        return self.state.alt_svc_line

    def streaming(self) -> None:
        """The response being sent has a body that goes on (chunked, or until the close):
        the parser may rest meanwhile (`_rest`), and the hand-over's extensions, of no use
        once a response has begun, leave the scope (two call-backs bound to this
        connection and the request, kept for as long as the stream lasts otherwise)."""
        cycle = self.cycle
        if cycle is not None:
            extensions = cycle.scope["extensions"]
            extensions.pop(HAND_OVER_EXTENSION, None)
            extensions.pop(PLACE_EXTENSION, None)
        if not self._feeding:
            self._rest()

    def body_wanted(self) -> None:
        """The request being answered waits for body: read."""
        if self._read_paused and not self._pipeline:
            self._resume_reading()

    def body_taken(self) -> None:
        """The application took the body buffered so far."""
        if self._read_paused and not self._pipeline:
            self._resume_reading()

    def response_complete(self, cycle: RequestCycle) -> None:
        """``cycle``'s response has been sent: the next request, or close, or idle."""
        if cycle is not self.cycle:
            return
        self.cycle = None
        if self._parsing is cycle and not cycle.more_body:
            self._parsing = None
        if self._lost:
            return
        if not cycle.keep_alive or self.state.stopping:
            if self._parsing is cycle:  # its body is still coming: let the client read this
                self._linger()
            else:
                self.transport.close()
            return
        if self._pipeline:
            self._start(self._pipeline.popleft())
        elif self._refusal is not None:
            self._send_refusal()
        elif self._done:
            self.transport.close()
        else:
            self._arm_idle()
            if self._read_paused:
                self._resume_reading()

    # -- the server's side -------------------------------------------------------------------

    def shutdown(self) -> None:
        """Close now if idle; else close once the response in flight is sent."""
        self._done = True
        self._pipeline.clear()
        if self.cycle is None:
            self.transport.close()
        else:
            self.cycle.keep_alive = False

    def abort(self) -> None:
        """Close now."""
        self.transport.close()

    async def _pass_to(self, cycle: RequestCycle, sibling: str) -> bool:
        """Hand this connection, with ``cycle``'s request (its body once all of it is here),
        to the sibling process ``sibling``, which answers it (`HAND_OVER_EXTENSION`); False
        where it stays here: a response begun, the body taken or cut short, another request
        read, the server stopping, the sibling gone, busy or holding too many connections
        (`LoadBoard.takes`)."""
        body = await cycle.whole_body()
        handoff = self.state.handoff
        scope = cycle.scope
        if (
            body is None
            or handoff is None
            or cycle is not self.cycle
            or cycle.response_started
            or self._pipeline
            or self._in_head  # the next request began: its bytes would be lost
            or self._done
            or self._lost
            or self.state.stopping
            or self.socket is None
        ):
            return False
        board = self.state.board
        if board is not None and not board.takes(sibling):
            handoff.refused += 1  # it holds too many connections: served here
            return False
        head = _request_head(scope["method"], self._target, scope["http_version"], scope["headers"])
        if not handoff.send(sibling, self.socket.fileno(), head + body):
            return False
        if board is not None:
            board.handed(sibling)
        # The sibling holds the connection now: this process lets go of it without a word
        # (closing a descriptor the sibling shares neither ends nor resets the connection).
        self._done = True
        scope[HANDED_OVER] = True
        cycle.lost()
        self.transport.abort()
        return True

    async def _place(self, cycle: RequestCycle) -> bool:
        """Hand the request to the sibling producing clearly fewer streams, if one does
        (`PLACE_EXTENSION`); False where it stays here."""
        board = self.state.board
        sibling = None if board is None else board.lighter()
        if sibling is None or not await self._pass_to(cycle, sibling):
            return False
        assert board is not None
        board.gave(sibling)
        return True

    # -- internals ---------------------------------------------------------------------------

    def _new_parser(self) -> httptools.HttpRequestParser:
        parser = httptools.HttpRequestParser(self)
        # A request pipelined after one that closes the connection is read and dropped,
        # rather than failing the parse (and the response before it) with a 400, where
        # httptools has the setting (0.6.2 and later).
        lenient = getattr(parser, "set_dangerous_leniencies", None)
        if lenient is not None:
            lenient(lenient_data_after_close=True)
        return parser

    def _rest(self) -> None:
        """Let the parser go while a response streams and the parser is between requests:
        it and the six call-backs it holds bound to this connection are seven objects (and
        about 0.7 KB) per idle stream, each walked by every full garbage-collector pass.
        `data_received` makes a new one if the client sends anything (an llhttp parser
        between requests holds nothing a new one lacks)."""
        cycle, parsing = self.cycle, self._parsing
        if (
            self.parser is None
            or cycle is None
            or not cycle.response_started
            or cycle.response_complete
            or self._in_head
            or (parsing is not None and parsing.more_body)
            or self._pipeline
            or self._upgrade is not None
            or self._lingering
        ):
            return
        self.parser = None
        self._resting = True

    def _queue(self, item: RequestCycle | _Upgrade) -> None:
        if self._idle is not None:
            self._disarm_idle()
        if self._done or self.state.stopping:
            if isinstance(item, RequestCycle):
                self._parsing = None  # dropped: its body is read and discarded
            return
        if self.cycle is None and not self._pipeline:
            self._start(item)
            return
        if len(self._pipeline) >= self.settings.max_pipelined:
            # Answer what was read, then close: beyond this the client is not waiting for
            # answers, and the queue must stay bounded.
            self._done = True
            self._parsing = None
            return
        self._pipeline.append(item)
        self._pause_reading()

    def _start(self, item: RequestCycle | _Upgrade) -> None:
        if isinstance(item, _Upgrade):
            self._hand_over(item)
            return
        self.cycle = item
        if self._pipeline or item.buffered > self._high_water:
            self._pause_reading()
        elif self._read_paused:
            self._resume_reading()
        self.state.start_task(item.run(self.state.app), self._tasks)

    def _hand_over(self, upgrade: _Upgrade) -> None:
        """The transport goes to a WebSocket protocol (or gets the handshake's refusal)."""
        self._done = True
        self.state.connections.discard(self)
        parser, self.parser = self.parser, None  # the reference cycle, as in connection_lost
        del parser
        self._resting = False
        upgrade_to_websocket(
            self.state,
            self.transport,
            upgrade.scope,
            method=upgrade.method,
            http_version=upgrade.version,
            rest=upgrade.rest,
            reading=not self._read_paused,
        )

    def _refuse(self, status: int, text: str) -> _Refused:
        refusal = self._refusal = _Refused(status, text)
        return refusal

    def _head_too_large(self) -> None:
        """A head past its bounds before httptools saw it whole: refused like one it saw."""
        self._in_head = False
        if self._refusal is None:
            self._refusal = _Refused(431, "the request's header fields are too large")
        self.parser = None
        self._done = True
        self._parsing = None
        if self.cycle is None and not self._pipeline:
            self._send_refusal()
        else:
            self._pause_reading()

    def _parse_failed(self, exc: httptools.HttpParserError) -> None:
        if self._refusal is None:
            if isinstance(exc, httptools.HttpParserCallbackError):
                # A call-back failed without refusing: a bug here, not the client's.
                log.error(
                    "HTTP request from %s: the server failed to read it", self.client, exc_info=exc
                )
                self._refusal = _Refused(500, "Internal Server Error")
            else:
                log.debug("malformed HTTP request from %s: %s", self.client, exc)
                self._refusal = _Refused(400, "malformed HTTP request")
        self.parser = None  # llhttp cannot go on after an error
        self._done = True
        self._parsing = None
        if self.cycle is None and not self._pipeline:
            self._send_refusal()
        else:
            self._pause_reading()  # answered in its turn, after the responses before it

    def _send_refusal(self) -> None:
        refusal = self._refusal
        assert refusal is not None
        self._refusal = None
        self.transport.write(plain_response(refusal.status, refusal.text, self.date()))
        self._linger()

    def _linger(self) -> None:
        """End the connection after what was written, but go on reading (and discarding) what
        the client still sends, for at most `LINGER_S` or `LINGER_BYTES`. Closing a socket
        with unread data resets it, and a client still sending (a body past the limit, a
        header that never ends) would lose the answer before it read it."""
        self._done = True
        self._parsing = None
        self.parser = None
        self._lingering = 1
        self._disarm_idle()
        self._disarm_body_timer()
        transport = self.transport
        if transport.can_write_eof():
            transport.write_eof()  # the answer, then end of stream: the client reads both
        if self._read_paused:
            self._read_paused = False
            transport.resume_reading()
        self._linger_timer = self.loop.call_later(LINGER_S, transport.close)

    def _pause_reading(self) -> None:
        if not self._read_paused and not self._lost:
            self._read_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._read_paused and not self._lost:
            self._read_paused = False
            self.transport.resume_reading()

    def _arm_idle(self) -> None:
        self._idle = self.loop.call_later(self.settings.keep_alive_s, self._idle_timeout)

    def _disarm_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def _disarm_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_check(self) -> None:
        """A request body is still incomplete: close the connection if nothing of it came for
        `ServerSettings.body_timeout_s` while the connection was reading (a paused connection
        waits for the application, not for the client)."""
        self._body_timer = None
        if self._parsing is None or self._lost:
            return
        timeout = self.settings.body_timeout_s
        quiet = self.loop.time() - self._body_seen
        if quiet >= timeout and not self._read_paused:
            log.debug("closing a connection whose request body stopped for %.0f s", quiet)
            self.transport.close()
            return
        wait = timeout - quiet if quiet < timeout else timeout
        self._body_timer = self.loop.call_later(wait, self._body_check)

    def _idle_timeout(self) -> None:
        self._idle = None
        if self.cycle is None and not self._pipeline:
            self.transport.close()


class _Upgrade:
    """A WebSocket upgrade request, parsed, waiting for its turn on the connection."""

    __slots__ = ("method", "rest", "scope", "version")

    def __init__(self, scope: dict[str, Any], method: str, version: str) -> None:
        self.scope = scope
        self.method = method
        self.version = version
        self.rest = b""
        """The bytes that came after the request (the start of the WebSocket stream)."""


def _small_body(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a request with these header fields has no body or one of a known length up
    to `HANDED_BODY_BYTES` (what a hand-over carries along)."""
    small = True
    for name, value in headers:
        if name == b"transfer-encoding":
            return False
        if name == b"content-length" and not (value.isdigit() and int(value) <= HANDED_BODY_BYTES):
            small = False
    return small


def _request_head(
    method: str, target: bytes, version: str, headers: list[tuple[bytes, bytes]]
) -> bytes:
    """A request's head as its client sent it (field names lowercased)."""
    lines = [b"%s %s HTTP/%s\r\n" % (method.encode("ascii"), target, version.encode("ascii"))]
    lines += [b"%s: %s\r\n" % field for field in headers]
    lines.append(b"\r\n")
    return b"".join(lines)


def _is_websocket(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether the request asks for a WebSocket (``Upgrade: websocket``)."""
    for name, value in headers:
        if name == b"upgrade":
            return b"websocket" in value.lower()
    return False

"""`BrokerLink`: one connection to a broker, as asyncio, over the sans-I/O
`airlane.wire.mqtt.MQTTClientConnection`.

It reads the socket in one task (`run`), feeds the bytes in, hands received messages to the
bridge's callback in order, wakes the callers waiting for a SUBACK or a PUBACK/PUBCOMP, and
writes whatever the connection wants written. Reading pauses while the bridge holds
`max_pending` messages not yet acknowledged (QoS 0 ones included), so a broker that sends
faster than the hub stores waits in its own TCP window, not in Airlane's memory. So nothing
that settles messages may wait on this link for the broker's answer to a publish: the bridge
publishes on a second link, which receives nothing (see `airlane.transports.mqtt.bridge`).

While paused the link still keeps the connection: it sends PINGREQ at the keep-alive (without
awaiting the answer, which waits unread behind the messages), and it ends at once, with
`LinkClosed`, when the socket reports the end of the connection (the broker closed it, a
reset, a write that failed), so that the bridge connects again. What the broker sent and the
link had not read yet is dropped with the connection: none of it was acknowledged, so the
broker sends it again on the next one. The socket's read buffer stays bounded meanwhile
(asyncio stops reading past twice `READ_CHUNK`).

The session (`ClientSession`) is the caller's, so that the next link resumes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable, Sequence

from airlane.transports.mqtt.config import MqttBridgeConfig
from airlane.wire.mqtt import (
    ClientSession,
    Connect,
    Connected,
    ConnectionClosed,
    MessageReceived,
    MessageReleased,
    MQTTClientConnection,
    Properties,
    Publish,
    PublishDone,
    Subscribed,
    Subscription,
    Unsubscribed,
)

__all__ = ["BrokerLink", "LinkClosed", "PublishRefused", "settled", "tls_context"]

READ_CHUNK = 1 << 16


class LinkClosed(ConnectionError):
    """The connection to the broker is over (the reason says why)."""


class PublishRefused(RuntimeError):
    """The broker answered a publish with a failure reason code."""

    def __init__(self, reason_code: int, reason: str | None) -> None:
        super().__init__(f"the broker refused the message: {reason or hex(reason_code)}")
        self.reason_code = reason_code


def tls_context(config: MqttBridgeConfig) -> ssl.SSLContext | None:
    """The TLS context for an ``mqtts://`` broker (None for plain ``mqtt://``); `LinkClosed`
    naming the file when ``ca_file``, ``cert_file`` or ``key_file`` cannot be used."""
    if not config.address.tls:
        return None
    try:
        context = ssl.create_default_context(cafile=config.ca_file)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise LinkClosed(f"cannot use the ca_file {config.ca_file!r}: {exc}") from exc
    if config.cert_file is not None:
        try:
            context.load_cert_chain(config.cert_file, config.key_file)
        except (OSError, ValueError) as exc:
            files = f"cert_file {config.cert_file!r}, key_file {config.key_file!r}"
            raise LinkClosed(f"cannot use the client certificate ({files}): {exc}") from exc
    return context


class _Reader(asyncio.StreamReader):
    """A stream reader that also tells when the connection ends (end of file, or an error:
    a reset, a failed write), even while nobody reads: the link must notice while paused."""

    def __init__(self, on_end: Callable[[], None]) -> None:
        super().__init__(limit=READ_CHUNK)
        self._on_end = on_end
        self.ended = False
        """Whether the connection has ended (what is buffered may still be read)."""

    def feed_eof(self) -> None:
        """The peer closed its side, or the connection was lost without an error."""
        super().feed_eof()
        self._end()

    def set_exception(self, exc: Exception) -> None:
        """The connection was lost with an error."""
        super().set_exception(exc)
        self._end()

    def _end(self) -> None:
        self.ended = True
        self._on_end()


async def _open(
    host: str, port: int, context: ssl.SSLContext | None, on_end: Callable[[], None]
) -> tuple[_Reader, asyncio.StreamWriter]:
    """`asyncio.open_connection` with a `_Reader`."""
    loop = asyncio.get_running_loop()
    reader = _Reader(on_end)
    protocol = asyncio.StreamReaderProtocol(reader)
    transport, _ = await loop.create_connection(lambda: protocol, host, port, ssl=context)
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


class BrokerLink:
    """One connection; `connect`, then `run` until it ends."""

    def __init__(
        self,
        config: MqttBridgeConfig,
        session: ClientSession,
        on_message: Callable[[BrokerLink, Publish], None],
        on_release: Callable[[list[int]], None],
        publishes: dict[int, asyncio.Future[PublishDone]],
        *,
        max_pending: int,
        identifier: str | None = None,
    ) -> None:
        self.config = config
        self.identifier = identifier or config.identifier
        """The MQTT client identifier this link connects with."""
        self.session = session
        self._on_message = on_message
        self._on_release = on_release
        self._max_pending = max_pending
        self.pending = 0
        """Messages handed to ``on_message`` and not yet acknowledged (`settle`)."""
        self._stirred = asyncio.Event()
        """Set when a paused link may have to act: a message was settled, or the connection
        ended."""
        self._reader: _Reader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.connection: MQTTClientConnection | None = None
        self.connected: Connected | None = None
        self._publishes = publishes
        """Waiters for the broker's PUBACK/PUBCOMP, by packet id: the session's, so they
        outlive this link (the next one sends the message again and settles them)."""
        self._subscribes: dict[int, asyncio.Future[tuple[int, ...]]] = {}
        self._room = asyncio.Event()
        """Set when a QoS 1/2 publish may fit the broker's receive maximum."""
        self.closed_reason: str | None = None

    # -- lifetime ---------------------------------------------------------------------------

    async def connect(self) -> Connected:
        """Open the socket, send CONNECT and wait for CONNACK; `LinkClosed` if refused."""
        config = self.config
        address = config.address
        username, password = config.login
        properties = None
        if config.protocol == 5:
            properties = Properties(
                session_expiry_interval=config.session_expiry_s,
                receive_maximum=config.receive_maximum,
                maximum_packet_size=config.max_packet,
            )
        packet = Connect(
            self.identifier,
            keepalive=config.keepalive_s,
            clean_start=False,
            username=username,
            password=password.encode() if password is not None else None,
            properties=properties,
            version=config.protocol,
        )
        context = tls_context(config)
        where = f"{address.host}:{address.port}"
        try:
            self._reader, self._writer = await asyncio.wait_for(
                _open(address.host, address.port, context, self._stirred.set),
                config.connect_timeout_s,
            )
        except ssl.SSLCertVerificationError as exc:
            trust = f"the ca_file {config.ca_file!r}" if config.ca_file else "the system's CAs"
            raise LinkClosed(
                f"the certificate of the broker {where} failed verification against {trust}: {exc}"
            ) from exc
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise LinkClosed(f"cannot reach the broker {where}: {exc}") from exc
        self.connection = MQTTClientConnection(
            packet,
            self.session,
            max_packet=config.max_packet,
            connect_timeout_s=config.connect_timeout_s,
            now=time.monotonic(),
        )
        self._flush()
        while self.connected is None:
            await self._read_once()
        return self.connected

    async def run(self) -> None:
        """Read until the connection ends; raises `LinkClosed` with the reason. While
        `paused`, keep the connection alive and watch for its end instead of reading."""
        while True:
            if self.paused:
                await self._wait_paused()
            else:
                await self._read_once()

    @property
    def paused(self) -> bool:
        """Whether reading has stopped: the bridge holds `max_pending` messages."""
        return self.pending >= self._max_pending

    async def _wait_paused(self) -> None:
        """Wait, without reading, until a message is settled, the connection ends (raises
        `LinkClosed`) or the keep-alive is due (PINGREQ goes out)."""
        connection = self.connection
        assert connection is not None and self._reader is not None
        self._stirred.clear()
        if self._reader.ended:
            # Whatever is still buffered was not acknowledged: the broker sends it again.
            cause = self._reader.exception()
            reason = f"broke: {cause}" if cause is not None else "was closed by the broker"
            self._lost(f"the connection {reason} while the bridge was full (not reading)")
        if not self.paused:
            return
        timer = connection.get_timer()
        timeout = None if timer is None else max(0.0, timer - time.monotonic())
        try:
            async with asyncio.timeout(timeout):
                await self._stirred.wait()
        except TimeoutError:
            self._dispatch(connection.handle_timer(time.monotonic(), reading=False))

    async def _read_once(self) -> None:
        connection = self.connection
        assert connection is not None and self._reader is not None
        timer = connection.get_timer()
        timeout = None if timer is None else max(0.0, timer - time.monotonic())
        try:
            # asyncio.timeout, not wait_for: no inner task, so a cancelled link stops at once.
            async with asyncio.timeout(timeout):
                data = await self._reader.read(READ_CHUNK)
        except TimeoutError:
            self._dispatch(connection.handle_timer(time.monotonic()))
            return
        except (OSError, ssl.SSLError) as exc:
            self._lost(self._broken(f"the connection to the broker broke: {exc}", exc))
        if not data:
            self._lost(self._broken("the broker closed the connection", None))
        self._dispatch(connection.receive_data(data, time.monotonic()))

    def _broken(self, reason: str, exc: OSError | None) -> str:
        """Why the connection ended, for a TLS one that ended before CONNACK: under TLS 1.3
        the broker checks the client certificate after the handshake, so its refusal (an
        alert: certificate required, unknown CA; or a reset, when the CONNECT crossed it)
        comes instead of the CONNACK."""
        if self.connected is not None or not self.config.address.tls:
            return reason
        if isinstance(exc, ssl.SSLError):
            return f"the broker refused the TLS connection before CONNACK: {exc}"
        cert = self.config.cert_file
        hint = (
            "the bridge has none (cert_file, key_file)"
            if cert is None
            else f"it may have refused the cert_file {cert!r}"
        )
        cause = f": {exc}" if exc is not None else ""
        return (
            f"the broker ended the TLS connection before CONNACK{cause} "
            f"(if it requires a client certificate, {hint})"
        )

    def _lost(self, reason: str) -> None:
        if self.connection is not None:
            self.connection.connection_lost()
        self._fail_waiters(reason)
        raise LinkClosed(reason)

    def close(self) -> None:
        """Close the socket (without DISCONNECT: the session stays, as after a crash)."""
        if self._writer is not None:
            self._writer.close()
        if self.connection is not None:
            self.connection.connection_lost()
        self._fail_waiters(self.closed_reason or "the link was closed")

    async def disconnect(self) -> None:
        """Send DISCONNECT (normal) and close."""
        if self.connection is not None and not self.connection.closed:
            self.connection.disconnect()
            self._flush()
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await self._writer.wait_closed()
        self.close()

    # -- events -----------------------------------------------------------------------------

    def _dispatch(self, events: Sequence[object]) -> None:
        released: list[int] = []
        for event in events:
            if isinstance(event, MessageReceived):
                self.pending += 1
                self._on_message(self, event.message)
            elif isinstance(event, MessageReleased):
                released.append(event.packet_id)
            elif isinstance(event, PublishDone):
                publish = self._publishes.pop(event.packet_id, None)
                if publish is not None and not publish.done():
                    publish.set_result(event)
                self._room.set()
            elif isinstance(event, Subscribed):
                subscribe = self._subscribes.pop(event.packet_id, None)
                if subscribe is not None and not subscribe.done():
                    subscribe.set_result(event.reason_codes)
            elif isinstance(event, Unsubscribed):
                pass
            elif isinstance(event, Connected):
                self.connected = event
            elif isinstance(event, ConnectionClosed):
                self._flush()
                self.closed_reason = event.reason
                self._lost(event.reason)
        if released:
            # Before the PUBCOMPs queued with them go out, below.
            self._on_release(released)
        self._flush()

    def _fail_waiters(self, reason: str) -> None:
        for waiter in self._subscribes.values():
            if not waiter.done():
                waiter.set_exception(LinkClosed(reason))
        self._subscribes.clear()
        self._room.set()  # publishers waiting for room find the link closed

    def _flush(self) -> None:
        if self.connection is None or self._writer is None:
            return
        data = self.connection.data_to_send()
        if data and not self._writer.is_closing():
            self._writer.write(data)

    # -- calls ------------------------------------------------------------------------------

    def settle(self, message: Publish, reason_code: int = 0, *, flush: bool = True) -> None:
        """Acknowledge a message handed over (nothing to send at QoS 0); reading resumes
        once fewer than `max_pending` are held. ``flush=False`` leaves the acknowledgement
        queued for one `flush` after a batch: one write for many."""
        self.pending -= 1
        if not self.paused:
            self._stirred.set()
        connection = self.connection
        if connection is not None and not connection.closed:
            connection.ack(message, reason_code)
            if flush:
                self._flush()

    def flush(self) -> None:
        """Write what the connection has queued."""
        self._flush()

    async def subscribe(
        self, subscriptions: list[Subscription], identifier: int | None = None
    ) -> tuple[int, ...]:
        """SUBSCRIBE (with an MQTT 5 subscription identifier, if given) and wait for the
        SUBACK's reason codes."""
        connection = self._live()
        properties = None
        if identifier is not None:
            properties = Properties(subscription_identifiers=(identifier,))
        packet_id = connection.subscribe(subscriptions, properties)
        waiter: asyncio.Future[tuple[int, ...]] = asyncio.get_running_loop().create_future()
        self._subscribes[packet_id] = waiter
        self._flush()
        return await waiter

    def unsubscribe(self, filters: list[str]) -> None:
        """UNSUBSCRIBE (the broker's answer is not waited for)."""
        self._live().unsubscribe(filters)
        self._flush()

    @property
    def subscription_identifiers(self) -> bool:
        """Whether the broker takes MQTT 5 subscription identifiers on this connection."""
        connected = self.connected
        if connected is None or self.config.protocol != 5:
            return False
        return connected.properties.subscription_identifier_available != 0

    async def publish(
        self,
        topic: str,
        payload: bytes,
        *,
        qos: int,
        retain: bool = False,
        properties: Properties | None = None,
    ) -> asyncio.Future[PublishDone] | None:
        """Publish; at QoS 1/2 a future the broker's acknowledgement settles (a
        `PublishDone`), which survives a reconnection: the session sends the message again.
        Waits for room when the broker's receive maximum is reached."""
        while qos and not self._live().can_publish:
            self._room.clear()
            await self._room.wait()
        connection = self._live()
        packet_id = connection.publish(
            topic, payload, qos=qos, retain=retain, properties=properties, now=time.monotonic()
        )
        self._flush()
        if packet_id is None:
            return None
        waiter: asyncio.Future[PublishDone] = asyncio.get_running_loop().create_future()
        self._publishes[packet_id] = waiter
        return waiter

    def _live(self) -> MQTTClientConnection:
        connection = self.connection
        if connection is None or connection.closed:
            raise LinkClosed(self.closed_reason or "not connected to the broker")
        return connection

    async def drain(self) -> None:
        """Wait until the socket's write buffer has room."""
        if self._writer is not None and not self._writer.is_closing():
            try:
                await self._writer.drain()
            except (OSError, ssl.SSLError) as exc:
                raise LinkClosed(f"the connection to the broker broke: {exc}") from exc


async def settled(waiter: asyncio.Future[PublishDone] | None) -> None:
    """Wait for a publish's acknowledgement; `PublishRefused` if the broker said no."""
    if waiter is not None:
        done = await waiter
        if done.reason_code >= 0x80:
            raise PublishRefused(done.reason_code, done.reason)

"""`RSocketServerConnection`: setup, the four interaction models, credit by request n,
fragments, keep-alive and lifetime, lease, and what ends a connection."""

from __future__ import annotations

import pytest

from airlane.wire.rsocket import (
    ErrorCode,
    Frame,
    FrameReader,
    FrameType,
    decode_frame,
    encode_frame,
    frame_with_length,
)
from airlane.wire.rsocket.connection import (
    Cancelled,
    ConnectionClosed,
    Interaction,
    KeepAliveReceived,
    NoCredit,
    PayloadReceived,
    RequestN,
    RequestReceived,
    ResumeRequested,
    RSocketServerConnection,
    SetupReceived,
    StreamError,
)
from airlane.wire.rsocket.frames import (
    FLAG_COMPLETE,
    FLAG_FOLLOWS,
    FLAG_LEASE,
    FLAG_NEXT,
    FLAG_RESPOND,
)

SETUP = Frame(FrameType.SETUP, keepalive_ms=60_000, lifetime_ms=85_714,
              metadata_mime="message/x.rsocket.composite-metadata.v0",
              data_mime="application/json")  # fmt: skip


def wire(*frames: Frame) -> bytes:
    return b"".join(frame_with_length(frame) for frame in frames)


def sent(connection: RSocketServerConnection) -> list[Frame]:
    reader = FrameReader()
    return [frame for chunk in connection.data_to_send() for frame in reader.feed(chunk)]


def open_connection(setup: Frame = SETUP) -> RSocketServerConnection:
    connection = RSocketServerConnection()
    events = connection.receive_data(wire(setup), now=0.0)
    assert isinstance(events[0], SetupReceived)
    return connection


def test_a_request_stream_is_sent_no_more_than_its_credit() -> None:
    connection = open_connection()
    request = Frame(FrameType.REQUEST_STREAM, 1, request_n=2, data=b'{"model":"m"}')
    (event,) = connection.receive_data(wire(request), 0.1)
    assert isinstance(event, RequestReceived) and event.interaction is Interaction.STREAM
    connection.send_payload(1, b"a")
    connection.send_payload(1, b"b")
    with pytest.raises(NoCredit):
        connection.send_payload(1, b"c")
    (more,) = connection.receive_data(wire(Frame(FrameType.REQUEST_N, 1, request_n=1)), 0.2)
    assert more == RequestN(1, 1, 1)
    connection.send_payload(1, b"c", complete=True)
    payloads = sent(connection)
    assert [p.data for p in payloads] == [b"a", b"b", b"c"]
    assert payloads[-1].has(FLAG_COMPLETE) and all(p.has(FLAG_NEXT) for p in payloads)
    assert connection.credit(1) == 0  # over


def test_response_fire_and_forget_channel_and_cancel() -> None:
    connection = open_connection()
    events = connection.receive_data(
        wire(
            Frame(FrameType.REQUEST_RESPONSE, 1, data=b"snapshot"),
            Frame(FrameType.REQUEST_FNF, 3, data=b"telemetry"),
            Frame(FrameType.REQUEST_CHANNEL, 5, request_n=10, data=b"session"),
        ),
        0.1,
    )
    connection.request_n(5, 1)  # the channel's client may send one more payload
    (granted,) = sent(connection)
    assert granted.type is FrameType.REQUEST_N and granted.request_n == 1
    events += connection.receive_data(
        wire(
            Frame(FrameType.PAYLOAD, 5, FLAG_NEXT, data=b"publish"),
            Frame(FrameType.PAYLOAD, 5, FLAG_COMPLETE),
            Frame(FrameType.REQUEST_STREAM, 7, request_n=5),
            Frame(FrameType.CANCEL, 7),
        ),
        0.1,
    )
    kinds = [getattr(e, "interaction", type(e).__name__) for e in events]
    assert kinds == [
        Interaction.RESPONSE, Interaction.FIRE_AND_FORGET, Interaction.CHANNEL,
        "PayloadReceived", "PayloadReceived", Interaction.STREAM, "Cancelled",
    ]  # fmt: skip
    assert events[-1] == Cancelled(7) and isinstance(events[3], PayloadReceived)
    assert events[4] == PayloadReceived(5, None, b"", next=False, complete=True)
    connection.send_payload(1, b"answer")  # a response ends its stream
    assert connection.credit(1) == 0 and connection.credit(3) == 0
    with pytest.raises(NoCredit):
        connection.send_payload(7, b"cancelled")
    (answer,) = sent(connection)
    assert answer.has(FLAG_COMPLETE) and answer.data == b"answer"


def test_a_channel_payload_past_the_credit_granted_ends_the_stream() -> None:
    connection = open_connection()
    connection.receive_data(wire(Frame(FrameType.REQUEST_CHANNEL, 1, request_n=4)), 0.1)
    events = connection.receive_data(wire(Frame(FrameType.PAYLOAD, 1, FLAG_NEXT, data=b"x")), 0.2)
    assert events == [StreamError(1, ErrorCode.INVALID, "payload past credit")]
    (error,) = sent(connection)
    assert error.type is FrameType.ERROR and error.error_code == ErrorCode.INVALID
    assert connection.closed is None and not connection.is_open(1)


def test_fragments_are_joined_and_large_payloads_fragmented() -> None:
    connection = RSocketServerConnection(max_frame=1024)
    connection.receive_data(wire(SETUP), 0.0)
    parts = [
        Frame(FrameType.REQUEST_STREAM, 1, FLAG_FOLLOWS, request_n=3, metadata=b"ro", data=b"ab"),
        Frame(FrameType.PAYLOAD, 1, FLAG_FOLLOWS, metadata=b"ute", data=b"cd"),
        Frame(FrameType.PAYLOAD, 1, 0, data=b"ef"),
    ]
    (event,) = connection.receive_data(wire(*parts), 0.1)
    assert isinstance(event, RequestReceived)
    assert (event.metadata, event.data, event.initial_n) == (b"route", b"abcdef", 3)
    connection.send_payload(1, bytes(3000), metadata=b"m")
    pieces = sent(connection)
    assert len(pieces) == 4 and all(p.has(FLAG_FOLLOWS) for p in pieces[:-1])
    assert b"".join(p.data for p in pieces) == bytes(3000) and pieces[0].metadata == b"m"


def test_keepalive_is_answered_and_silence_past_the_lifetime_closes() -> None:
    connection = open_connection()
    (event,) = connection.receive_data(wire(Frame(FrameType.KEEPALIVE, flags=FLAG_RESPOND)), 30)
    assert isinstance(event, KeepAliveReceived)
    (answer,) = sent(connection)
    assert answer.type is FrameType.KEEPALIVE and not answer.has(FLAG_RESPOND)
    assert connection.get_timer() == pytest.approx(30 + 85.714)
    assert connection.handle_timer(60.0) == []
    (closed,) = connection.handle_timer(116.0)
    assert isinstance(closed, ConnectionClosed) and closed.code == ErrorCode.CONNECTION_ERROR
    (error,) = sent(connection)
    assert error.type is FrameType.ERROR and error.stream_id == 0


def test_a_lease_bounds_requests_when_the_client_asked_for_one() -> None:
    connection = open_connection(
        Frame(
            FrameType.SETUP,
            flags=FLAG_LEASE,
            keepalive_ms=1000,
            lifetime_ms=5000,
            metadata_mime="a",
            data_mime="b",
        )
    )
    assert connection.receive_data(wire(Frame(FrameType.REQUEST_RESPONSE, 1)), 0.1) == []
    (refused,) = sent(connection)
    assert refused.type is FrameType.ERROR and refused.error_code == ErrorCode.REJECTED
    connection.grant_lease(ttl_ms=1000, requests=1, now=0.2)
    assert sent(connection)[0].type is FrameType.LEASE
    assert len(connection.receive_data(wire(Frame(FrameType.REQUEST_RESPONSE, 3)), 0.3)) == 1
    assert connection.receive_data(wire(Frame(FrameType.REQUEST_RESPONSE, 5)), 0.4) == []


@pytest.mark.parametrize(
    ("frames", "code"),
    [
        ([Frame(FrameType.REQUEST_RESPONSE, 1)], ErrorCode.INVALID_SETUP),
        (
            [
                Frame(
                    FrameType.SETUP, keepalive_ms=0, lifetime_ms=1, metadata_mime="a", data_mime="b"
                )
            ],
            ErrorCode.INVALID_SETUP,
        ),
        (
            [
                Frame(
                    FrameType.SETUP,
                    version=(2, 0),
                    keepalive_ms=1,
                    lifetime_ms=1,
                    metadata_mime="a",
                    data_mime="b",
                )
            ],
            ErrorCode.UNSUPPORTED_SETUP,
        ),
        ([SETUP, Frame(FrameType.REQUEST_STREAM, 2, request_n=1)], ErrorCode.CONNECTION_ERROR),
        (
            [SETUP, Frame(FrameType.REQUEST_FNF, 3), Frame(FrameType.REQUEST_FNF, 3)],
            ErrorCode.CONNECTION_ERROR,
        ),
        ([SETUP, SETUP], ErrorCode.CONNECTION_ERROR),
    ],
    ids=["no setup", "zero keep-alive", "version 2", "even stream", "reused id", "setup twice"],
)
def test_violations_close_with_the_right_code(frames: list[Frame], code: ErrorCode) -> None:
    connection = RSocketServerConnection()
    events = connection.receive_data(wire(*frames), 0.0)
    assert isinstance(events[-1], ConnectionClosed) and events[-1].code == code
    error = sent(connection)[-1]
    assert error.type is FrameType.ERROR and error.stream_id == 0 and error.error_code == code
    assert connection.receive_data(wire(SETUP), 1.0) == []  # closed: nothing more


def test_garbage_bytes_close_without_raising() -> None:
    connection = RSocketServerConnection(max_frame=1 << 16)
    events = connection.receive_data(b"\xff\xff\xff" + bytes(10), 0.0)
    assert isinstance(events[0], ConnectionClosed)
    ws = RSocketServerConnection(framed=False)
    (closed,) = ws.receive_frame(b"\x00\x01", 0.0)
    assert isinstance(closed, ConnectionClosed)


RESUMABLE_SETUP = Frame(FrameType.SETUP, flags=0x80, keepalive_ms=60_000, lifetime_ms=120_000,
                        resume_token=b"token-1", metadata_mime=SETUP.metadata_mime,
                        data_mime=SETUP.data_mime)  # fmt: skip


def test_a_resumable_session_continues_on_a_new_connection_from_the_clients_position() -> None:
    connection = RSocketServerConnection(framed=True)
    connection.receive_data(wire(RESUMABLE_SETUP, Frame(FrameType.REQUEST_STREAM, 1,
                                                        request_n=10)), 0.0)  # fmt: skip
    assert connection.resume_token == b"token-1"
    received = connection.received_position
    assert received > 0  # the request counted
    for n in range(6):
        connection.send_payload(1, f"event {n}".encode())
    frames = sent(connection)
    sizes = [len(encode_frame(f)) for f in frames]
    assert connection.sent_position == sum(sizes)
    # The client acknowledges the first two with a KEEPALIVE, then the link drops after it
    # got four: RESUME on a WebSocket says so.
    connection.receive_data(wire(Frame(FrameType.KEEPALIVE, position=sum(sizes[:2]))), 1.0)
    request = ResumeRequested(b"token-1", sum(sizes[:4]), received)
    assert connection.resume(request, 2.0, framed=False)
    resumed = [decode_frame(data) for data in connection.data_to_send()]
    assert resumed[0].type is FrameType.RESUME_OK and resumed[0].position == received
    assert [f.data for f in resumed[1:]] == [b"event 4", b"event 5"]
    # It goes on where it was: credit and all.
    connection.send_payload(1, b"event 6")
    (after,) = [decode_frame(data) for data in connection.data_to_send()]
    assert after.data == b"event 6" and connection.credit(1) == 3


def test_a_request_cut_between_its_fragments_goes_on_after_resuming() -> None:
    # The fragments that arrived count in the position RESUME_OK reports, so the client sends
    # only the rest again: they must still be there to be joined with it.
    connection = RSocketServerConnection(framed=True, max_frame=1024)
    connection.receive_data(wire(RESUMABLE_SETUP), 0.0)
    first = Frame(FrameType.REQUEST_STREAM, 1, FLAG_FOLLOWS, request_n=2, metadata=b"ro",
                  data=b"ab")  # fmt: skip
    assert connection.receive_data(wire(first), 0.1) == []
    received = connection.received_position
    assert connection.resume(ResumeRequested(b"token-1", 0, received), 1.0, framed=True)
    (ok,) = sent(connection)
    assert ok.type is FrameType.RESUME_OK and ok.position == received
    (event,) = connection.receive_data(wire(Frame(FrameType.PAYLOAD, 1, 0, data=b"cd")), 1.1)
    assert isinstance(event, RequestReceived)
    assert (event.stream_id, event.metadata, event.data) == (1, b"ro", b"abcd")


def test_a_session_resumes_only_from_a_position_it_kept() -> None:
    connection = RSocketServerConnection(max_retained=100)
    connection.receive_data(wire(RESUMABLE_SETUP, Frame(FrameType.REQUEST_STREAM, 1,
                                                        request_n=50)), 0.0)  # fmt: skip
    connection.send_payload(1, b"x" * 40)
    first = connection.sent_position
    connection.send_payload(1, b"y" * 40)
    connection.data_to_send()
    ahead = ResumeRequested(b"token-1", connection.sent_position + 1, 0)
    gap = ResumeRequested(b"token-1", 0, connection.received_position + 1)
    assert not connection.resume(ahead, 1.0, framed=True)
    assert not connection.resume(gap, 1.0, framed=True)
    assert connection.data_to_send() == []
    connection.send_payload(1, b"z" * 40)  # past 100 bytes unacknowledged: no resuming now
    assert connection.resume_lost
    assert not connection.resume(ResumeRequested(b"token-1", first, 0), 1.0, framed=True)


def test_a_session_without_a_token_keeps_nothing() -> None:
    connection = open_connection()
    connection.receive_data(wire(Frame(FrameType.REQUEST_STREAM, 1, request_n=5)), 0.0)
    connection.send_payload(1, b"x")
    assert connection.resume_token is None and connection.sent_position == 0
    assert not connection.resume(ResumeRequested(b"", 0, 0), 1.0, framed=True)


def test_a_request_past_max_streams_is_rejected_and_the_connection_goes_on() -> None:
    connection = RSocketServerConnection(max_streams=2)
    connection.receive_data(wire(SETUP), 0.0)
    requests = [Frame(FrameType.REQUEST_STREAM, n, request_n=1, data=b"x") for n in (1, 3, 5)]
    events = connection.receive_data(wire(*requests), 0.1)
    assert [e.stream_id for e in events if isinstance(e, RequestReceived)] == [1, 3]
    (error,) = sent(connection)
    assert (error.type, error.stream_id, error.error_code) == (FrameType.ERROR, 5,
                                                               ErrorCode.REJECTED)  # fmt: skip
    assert error.data == b"too many streams open"
    assert connection.closed is None
    connection.send_payload(1, b"done", complete=True)  # one ends: room for another
    sent(connection)
    (again,) = connection.receive_data(wire(Frame(FrameType.REQUEST_STREAM, 7, request_n=1)), 0.2)
    assert isinstance(again, RequestReceived) and again.stream_id == 7


def test_a_message_past_max_message_in_fragments_closes_the_connection() -> None:
    connection = RSocketServerConnection(max_frame=1024, max_message=2048)
    connection.receive_data(wire(SETUP), 0.0)
    fragments = [
        Frame(FrameType.REQUEST_RESPONSE, 1, FLAG_FOLLOWS, data=bytes(1000)),
        Frame(FrameType.PAYLOAD, 1, FLAG_FOLLOWS, data=bytes(1000)),
        Frame(FrameType.PAYLOAD, 1, 0, data=bytes(1000)),  # 3,000 bytes joined
    ]
    events = connection.receive_data(wire(*fragments), 0.1)
    closed = [e for e in events if isinstance(e, ConnectionClosed)]
    assert closed and closed[0].code == ErrorCode.CONNECTION_ERROR
    assert "over 2048 bytes" in closed[0].message
    (error,) = sent(connection)
    assert (error.type, error.stream_id) == (FrameType.ERROR, 0)
    assert error.error_code == ErrorCode.CONNECTION_ERROR

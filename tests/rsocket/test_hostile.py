"""RSocket's promises under a client that does not play along: credit honoured frame by frame,
memory flat under slow readers, garbage and truncated frames answered with an ERROR and a close
(never a traceback, and the server keeps serving), a silent client timed out, what the server
does not speak refused in SETUP, credentials checked in SETUP and per request."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from airlane.wire.rsocket import ErrorCode, Frame, FrameType, frame_with_length
from tests.hostile.memory import rss_mib
from tests.rsocket.conftest import API_KEY
from tests.rsocket.raw import RawPeer, metadata, raw_peer, setup_frame
from tests.servers import ServerProcess, run_server

pytestmark = pytest.mark.timeout(120)

FLAG_NEXT, FLAG_COMPLETE = 0x20, 0x40
UNBOUNDED = (1 << 31) - 1


@pytest.fixture(scope="module")
def log_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("log") / "server.log"


@pytest.fixture(scope="module")
def server(log_file: Path) -> Iterator[ServerProcess]:
    """A gateway whose log is kept, with a 2 s SETUP timeout and an API key."""
    config = (
        "[synthetic]\nttft_ms = 1.0\nitl_ms = 0.5\n\n"
        "[rsocket]\nsetup_timeout_s = 2.0\nresume_keep_s = 0.5\n"
    )
    with log_file.open("w") as log, run_server("--api-key", API_KEY, config=config,
                                               stderr=log) as running:  # fmt: skip
        yield running
    assert "Traceback" not in log_file.read_text()


def address(server: ServerProcess) -> tuple[str, int]:
    assert server.rsocket is not None
    return server.rsocket


async def works(server: ServerProcess) -> None:
    """The server still answers a well-formed request."""
    async with raw_peer(*address(server), setup_frame(auth=API_KEY)) as peer:
        peer.request(FrameType.REQUEST_RESPONSE, 1, "streams.info", {"stream_id": "nothing"})
        frame = await peer.next()
        assert frame is not None and frame.type is FrameType.ERROR
        assert frame.data.decode().startswith("stream_not_found"), frame


async def publish(server: ServerProcess, stream_id: str, bodies: list[dict[str, object]]) -> None:
    """Append message events to ``stream_id``, each confirmed."""
    async with raw_peer(*address(server), setup_frame(auth=API_KEY)) as writer:
        for n, body in enumerate(bodies):
            request = {"stream_id": stream_id, "event": {"payload": body}}
            writer.request(FrameType.REQUEST_RESPONSE, 2 * n + 1, "streams.publish", request)
            answer = await writer.next()
            assert answer is not None and answer.type is FrameType.PAYLOAD, answer


async def test_a_client_granting_one_at_a_time_gets_one_at_a_time(server: ServerProcess) -> None:
    await publish(server, "counted", [{"n": n} for n in range(60)])
    async with raw_peer(*address(server), setup_frame(auth=API_KEY)) as peer:
        peer.request(FrameType.REQUEST_STREAM, 1, "streams.subscribe", {"stream_id": "counted"},
                     n=1)  # fmt: skip
        payloads = []
        for _ in range(40):
            frame = await peer.next()
            assert frame is not None and frame.type is FrameType.PAYLOAD, frame
            payloads.append(frame)
            assert await peer.quiet(0.03) == []  # nothing past the one granted
            peer.send(Frame(FrameType.REQUEST_N, 1, request_n=1))
        peer.send(Frame(FrameType.REQUEST_N, 1, request_n=UNBOUNDED))
        while len(payloads) < 60:
            frame = await peer.next()
            assert frame is not None and frame.type is FrameType.PAYLOAD, frame
            payloads.append(frame)
    events = [orjson.loads(p.data) for p in payloads]
    assert [e["seq"] for e in events] == list(range(1, 61))
    assert [e["payload"]["n"] for e in events] == list(range(60))


async def test_slow_readers_cost_the_server_no_memory(server: ServerProcess) -> None:
    """Thirty readers of a 10 MB stream that take one event each and no more: the server
    reads for each only what it may send, so its memory does not grow with the stream."""
    await publish(server, "big", [{"blob": "x" * 50_000, "n": n} for n in range(200)])
    before = rss_mib(server.pid)
    peers: list[RawPeer] = []
    opened = []
    try:
        for _ in range(30):
            context = raw_peer(*address(server), setup_frame(auth=API_KEY))
            peer = await context.__aenter__()
            opened.append(context)
            peers.append(peer)
            peer.request(FrameType.REQUEST_STREAM, 1, "streams.subscribe", {"stream_id": "big"},
                         n=1)  # fmt: skip
        for peer in peers:
            first = await peer.next()
            assert first is not None and first.type is FrameType.PAYLOAD
            assert await peer.quiet(0.05) == []
        grown = rss_mib(server.pid) - before
    finally:
        for context in opened:
            await context.__aexit__(None, None, None)
    # Buffering the stream per reader would take 30 x 10 MB; one event each is ~1.5 MB.
    assert grown < 60, f"the server grew by {grown:.0f} MiB for 30 slow readers"


def _garbage(rng: random.Random) -> bytes:
    """A random frame, a truncated one, a lie about a length, or plain noise."""
    choice = rng.randrange(5)
    if choice == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    if choice == 1:  # a length prefix that promises more than follows, then the close
        return (rng.randrange(7, 5000)).to_bytes(3, "big") + b"\x00\x00\x00\x01\x04"
    good = frame_with_length(
        Frame(FrameType.REQUEST_RESPONSE, 1, metadata=metadata("streams.info"), data=b"{}")
    )
    if choice == 2:  # a frame cut short inside its body, with an honest prefix
        body = good[3 : 3 + rng.randrange(1, len(good) - 3)]
        return len(body).to_bytes(3, "big") + body
    if choice == 3:  # a valid frame with random bytes flipped
        flipped = bytearray(good)
        for _ in range(rng.randrange(1, 4)):
            flipped[rng.randrange(3, len(flipped))] = rng.randrange(256)
        return bytes(flipped)
    # A frame of a random type with random flags on stream 0 or a random stream.
    header = rng.choice([0, 1, 2, 3, 1 << 30]).to_bytes(4, "big")
    type_flags = ((rng.randrange(0x40) << 10) | rng.randrange(1 << 10)).to_bytes(2, "big")
    body = header + type_flags + bytes(rng.randrange(256) for _ in range(rng.randrange(12)))
    return len(body).to_bytes(3, "big") + body


async def test_garbage_gets_an_error_and_a_close_never_a_traceback(server: ServerProcess) -> None:
    rng = random.Random(20261204)
    errors = 0
    for case in range(120):
        setup = setup_frame(auth=API_KEY) if case % 2 else None  # before SETUP, and after
        async with raw_peer(*address(server), setup) as peer:
            peer.send_bytes(_garbage(rng))
            if case % 3 == 0:
                peer.writer.write_eof()  # and the rest never comes
            frames = await peer.quiet(0.3)
        for frame in frames:
            assert frame.type in (FrameType.ERROR, FrameType.PAYLOAD, FrameType.LEASE), frame
        errors += sum(f.type is FrameType.ERROR for f in frames)
    assert errors > 40  # most garbage is answered in words, not silence
    await works(server)


async def test_a_client_that_never_sets_up_is_closed(server: ServerProcess) -> None:
    async with raw_peer(*address(server)) as peer:
        frame = await peer.next(timeout=5)
        assert frame is not None and frame.type is FrameType.ERROR and frame.stream_id == 0
        assert frame.error_code == ErrorCode.INVALID_SETUP and b"SETUP" in frame.data
        assert await peer.next() is None


@pytest.mark.parametrize(
    ("setup", "code", "words"),
    [
        (setup_frame(data_mime="text/csv"), ErrorCode.UNSUPPORTED_SETUP, b"text/csv"),
        (setup_frame(metadata_mime="text/plain"), ErrorCode.UNSUPPORTED_SETUP, b"composite"),
        (setup_frame(auth="wrong-key"), ErrorCode.REJECTED_SETUP, b"unauthenticated"),
        (Frame(FrameType.SETUP, keepalive_ms=0, lifetime_ms=1, metadata_mime="a", data_mime="b"),
         ErrorCode.INVALID_SETUP, b"keep-alive"),
        (Frame(FrameType.RESUME, resume_token=b"t"), ErrorCode.REJECTED_RESUME, b"subscribe"),
    ],
    ids=["data-mime", "metadata-mime", "bad-key", "no-keepalive", "resume"],
)  # fmt: skip
async def test_what_setup_cannot_have_is_refused(
    server: ServerProcess, setup: Frame, code: ErrorCode, words: bytes
) -> None:
    async with raw_peer(*address(server), setup) as peer:
        frame = await peer.next()
        assert frame is not None and frame.type is FrameType.ERROR and frame.stream_id == 0
        assert frame.error_code == code and words in frame.data, frame
        assert await peer.next() is None
    await works(server)


async def test_credentials_in_setup_or_per_request(server: ServerProcess) -> None:
    async with raw_peer(*address(server), setup_frame()) as peer:  # no credentials
        peer.request(FrameType.REQUEST_RESPONSE, 1, "streams.info", {"stream_id": "big"})
        refused = await peer.next()
        assert refused is not None and refused.type is FrameType.ERROR
        assert refused.error_code == ErrorCode.REJECTED
        assert refused.data.startswith(b"unauthenticated")
        # The same connection, with the key in the request's own metadata.
        peer.send(Frame(FrameType.REQUEST_RESPONSE, 3, data=b'{"stream_id": "big"}',
                        metadata=metadata("streams.info", token=API_KEY)))  # fmt: skip
        answer = await peer.next()
        assert answer is not None and answer.type is FrameType.PAYLOAD, answer
        assert orjson.loads(answer.data)["id"] == "big"


@pytest.mark.parametrize(
    ("route", "body", "code", "words"),
    [
        ("nowhere", {}, ErrorCode.INVALID, b"unknown_op"),
        ("streams.info", {}, ErrorCode.INVALID, b"stream_id"),
        ("streams.info", [1, 2], ErrorCode.INVALID, b"object"),
        ("streams.info", "not json", ErrorCode.INVALID, b"JSON"),
        ("streams.publish", {"stream_id": "x", "event": {"kind": "snapshot"}},
         ErrorCode.INVALID, b"invalid_event"),
        ("schemas.version", {"subject": "none"}, ErrorCode.APPLICATION_ERROR, b"not_found"),
    ],
)  # fmt: skip
async def test_bad_requests_end_their_stream_and_the_connection_goes_on(
    server: ServerProcess, route: str, body: object, code: ErrorCode, words: bytes
) -> None:
    data = body.encode() if isinstance(body, str) else orjson.dumps(body)
    async with raw_peer(*address(server), setup_frame(auth=API_KEY)) as peer:
        peer.send(Frame(FrameType.REQUEST_RESPONSE, 1, metadata=metadata(route), data=data))
        frame = await peer.next()
        assert frame is not None and frame.type is FrameType.ERROR and frame.stream_id == 1
        assert frame.error_code == code and words in frame.data, frame
        peer.request(FrameType.REQUEST_RESPONSE, 3, "streams.info", {"stream_id": "big"})
        after = await peer.next()
        assert after is not None and after.stream_id == 3


async def test_a_lease_is_granted_and_renewed_when_asked_for(server: ServerProcess) -> None:
    async with raw_peer(*address(server), setup_frame(auth=API_KEY, lease=True)) as peer:
        lease = await peer.next()
        assert lease is not None and lease.type is FrameType.LEASE
        assert lease.lease_requests > 0 and lease.keepalive_ms > 0
        peer.request(FrameType.REQUEST_RESPONSE, 1, "streams.info", {"stream_id": "big"})
        answer = await peer.next()
        assert answer is not None and answer.type is FrameType.PAYLOAD


async def test_requests_behind_a_refused_setup_are_not_served(gateway: ServerProcess) -> None:
    """A SETUP the server refuses and a publish in the same write, to a gateway that lets
    anyone in: the connection is refused and the publish never runs."""
    publish = Frame(
        FrameType.REQUEST_FNF,
        1,
        metadata=metadata("streams.publish"),
        data=orjson.dumps({"stream_id": "behind-setup", "event": {"payload": {}}}),
    )
    async with raw_peer(*address(gateway)) as peer:
        peer.send(setup_frame(data_mime="text/csv"), publish)
        frame = await peer.next()
        assert frame is not None and frame.error_code == ErrorCode.UNSUPPORTED_SETUP
        assert await peer.next() is None
    async with raw_peer(*address(gateway), setup_frame()) as peer:
        peer.request(FrameType.REQUEST_RESPONSE, 1, "streams.info", {"stream_id": "behind-setup"})
        answer = await peer.next()
        assert answer is not None and answer.type is FrameType.ERROR
        assert answer.data.startswith(b"stream_not_found"), answer


async def test_a_dropped_session_waits_for_its_resume_only_so_long(server: ServerProcess) -> None:
    token = b"0123456789abcdef"
    setup = replace(setup_frame(auth=API_KEY), resume_token=token)
    async with raw_peer(*address(server), setup) as peer:
        # A second SETUP may not take a token in use.
        async with raw_peer(*address(server), setup) as thief:
            refused = await thief.next()
            assert refused is not None and refused.error_code == ErrorCode.REJECTED_SETUP
        peer.request(FrameType.REQUEST_STREAM, 1, "streams.subscribe", {"stream_id": "big"},
                     n=1)  # fmt: skip
        assert (await peer.next()) is not None
    await asyncio.sleep(1.5)  # past resume_keep_s: the session is closed, its cursor released
    resume = Frame(FrameType.RESUME, resume_token=token, position=0, first_position=0)
    async with raw_peer(*address(server), resume) as late:
        frame = await late.next()
        assert frame is not None and frame.error_code == ErrorCode.REJECTED_RESUME


async def test_a_frame_past_max_frame_closes_the_connection_with_connection_error(
    server: ServerProcess,
) -> None:
    async with raw_peer(*address(server), setup_frame(auth=API_KEY)) as peer:
        size = (1 << 20) + 1  # [rsocket] max_frame, 1 MiB, plus one
        peer.send_bytes(size.to_bytes(3, "big") + bytes(64))  # refused on its length alone
        frames = await peer.quiet(2.0)
    assert frames and frames[-1].type is FrameType.ERROR and frames[-1].stream_id == 0
    assert frames[-1].error_code == ErrorCode.CONNECTION_ERROR
    assert f"a frame of {size} bytes" in frames[-1].data.decode()
    await works(server)

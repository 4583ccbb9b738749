"""The bench's AIRC rows: `run_airc_stream` over AIRC/TCP and AIRC/WebSocket against a real
gateway (burst and paced, on asyncio's loop and on uvloop), the sans-I/O pieces it stacks
(`AircLoadStream` against a scripted server-side `AircConnection`, `BinaryStreamReader`, the
handshake's subprotocol), and ``airlane bench`` with the AIRC transports."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import socket
from array import array
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import uvloop

from airlane.backends.synthetic import LoadTestChunk
from airlane.bench import BenchConfig
from airlane.bench.airc_load import (
    REQUEST_ID,
    AircLoadStream,
    loadtest_request,
    run_airc_stream,
)
from airlane.bench.chunk import ChunkFormatError, LoadProtocolError
from airlane.bench.config import Mode, airc_address
from airlane.bench.runner import run_transport
from airlane.bench.tally import StreamTally
from airlane.bench.ws_frames import (
    BinaryStreamReader,
    FrameError,
    Opcode,
    client_frame,
    close_payload,
)
from airlane.bench.ws_handshake import ClientHandshake, HandshakeError, accept_value
from airlane.wire.airc import (
    AIRC_SUBPROTOCOL,
    ANY_STREAM,
    LOADTEST_ENCODER,
    AircConnection,
    Close,
    Error,
    ErrorCode,
    GenAck,
    GenRequest,
    GoAway,
    SignalReceived,
)
from tests.cli.conftest import airlane
from tests.servers import ServerProcess

Runner = Callable[[Coroutine[Any, Any, None]], None]
LOOPS: dict[str, Runner] = {"asyncio": asyncio.run, "uvloop": uvloop.run}
ENCODER = LoadTestChunk("airlane-loadtest", b"tests")
KEY = b"dGhlIHNhbXBsZSBub25jZQ=="  # RFC 6455 section 1.3's example
NOW = 1000.0


# -- against a gateway ----------------------------------------------------------------------


def airc_of(server: ServerProcess) -> tuple[str, int]:
    assert server.airc is not None, "the test gateway runs its AIRC/TCP listener"
    return server.airc


def http_of(server: ServerProcess) -> tuple[str, int]:
    parts = urlsplit(server.url)
    return parts.hostname or "", parts.port or 80


@pytest.mark.parametrize("transport", ["airc", "airc-ws"])
@pytest.mark.parametrize("mode", ["burst", "paced"])
def test_every_chunk_arrives_in_order(server: ServerProcess, transport: str, mode: Mode) -> None:
    config = BenchConfig(streams=8, chunks=30, mode=mode, interval_ms=5, timeout_s=30)
    result = uvloop.run(run_transport(config, server.url, transport, airc=airc_of(server)))
    assert result.transport == transport
    assert result.errors == 0, result.error_samples
    assert result.chunks_received == result.chunks_expected == 240
    assert result.streams_completed == 8 and result.out_of_order == 0
    assert result.ttfc_ms.count == 8 and result.lag_ms.count == 240
    assert result.payload_bytes > 1000 * 240
    if mode == "paced":
        assert result.kept_up_pct is not None


@pytest.mark.parametrize("loop", sorted(LOOPS))
@pytest.mark.parametrize("websocket", [False, True], ids=["tcp", "ws"])
def test_each_stream_is_complete(server: ServerProcess, loop: str, websocket: bool) -> None:
    """Per stream: every seq once, in order, a lag each, and the same bytes as /v1/loadtest."""
    host, port = http_of(server) if websocket else airc_of(server)
    request = loadtest_request(BenchConfig(streams=4, chunks=25))
    tallies = [StreamTally(array("q")) for _ in range(4)]

    async def main() -> None:
        deadline = asyncio.get_running_loop().time() + 20
        await asyncio.gather(
            *(
                run_airc_stream(host, port, request, t, deadline, websocket=websocket)
                for t in tallies
            )
        )

    LOOPS[loop](main())
    for tally in tallies:
        assert tally.error is None and tally.finished
        assert tally.received == 25 and tally.disorder == 0 and tally.next_seq == 26
        assert tally.first_ns >= tally.start_ns > 0 and tally.last_ns >= tally.first_ns
        assert len(tally.lags) == 25 and tally.payload_bytes > 1000 * 25


def test_the_default_airc_port_is_the_http_port_plus_one(server: ServerProcess) -> None:
    """Without an AIRC address, ``airc`` dials the HTTP port + 1 (the gateway's default):
    an HTTP URL one below the test gateway's AIRC port finds it."""
    host, port = airc_of(server)
    config = BenchConfig(streams=2, chunks=3, timeout_s=10)
    result = uvloop.run(run_transport(config, f"http://{host}:{port - 1}", "airc"))
    assert result.errors == 0 and result.chunks_received == 6


def test_refused_requests_and_dead_ports_are_stream_errors(server: ServerProcess) -> None:
    host, port = airc_of(server)
    bad = GenRequest(REQUEST_ID, ANY_STREAM, 0, LOADTEST_ENCODER, b'{"chunks": 0}')
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    refused, unreachable = StreamTally(array("q")), StreamTally(array("q"))

    async def main() -> None:
        deadline = asyncio.get_running_loop().time() + 10
        await run_airc_stream(host, port, bad, refused, deadline)
        await run_airc_stream("127.0.0.1", dead, bad, unreachable, deadline)

    uvloop.run(main())
    assert refused.error is not None and "refused the GEN_REQ: invalid_request" in refused.error
    assert not refused.finished and refused.received == 0
    assert unreachable.error is not None and unreachable.error.startswith(("OSError", "Connection"))


def test_a_deadline_ends_a_stream(server: ServerProcess) -> None:
    host, port = airc_of(server)
    slow = loadtest_request(BenchConfig(streams=1, chunks=100, mode="paced", interval_ms=50))
    tally = StreamTally(array("q"))

    async def main() -> None:
        await run_airc_stream(host, port, slow, tally, asyncio.get_running_loop().time() + 0.5)

    uvloop.run(main())
    assert tally.error == "timed out" and not tally.finished and 0 < tally.received < 100


def test_the_encoder_is_the_servers() -> None:
    request = loadtest_request(BenchConfig(chunks=7, mode="paced", interval_ms=3))
    assert request.encoder == LOADTEST_ENCODER and request.requested_stream == ANY_STREAM
    assert request.request_id == 1 and request.sample_rate == 0
    assert json.loads(request.body) == {"chunks": 7, "mode": "paced", "interval_ms": 3.0}


# -- AircLoadStream against a scripted server ---------------------------------------------------


class Scripted:
    """A server-side `AircConnection` talking to an `AircLoadStream`, bytes moved by hand."""

    def __init__(self) -> None:
        self.tally = StreamTally(array("q"))
        self.client = AircLoadStream(self.tally, loadtest_request(BenchConfig()), NOW)
        self.server = AircConnection(now=NOW)
        self.requests: list[GenRequest] = []

    def to_server(self) -> None:
        for event in self.server.receive_data(self.client.data_to_send(NOW), NOW):
            if isinstance(event, SignalReceived) and isinstance(event.message, GenRequest):
                self.requests.append(event.message)

    def to_client(self, *, cuts: int = 1) -> None:
        data = self.server.data_to_send(NOW)
        size = -(-len(data) // cuts) if data else 1
        for start in range(0, len(data), size):
            self.client.receive_data(data[start : start + size], 10**15)


def gen_ack(stream: int = 20) -> GenAck:
    return GenAck(REQUEST_ID, stream, 0, 0, 0, 0, "s1", "e1")


@pytest.mark.parametrize("cuts", [1, 3, 1000])
def test_a_whole_stream_then_goaway(cuts: int) -> None:
    script = Scripted()
    script.to_server()
    [request] = script.requests
    assert request.encoder == LOADTEST_ENCODER
    script.server.send_signal(gen_ack())
    chunks = [ENCODER.encode(n, 1000 * n) for n in range(1, 41)]
    for chunk in chunks:
        script.server.send_message(20, chunk)
    script.to_client(cuts=cuts)
    script.to_server()  # the client's ACKs open the window for the rest
    script.server.send_signal(Close(20, 40))
    script.to_client(cuts=cuts)
    assert script.client.done and script.client.stream == 20
    assert script.tally.received == 40 and script.tally.disorder == 0
    assert script.tally.payload_bytes == sum(map(len, chunks))
    assert list(script.tally.lags) == [10**15 - 1000 * n for n in range(1, 41)]
    script.client.close()
    events = script.server.receive_data(script.client.data_to_send(NOW), NOW)
    assert any(getattr(e, "code", None) is ErrorCode.NO_ERROR for e in events)  # our GOAWAY


def test_the_client_acknowledges_so_the_window_moves() -> None:
    script = Scripted()
    script.to_server()
    script.server.send_signal(gen_ack())
    for n in range(1, 201):
        script.server.send_message(20, ENCODER.encode(n, n))
    for _ in range(20):  # each round: the window's worth of frames, then the client's ACKs
        script.to_client()
        script.to_server()
        deadline = script.client.get_timer()
        if deadline is not None:  # a delayed ACK
            script.client.handle_timer(deadline)
            script.to_server()
    assert script.tally.received == 200 and script.tally.next_seq == 201


@pytest.mark.parametrize(
    ("server_says", "error"),
    [
        (Error(REQUEST_ID, "invalid_request", "no"), "refused the GEN_REQ: invalid_request: no"),
        (GoAway(ErrorCode.INTERNAL_ERROR, "bye"), "the server sent GOAWAY INTERNAL_ERROR: 'bye'"),
    ],
)
def test_refusals_and_an_early_goaway_are_errors(server_says: object, error: str) -> None:
    script = Scripted()
    script.to_server()
    if isinstance(server_says, GoAway):
        script.server.send_signal(gen_ack())
        script.server.send_message(20, ENCODER.encode(1, 1))
        data = script.server.data_to_send(NOW)
        script.server.close(server_says.code, server_says.reason)
        data += script.server.data_to_send(NOW)  # the chunk and the GOAWAY in one read
    else:
        script.server.send_signal(server_says)  # type: ignore[arg-type]
        data = script.server.data_to_send(NOW)
    with pytest.raises(LoadProtocolError, match=error):
        script.client.receive_data(data, 10**15)
    assert not script.client.done
    assert script.tally.received == (1 if isinstance(server_says, GoAway) else 0)


def test_messages_that_are_not_chunks_or_on_other_streams_are_errors() -> None:
    script = Scripted()
    script.to_server()
    script.server.send_message(21, ENCODER.encode(1, 1))  # before any GEN_ACK
    with pytest.raises(LoadProtocolError, match="StreamID 21"):
        script.to_client()
    script = Scripted()
    script.to_server()
    script.server.send_signal(gen_ack())
    script.server.send_message(20, ENCODER.encode(1, 1))
    script.server.send_message(20, b'{"not":"a chunk"}')
    with pytest.raises(ChunkFormatError):
        script.to_client()
    assert script.tally.received == 1  # what came before the bad message counts


def test_a_close_for_another_stream_does_not_end_ours() -> None:
    script = Scripted()
    script.to_server()
    script.server.send_signal(gen_ack(30))
    script.server.send_signal(Close(31, 0))
    script.to_client()
    assert not script.client.done and script.client.stream == 30


# -- BinaryStreamReader ---------------------------------------------------------------------


def frame(payload: bytes, opcode: int = Opcode.BINARY, *, fin: bool = True) -> bytes:
    """A server frame (unmasked), with the shortest length encoding."""
    head = bytes([(0x80 if fin else 0) | opcode])
    size = len(payload)
    if size < 126:
        return head + bytes([size]) + payload
    if size < 1 << 16:
        return head + b"\x7e" + size.to_bytes(2, "big") + payload
    return head + b"\x7f" + size.to_bytes(8, "big") + payload


def feed(transcript: bytes, cuts: list[int]) -> tuple[bytes, BinaryStreamReader, list[bytes]]:
    reader, data, sent = BinaryStreamReader(), b"", []
    for start, end in itertools.pairwise([0, *cuts, len(transcript)]):
        data += reader.feed(transcript[start:end])
        sent += reader.outgoing
        reader.outgoing.clear()
    return data, reader, sent


def test_binary_messages_carry_one_byte_stream() -> None:
    stream = bytes(range(256)) * 300  # 76,800 bytes
    pieces = [stream[:10], stream[10:200], stream[200:70_000], stream[70_000:]]
    transcript = (
        frame(pieces[0])
        + frame(b"ping!", Opcode.PING)
        + frame(pieces[1], fin=False)  # a fragmented message, with a ping inside
        + frame(b"", Opcode.PING)
        + frame(pieces[2], Opcode.CONTINUATION)
        + frame(pieces[3])
        + frame(b"", Opcode.PONG)
        + frame(close_payload(1000, "done"), Opcode.CLOSE)
        + b"junk after the close"
    )
    whole = feed(transcript, [])
    assert whole[0] == stream and whole[1].close == (1000, "done")
    pong, pong_empty, echo = (client_frame(op, p) for op, p in [
        (Opcode.PONG, b"ping!"), (Opcode.PONG, b""), (Opcode.CLOSE, close_payload(1000))
    ])  # fmt: skip
    assert [f[:2] for f in whole[2]] == [pong[:2], pong_empty[:2], echo[:2]]
    for cut in itertools.chain(range(1, 300), range(300, len(transcript), 509)):
        again = feed(transcript, [cut])
        assert again[0] == stream and again[1].close == (1000, "done"), cut
    one_by_one = feed(transcript, list(range(1, len(transcript))))
    assert one_by_one[0] == stream and len(one_by_one[2]) == 3


@pytest.mark.parametrize(
    ("frames", "error", "code"),
    [
        (frame(b'{"seq":1}', Opcode.TEXT), "a text message", 1003),
        (frame(b"x", Opcode.CONTINUATION), "continuation frame outside", 1002),
        (frame(b"x", fin=False) + frame(b"y"), "before the fragmented one ended", 1002),
        (frame(b"x", 0x3), "reserved opcode", 1002),
        (b"\x82\x81abcdx", "masked frame", 1002),
        (bytes([0xC2, 1]) + b"x", "RSV bits", 1002),
        (frame(b"x" * 126, Opcode.PING), "control frame", 1002),
    ],
)
def test_broken_binary_framing(frames: bytes, error: str, code: int) -> None:
    with pytest.raises(FrameError, match=error) as caught:
        BinaryStreamReader().feed(frames)
    assert caught.value.code == code


# -- the handshake's subprotocol --------------------------------------------------------------


def head(**fields: str) -> bytes:
    lines = {"Upgrade": "websocket", "Connection": "Upgrade",
             "Sec-WebSocket-Accept": accept_value(KEY).decode(), **fields}  # fmt: skip
    text = "".join(f"{name}: {value}\r\n" for name, value in lines.items())
    return f"HTTP/1.1 101 Switching Protocols\r\n{text}\r\n".encode()


def test_a_subprotocol_is_offered_and_must_be_selected() -> None:
    offer = ClientHandshake("h:1", "/v1/ws", key=KEY, subprotocol=AIRC_SUBPROTOCOL)
    assert b"\r\nSec-WebSocket-Protocol: airc.v1.2\r\n" in offer.request()
    assert offer.receive_data(head(**{"Sec-WebSocket-Protocol": "airc.v1.2"}) + b"rest") == b"rest"
    for fields, error in [({}, "subprotocol none"), ({"Sec-WebSocket-Protocol": "x"}, "'x'")]:
        handshake = ClientHandshake("h:1", "/v1/ws", key=KEY, subprotocol=AIRC_SUBPROTOCOL)
        with pytest.raises(HandshakeError, match=error):
            handshake.receive_data(head(**fields))
    plain = ClientHandshake("h:1", "/", key=KEY)  # the default: none offered, none accepted
    assert b"Protocol" not in plain.request()
    with pytest.raises(HandshakeError, match="not offered"):
        plain.receive_data(head(**{"Sec-WebSocket-Protocol": "airc.v1.2"}))


# -- configuration and the command line -------------------------------------------------------


def test_airc_addresses_are_loopback_tcp_urls() -> None:
    assert airc_address("tcp://127.0.0.1:8421") == ("127.0.0.1", 8421)
    assert airc_address("tcp://localhost:9") == ("127.0.0.1", 9)
    assert airc_address("tcp://[::1]:9") == ("::1", 9)
    for bad in ("http://127.0.0.1:1", "tcp://127.0.0.1", "tcp://10.0.0.1:1", "tcp://h:x"):
        with pytest.raises(ValueError):
            airc_address(bad)
    assert BenchConfig(transports=("airc", "airc-ws")).transports == ("airc", "airc-ws")
    with pytest.raises(ValueError, match="airc-ws"):
        BenchConfig(transports=("quic",))  # type: ignore[arg-type]


def test_bench_all_transports(tmp_path: Path) -> None:
    json_path = tmp_path / "out.json"
    result = airlane(
        "bench", "--spawn", "--transport", "all", "--streams", "4", "--chunks", "10",
        "--json", str(json_path), "--timeout", "30",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    # Seven columns do not fit one table: the report splits them, each part with the metrics.
    headers = [line for line in result.stdout.splitlines() if "metric" in line]
    cells = [cell.strip() for line in headers for cell in re.split(r"[┃│|]", line) if cell.strip()]
    every = ["sse", "ws", "airc", "airc-ws", "grpc", "grpc-web", "rsocket"]
    assert [cell for cell in cells if cell != "metric"] == every
    document = json.loads(json_path.read_text())
    assert document["config"]["transports"] == every
    runs = document["results"]
    assert [r["transport"] for r in runs] == every
    for run in runs:
        assert run["chunks_received"] == run["chunks_expected"] == 40, run
        assert run["errors"] == 0 and run["out_of_order"] == 0
        assert run["streams_completed"] == 4


def test_bench_airc_at_a_given_url(server: ServerProcess, tmp_path: Path) -> None:
    host, port = airc_of(server)
    json_path = tmp_path / "out.json"
    result = airlane(
        "bench", "--url", server.url, "--airc-url", f"tcp://{host}:{port}", "--transport",
        "airc", "--streams", "2", "--chunks", "5", "--json", str(json_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    [run] = json.loads(json_path.read_text())["results"]
    assert run["transport"] == "airc" and run["chunks_received"] == 10 and run["errors"] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--compare", "--transport", "all"], "SSE and WebSocket only"),
        (["--peers", "node", "--transport", "airc-ws"], "SSE and WebSocket only"),
        (["--url", "http://127.0.0.1:1", "--airc-url", "tcp://10.1.2.3:1"], "loopback"),
        (["--url", "http://127.0.0.1:1", "--airc-url", "http://127.0.0.1:2"], "tcp://"),
        (["--spawn", "--airc-url", "tcp://127.0.0.1:2"], "goes with --url"),
        (["--transport", "quic"], "quic"),
    ],
)
def test_bench_refuses(args: list[str], message: str) -> None:
    result = airlane("bench", *args)
    assert result.returncode == 2
    assert message in result.stdout + result.stderr


def test_help_lists_the_transports() -> None:
    result = airlane("bench", "--help")
    assert result.returncode == 0
    for word in ("airc-ws", "all", "--airc-url"):
        assert word in result.stdout

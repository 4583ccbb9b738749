"""``airlane serve`` stopped by a signal while streams run (a real process): open WebSockets
get 1012 at once, an SSE stream still running when the grace (5 s) is over is cut off
cleanly, the process ends as the signal says, and nothing is logged with a traceback."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.servers import run_server

GRACE_S = 5.0
"""`ServerSettings.graceful_s`, as ``airlane serve`` runs it."""
STREAM = "/v1/loadtest/{}?chunks=100000&mode=paced&interval_ms=50"
"""A stream that would run for over an hour."""


@pytest.mark.parametrize(
    ("sig", "status"), [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, 130)]
)
def test_a_signal_stops_running_streams_within_the_grace(
    tmp_path: Path, sig: signal.Signals, status: int
) -> None:
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log, run_server(stderr=log) as server:
        ws_url = server.url.replace("http://", "ws://") + STREAM.format("ws")
        with (
            httpx.Client(timeout=30) as client,
            client.stream("GET", server.url + STREAM.format("sse")) as sse,
            connect(ws_url, compression=None) as ws,
        ):
            chunks = sse.iter_raw()
            assert next(chunks).startswith(b"data: ")
            assert ws.recv(timeout=10)
            started = time.monotonic()
            server.process.send_signal(sig)
            with pytest.raises(ConnectionClosed):
                while True:
                    ws.recv(timeout=10)
            assert ws.close_code == 1012
            with pytest.raises(httpx.RemoteProtocolError):  # cut off: no last chunk
                for _ in chunks:
                    assert time.monotonic() - started < GRACE_S + 5, "the stream went on"
            assert GRACE_S - 1 < time.monotonic() - started < GRACE_S + 5
        assert server.process.wait(15) == status
    text = log_path.read_text()
    assert "Traceback" not in text and "ERROR" not in text, text[-3000:]


def test_a_second_signal_skips_the_grace(tmp_path: Path) -> None:
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log, run_server(stderr=log) as server:
        with (
            httpx.Client(timeout=30) as client,
            client.stream("GET", server.url + STREAM.format("sse")) as sse,
        ):
            chunks = sse.iter_raw()
            assert next(chunks).startswith(b"data: ")
            started = time.monotonic()
            server.process.send_signal(signal.SIGTERM)  # the grace starts: 5 s for the stream
            time.sleep(0.5)
            server.process.send_signal(signal.SIGTERM)  # the wait is over
            with pytest.raises(httpx.RemoteProtocolError):  # cut off: no last chunk
                for _ in chunks:
                    assert time.monotonic() - started < GRACE_S, "the second signal was ignored"
            assert time.monotonic() - started < GRACE_S - 2
        server.process.wait(15)
        assert time.monotonic() - started < GRACE_S
    text = log_path.read_text()
    assert "Traceback" not in text, text[-3000:]

"""A ``/v1/ws`` session whose reader is slow: the stream's events are written from the hub's
call-back until flow control pauses the socket, then through ASGI ``send``, and the session's
replies (``subscribed``, ``pong``) share the socket without being overtaken or lost."""

from __future__ import annotations

import socket
import time

import httpx
import orjson
from websockets.sync.client import connect

from tests.servers import run_server

EVENTS = 10000
"""Message events of ~1 KB each: ~10 MB, more than the socket buffers between the ends hold
(on loopback the sender's grows to a few MB)."""
PAD = "x" * 1000
CONFIG = "[retention]\nmax_events = 20000\nmax_bytes = 67108864\n"
"""Retention that keeps the whole stream: the slow reader gets events, not a folded state."""


def test_a_slow_session_reader_gets_every_event_and_every_reply() -> None:
    with run_server(config=CONFIG) as server, httpx.Client(base_url=server.url) as client:
        assert client.post("/v1/streams", json={"name": "slow-ws"}).status_code == 201
        for start in range(1, EVENTS + 1, 500):  # within the 1 MiB body limit
            events = [
                {"kind": "message", "payload": {"n": n, "pad": PAD}}
                for n in range(start, min(EVENTS + 1, start + 500))
            ]
            response = client.post("/v1/streams/slow-ws/events", json={"events": events})
            assert response.status_code == 200, response.text
        done = {"kind": "done", "finish_reason": "stop"}
        assert client.post("/v1/streams/slow-ws/events", json=done).status_code == 200

        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect
        sock.settimeout(30)
        sock.connect((host, int(port)))
        order: list[str] = []
        seqs: list[int] = []
        payloads: list[int] = []
        pings = 0
        # No permessage-deflate: the padding would compress to nothing and never fill a buffer.
        ws_url = f"ws://{host}:{port}/v1/ws"
        with connect(ws_url, sock=sock, max_queue=4, max_size=None, compression=None) as ws:
            ws.send(orjson.dumps({"op": "subscribe", "stream": "slow-ws", "ref": "sub"}).decode())
            for index, raw in enumerate(ws):
                message = orjson.loads(raw)
                op = message["op"]
                order.append(op if op != "pong" else f"pong {message['ref']}")
                if op == "event":
                    seqs.append(int(message["id"].rsplit(":", 1)[1]))
                    event = message["event"]
                    if event["kind"] == "message":
                        payloads.append(event["payload"]["n"])
                    elif event["kind"] == "done":
                        break
                if index % 500 == 0 and pings < 10:  # replies to write while events flow
                    ws.send(orjson.dumps({"op": "ping", "ref": pings}).decode())
                    pings += 1
                if index % 10 == 0:
                    # Real time on purpose: the reader must be slow for the server's writes
                    # to fill the socket and meet flow control; there is no clock to move.
                    time.sleep(0.002)
            # Pongs still on their way after the last event.
            ws.send(orjson.dumps({"op": "ping", "ref": "last"}).decode())
            while order[-1] != "pong last":
                order.append(f"pong {orjson.loads(ws.recv())['ref']}")
    assert order[0] == "subscribed"  # before any event
    assert seqs == list(range(1, EVENTS + 2))  # every event once, in order, then done
    assert payloads == list(range(1, EVENTS + 1))
    pongs = [entry for entry in order if entry.startswith("pong")]
    assert pongs == [f"pong {ref}" for ref in range(pings)] + ["pong last"]

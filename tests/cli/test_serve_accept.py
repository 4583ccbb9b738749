"""``airlane serve`` takes its HTTP and AIRC connections through `airlane.runtime.acceptor` and
reports them on ``/metrics``: a batch of connections opened together is served, and counted
per listener."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.servers import run_server


def accept_metrics(url: str) -> dict[tuple[str, str], float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {
        (sample.name, sample.labels["listener"]): sample.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("airlane_accept")
        for sample in family.samples
    }


def test_connections_opened_together_are_served_and_counted() -> None:
    with run_server() as server:
        assert server.airc is not None
        parts = urlsplit(server.url)
        address = (parts.hostname or "", parts.port or 80)
        before = accept_metrics(server.url)
        # Twenty connections wait in the listen queue before any request is sent.
        conns = [socket.create_connection(address, timeout=10) for _ in range(20)]
        airc = [socket.create_connection(server.airc, timeout=10) for _ in range(3)]
        try:
            for conn in conns:
                conn.sendall(
                    b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                )
            for conn in conns:
                response = b""
                while chunk := conn.recv(4096):
                    response += chunk
                assert response.startswith(b"HTTP/1.1 200 ")
        finally:
            for conn in conns + airc:
                conn.close()
        after = accept_metrics(server.url)
    http = ("airlane_accepted_connections_total", "http")
    # The twenty, and the /metrics request that read the counts.
    assert after[http] - before[http] == 21
    assert after[("airlane_accepted_connections_total", "airc")] == 3
    assert after[("airlane_accept_pauses_total", "http")] == 0
    assert after[("airlane_accept_pauses_total", "airc")] == 0

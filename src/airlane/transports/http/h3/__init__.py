"""HTTP/3 (QUIC) for the gateway's HTTP API, on aioquic.

- `config`: `Http3Config`, the listener's settings (``[http3]``);
- `server`: `Http3Server`, the UDP listener, its certificate and its connections;
- `protocol`: `H3Protocol`, one QUIC connection's requests, keep-alive and backpressure;
- `request`: `H3Request`, one request's ASGI cycle on a stream;
- `webtransport`: `WebTransportSession`, a WebTransport session served as ``/v1/ws``;
- `tickets`: the session tickets issued for 0-RTT, each usable once;
- `certificate`: the self-signed certificate made at start when none is configured.

The application is the same `AirlaneApp` the HTTP port serves (`airlane.transports.http.server`
runs it on TCP): every route answers over both.
"""

from __future__ import annotations

from airlane.transports.http.h3.config import Http3Config
from airlane.transports.http.h3.server import Http3Server

__all__ = ["Http3Config", "Http3Server"]

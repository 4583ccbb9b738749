"""The listening socket: accepted connections get TCP keepalive (the seed's 45 s) and
``TCP_NODELAY``, whichever loop serves them."""

from __future__ import annotations

import socket

import pytest

from airlane.server import DEFAULT_TCP_KEEPALIVE_S, bind_socket


@pytest.mark.skipif(not hasattr(socket, "TCP_KEEPIDLE"), reason="TCP_KEEPIDLE is Linux-only")
def test_accepted_sockets_inherit_keepalive_and_nodelay():
    listener = bind_socket("127.0.0.1", 0, DEFAULT_TCP_KEEPALIVE_S)
    listener.setblocking(True)
    try:
        client = socket.create_connection(listener.getsockname()[:2], timeout=5)
        accepted, _ = listener.accept()
        with client, accepted:
            assert accepted.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 45
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        listener.close()

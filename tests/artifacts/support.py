"""Checkpoints, stores and a fault-injecting TCP proxy for the artifact tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Container
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file


def checkpoint(
    path: Path,
    *,
    seed: int = 0,
    layers: int = 4,
    hidden: int = 128,
    changed: tuple[int, ...] = (),
    metadata: dict[str, str] | None = None,
) -> Path:
    """A small transformer-shaped checkpoint; layers in ``changed`` get different weights
    (as a fine-tune of those layers would); ``metadata`` goes in its header."""
    rng = np.random.default_rng(seed)
    tensors: dict[str, np.ndarray] = {
        "model.embed_tokens.weight": rng.standard_normal((512, hidden), dtype=np.float32),
        "model.norm.weight": np.ones(hidden, np.float32),
        "lm_head.weight": rng.standard_normal((512, hidden), dtype=np.float32),
    }
    for layer in range(layers):
        prefix = f"model.layers.{layer}."
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            tensors[prefix + f"self_attn.{proj}.weight"] = rng.standard_normal(
                (hidden, hidden), dtype=np.float32
            )
        tensors[prefix + "mlp.up_proj.weight"] = rng.standard_normal(
            (hidden * 2, hidden), dtype=np.float32
        )
        tensors[prefix + "input_layernorm.weight"] = np.ones(hidden, np.float32)
    bump = np.random.default_rng(seed + 1000)
    for layer in changed:
        name = f"model.layers.{layer}.mlp.up_proj.weight"
        tensors[name] = tensors[name] + bump.standard_normal(tensors[name].shape).astype(np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata=metadata)
    return path


@dataclass
class FaultyProxy:
    """A TCP proxy on 127.0.0.1 in front of a real server, that can slow the answers down,
    flip bytes on the wire, reset a connection (as a bad link would) or answer 503 in the
    server's place (as a loaded one would), per connection."""

    upstream: tuple[str, int]
    rate: float | None = None
    """Bytes per second downstream, per connection (None: as fast as it goes)."""
    flips: dict[int, list[int]] = field(default_factory=dict)
    """Connection number (from 0) -> downstream byte offsets to corrupt."""
    cuts: dict[int, int] = field(default_factory=dict)
    """Connection number -> the downstream byte offset at which the connection is reset."""
    refusals: Container[int] = field(default_factory=set)
    """Connection numbers answered ``503 Service Unavailable`` without asking the server."""
    refused: int = 0
    reset: int = 0
    port: int = 0
    connections: int = 0
    flipped: int = 0
    relayed: int = 0
    """Bytes sent downstream so far, over every connection."""
    _server: asyncio.Server | None = None

    async def _pipe(
        self,
        reader,
        writer,
        flips: list[int] | None,
        downstream: bool = False,
        cut: int | None = None,
    ) -> None:
        seen = 0
        try:
            while data := await reader.read(65536):
                if cut is not None and seen + len(data) > cut:
                    writer.write(data[: cut - seen])
                    writer.transport.abort()  # a reset, mid-answer
                    self.reset += 1
                    return
                if flips:
                    buffer = bytearray(data)
                    for offset in flips:
                        if seen <= offset < seen + len(data):
                            buffer[offset - seen] ^= 0xFF
                            self.flipped += 1
                    data = bytes(buffer)
                seen += len(data)
                if downstream:
                    self.relayed += len(data)
                writer.write(data)
                await writer.drain()
                if self.rate:
                    await asyncio.sleep(len(data) / self.rate)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _handle(self, client_reader, client_writer) -> None:
        number = self.connections
        self.connections += 1
        if number in self.refusals:
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                await client_reader.readuntil(b"\r\n\r\n")  # the request's head
                client_writer.write(
                    b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n"
                    b"connection: close\r\n\r\n"
                )
                await client_writer.drain()
                self.refused += 1
            client_writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            self._pipe(client_reader, up_writer, None),
            self._pipe(
                up_reader,
                client_writer,
                self.flips.get(number),
                downstream=True,
                cut=self.cuts.get(number),
            ),
        )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[FaultyProxy]:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

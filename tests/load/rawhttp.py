"""Raw HTTP/1.1 helpers for the load tests: chunked transfer decoding without a client library,
so the tests control socket buffers and read pacing themselves."""

from __future__ import annotations

__all__ = ["ChunkedDecoder"]


class ChunkedDecoder:
    """Incremental HTTP/1.1 chunked transfer decoding (RFC 9112 section 7.1), no trailers.

    `feed` takes bytes as they arrive and returns the body bytes they complete; `done` turns
    true at the last (zero-size) chunk.
    """

    def __init__(self) -> None:
        self.buffer = b""
        self.remaining = 0
        """Bytes left in the current chunk, its closing CRLF included."""
        self.done = False

    def feed(self, data: bytes) -> bytes:
        self.buffer += data
        out = []
        while not self.done:
            if self.remaining:
                take = self.buffer[: self.remaining]
                self.buffer = self.buffer[len(take) :]
                self.remaining -= len(take)
                # The last two bytes of a chunk are its CRLF, not body.
                crlf = max(0, 2 - self.remaining)
                out.append(take[: max(0, len(take) - crlf)])
                if self.remaining:
                    break
                continue
            line_end = self.buffer.find(b"\r\n")
            if line_end < 0:
                break
            size = int(self.buffer[:line_end].split(b";")[0], 16)
            self.buffer = self.buffer[line_end + 2 :]
            if size == 0:
                self.done = True
                break
            self.remaining = size + 2
        return b"".join(out)

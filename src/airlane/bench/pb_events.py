"""What the protobuf load clients (gRPC, gRPC-Web) make of an ``airlane.v1.Event`` that ends
a stream with an error: the error the stream failed with, in the SSE reader's words."""

from __future__ import annotations

import orjson
from google.protobuf import json_format

from airlane.bench.chunk import LoadProtocolError
from airlane.bench.sse_events import failure_text
from airlane.v1 import events_pb2

__all__ = ["stream_failure"]


def stream_failure(event: events_pb2.Event) -> LoadProtocolError:
    """The error of a stream that ``event`` (its ``error`` event) ended: its code and
    message, as the SSE reader says them."""
    fields = json_format.MessageToDict(event.fields)
    return LoadProtocolError(f"the stream failed: {failure_text(orjson.dumps(fields))}")

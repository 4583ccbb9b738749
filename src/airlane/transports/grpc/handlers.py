"""Registering `AirlaneService` on a grpcio server, with serializers that pass bytes through.

The generated ``add_AirlaneServicer_to_server`` serializes every response message object.
The streaming RPCs here yield most responses already serialized (`StreamEventWriter`: one
conversion per event, shared by every reader, and no message object per event), so the
handlers are built from the service descriptor with a serializer that leaves ``bytes`` as
they are and serializes anything else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor

from airlane.v1 import service_pb2

__all__ = ["add_service"]

_SERVICE = service_pb2.DESCRIPTOR.services_by_name["Airlane"]


def _serialize(response: Any) -> bytes:
    return response if isinstance(response, bytes) else response.SerializeToString()


def _handler(method: MethodDescriptor, behaviour: Callable[..., Any]) -> grpc.RpcMethodHandler:
    request_class = message_factory.GetMessageClass(method.input_type)
    kind = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(method.client_streaming, method.server_streaming)]
    return kind(
        behaviour, request_deserializer=request_class.FromString, response_serializer=_serialize
    )


def add_service(servicer: object, server: grpc.aio.Server) -> None:
    """Serve ``servicer``'s methods (named as in the contract) on ``server``."""
    handlers = {
        method.name: _handler(method, getattr(servicer, method.name)) for method in _SERVICE.methods
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(_SERVICE.full_name, handlers),)
    )

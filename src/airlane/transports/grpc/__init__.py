"""The gRPC transport: the ``airlane.v1.Airlane`` service (``proto/airlane/v1``) on grpcio's
asyncio server, with health checking and reflection (`GrpcServer`)."""

from airlane.transports.grpc.config import GrpcServerConfig
from airlane.transports.grpc.errors import GRPC_STATUS, status_of
from airlane.transports.grpc.server import SERVICE_NAME, GrpcServer
from airlane.transports.grpc.service import AirlaneService

__all__ = [
    "GRPC_STATUS",
    "SERVICE_NAME",
    "AirlaneService",
    "GrpcServer",
    "GrpcServerConfig",
    "status_of",
]

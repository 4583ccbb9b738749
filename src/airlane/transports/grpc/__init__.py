"""The gRPC transport: the ``airlane.v1.Airlane`` service (``proto/airlane/v1``) on grpcio's
asyncio server, with health checking and reflection (`GrpcServer`)."""

from airlane.transports.grpc.config import GrpcServerConfig
from airlane.transports.grpc.server import SERVICE_NAME, GrpcServer
from airlane.transports.grpc.service import AirlaneService, status_of

__all__ = ["SERVICE_NAME", "AirlaneService", "GrpcServer", "GrpcServerConfig", "status_of"]

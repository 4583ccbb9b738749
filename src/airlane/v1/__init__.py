"""Airlane's Protobuf contract, generated from ``proto/airlane/v1/*.proto`` (see
`airlane.v1.generate`): ``events_pb2`` (events, positions, stream handles), ``service_pb2`` and
``service_pb2_grpc`` (the ``Airlane`` service), ``model_update_pb2`` (``AttentionUpdate``).
"""

from airlane.v1.generate import ensure_generated

ensure_generated()

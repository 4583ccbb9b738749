"""Airlane's Protobuf contract, generated from ``proto/airlane/v1/*.proto`` (see
`airlane.protos`): ``events_pb2`` (events, positions, stream handles), ``service_pb2`` and
``service_pb2_grpc`` (the ``Airlane`` service), ``model_update_pb2`` (``AttentionUpdate``).
"""

from airlane.protos import ensure_generated

ensure_generated()

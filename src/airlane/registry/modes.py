"""Compatibility modes applied to a new schema and a subject's earlier versions (pure).

`check_compatibility` picks which earlier versions to compare with (the latest one, or all of
them for the ``_TRANSITIVE`` modes) and in which direction (the new schema as reader for
BACKWARD, as writer for FORWARD, both for FULL), then dispatches on the schema type to
`airlane.registry.json_compat` or `airlane.registry.proto_compat`.
"""

from __future__ import annotations

from collections.abc import Sequence

from airlane.registry import json_compat, proto_compat
from airlane.registry.schemas import (
    Compatibility,
    Direction,
    Incompatibility,
    Schema,
    SchemaType,
    SchemaVersion,
)

__all__ = ["check_compatibility", "check_pair"]


def check_pair(reader: Schema, writer: Schema) -> list[Incompatibility]:
    """Why data written with ``writer`` might be rejected by a reader on ``reader``."""
    if reader.type is not writer.type:
        reason = f"schema type changed from {writer.type.value} to {reader.type.value}"
        return [Incompatibility("/", reason)]
    if reader == writer:
        return []
    if reader.type is SchemaType.JSON:
        return json_compat.check(reader.document, writer.document)
    return proto_compat.check(reader.descriptor, writer.descriptor)


def check_compatibility(
    mode: Compatibility, new: Schema, previous_versions: Sequence[SchemaVersion]
) -> list[Incompatibility]:
    """Every way ``new`` breaks ``mode`` against ``previous_versions`` (empty: it may be
    registered). A change of schema type is incompatible in every mode but NONE."""
    if mode is Compatibility.NONE or not previous_versions:
        return []
    ordered = sorted(previous_versions, key=lambda v: v.version)
    targets = ordered if mode.transitive else ordered[-1:]
    problems: list[Incompatibility] = []
    for old in reversed(targets):  # newest first: the most relevant complaints lead
        if old.schema.type is not new.type:
            reason = f"schema type changed from {old.schema.type.value} to {new.type.value}"
            problems.append(Incompatibility("/", reason, old.version))
            continue
        if mode.backward:
            problems += _tag(check_pair(new, old.schema), old.version, "backward")
        if mode.forward:
            problems += _tag(check_pair(old.schema, new), old.version, "forward")
    return problems


def _tag(
    problems: list[Incompatibility], version: int, direction: Direction
) -> list[Incompatibility]:
    return [Incompatibility(p.path, p.reason, version, direction) for p in problems]

"""Protobuf wire compatibility: can a reader on one message descriptor parse what a writer on
another encodes, without losing or misreading data? (pure; no I/O)

`check(reader, writer)` compares two ``google.protobuf.descriptor.Descriptor`` objects (each
from its own version's descriptor pool) field number by field number; names do not matter on
the wire and are ignored, except the top-level message name (below). BACKWARD compatibility
of a new schema is ``check(reader=new, writer=old)``; FORWARD is the reverse.

Rules (a field number present on both sides unless said otherwise):

=============================  ===========================================================
wire-compatible scalar groups  {int32, uint32, int64, uint64, bool, enum} (varint);
                               {sint32, sint64} (zigzag varint); {fixed32, sfixed32};
                               {fixed64, sfixed64}; {string, bytes}; float alone; double
                               alone. A change within a group is compatible (values may be
                               truncated or reinterpreted, as the Protobuf guide says; bytes
                               read as string must be valid UTF-8); across groups it is not.
message / group                compared recursively (a pair of message types already under
                               comparison is assumed compatible, so recursive types end).
                               A message is never compatible with bytes or a scalar here,
                               even though bytes holding an encoded message would parse.
repeated vs singular           incompatible (a singular reader keeps only the last element).
oneof membership               moving a field into or out of a (non-synthetic) oneof is
                               incompatible; so is one reader oneof holding fields of two
                               writer oneofs (both may be set; the reader keeps one).
required (proto2 / editions)   a field the reader requires must be required by the writer;
                               this covers a required field added (backward) or removed
                               (forward). Fields only in the writer are skipped (unknown
                               fields); optional fields only in the reader are absent.
enum values                    every number of the writer's enum must be known to the
                               reader's enum, and an integer writer field is not compatible
                               with an enum reader field ("dropping" a value breaks the reader, even
                               for open proto3 enums, whose readers then see a bare number).
message name                   the top-level message's full name must not change: a
                               subject describes one message type, and consumers look it up
                               by name (``Any``, reflection). Conservative; the wire would
                               not care.
=============================  ===========================================================

Not covered: extensions, field presence changes within proto3 (optional vs implicit),
default value changes in proto2, packed vs unpacked (parsers accept both), reserved ranges.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FieldDescriptor

from airlane.registry.schemas import Incompatibility

__all__ = ["WIRE_GROUPS", "check"]

_T = FieldDescriptor
WIRE_GROUPS: dict[int, str] = {
    **dict.fromkeys(
        (_T.TYPE_INT32, _T.TYPE_UINT32, _T.TYPE_INT64, _T.TYPE_UINT64, _T.TYPE_BOOL, _T.TYPE_ENUM),
        "varint",
    ),
    **dict.fromkeys((_T.TYPE_SINT32, _T.TYPE_SINT64), "zigzag"),
    **dict.fromkeys((_T.TYPE_FIXED32, _T.TYPE_SFIXED32), "fixed32"),
    **dict.fromkeys((_T.TYPE_FIXED64, _T.TYPE_SFIXED64), "fixed64"),
    **dict.fromkeys((_T.TYPE_STRING, _T.TYPE_BYTES), "length-delimited"),
    _T.TYPE_FLOAT: "float",
    _T.TYPE_DOUBLE: "double",
    _T.TYPE_MESSAGE: "message",
    _T.TYPE_GROUP: "group",
}
"""Field type -> wire compatibility group (two types in one group are interchangeable)."""

_TYPE_NAMES = {
    value: name.removeprefix("TYPE_").lower()
    for name, value in descriptor_pb2.FieldDescriptorProto.Type.items()
}


def check(reader: Any, writer: Any) -> list[Incompatibility]:
    """Why a reader on message ``reader`` might misread what a writer on ``writer`` sends."""
    problems: list[Incompatibility] = []
    if reader.full_name != writer.full_name:
        reason = f"message renamed from {writer.full_name!r} (writer) to {reader.full_name!r}"
        problems.append(Incompatibility("/", reason))
    return problems + _Checker().message(reader, writer, "")


def _type_name(field: Any) -> str:
    if field.type in (_T.TYPE_MESSAGE, _T.TYPE_GROUP):
        return str(field.message_type.full_name)
    if field.type == _T.TYPE_ENUM:
        return f"enum {field.enum_type.full_name}"
    return str(_TYPE_NAMES.get(field.type, field.type))


def _real_oneof(field: Any, synthetic: set[str]) -> str | None:
    oneof = field.containing_oneof
    if oneof is None or oneof.name in synthetic:
        return None
    return str(oneof.name)


def _synthetic_oneofs(message: Any) -> set[str]:
    """Names of the oneofs proto3 ``optional`` creates: they are presence, not a choice."""
    proto = descriptor_pb2.DescriptorProto()
    message.CopyToProto(proto)
    return {
        proto.oneof_decl[field.oneof_index].name
        for field in proto.field
        if field.proto3_optional and field.HasField("oneof_index")
    }


class _Checker:
    def __init__(self) -> None:
        # Message pairs under comparison: assumed compatible on re-entry (recursive types).
        self.seen: set[tuple[str, str]] = set()

    def message(self, reader: Any, writer: Any, path: str) -> list[Incompatibility]:
        key = (reader.full_name, writer.full_name)
        if key in self.seen:
            return []
        self.seen.add(key)
        problems: list[Incompatibility] = []
        for number, r_field in sorted(reader.fields_by_number.items()):
            w_field = writer.fields_by_number.get(number)
            here = f"{path}/{r_field.name}({number})"
            if w_field is None:
                if r_field.is_required:
                    reason = f"required field {r_field.name!r} is absent from the writer"
                    problems.append(Incompatibility(here, reason))
                continue
            problems += self.field(r_field, w_field, here)
        return problems + _oneof_problems(reader, writer, path)

    def field(self, reader: Any, writer: Any, path: str) -> list[Incompatibility]:
        problems = []
        if reader.is_repeated != writer.is_repeated:
            change = "repeated to singular" if writer.is_repeated else "singular to repeated"
            problems.append(Incompatibility(path, f"field changed from {change}"))
        if reader.is_required and not writer.is_required:
            problems.append(Incompatibility(path, "required by the reader, optional in the writer"))
        r_group, w_group = WIRE_GROUPS.get(reader.type), WIRE_GROUPS.get(writer.type)
        if r_group != w_group:
            reason = (
                f"type {_type_name(writer)} (writer) is not wire-compatible with "
                f"{_type_name(reader)} (reader)"
            )
            return [*problems, Incompatibility(path, reason)]
        if r_group in ("message", "group"):
            problems += self.message(reader.message_type, writer.message_type, path)
        elif reader.type == _T.TYPE_ENUM and writer.type == _T.TYPE_ENUM:
            problems += _enum_problems(reader.enum_type, writer.enum_type, path)
        elif reader.type == _T.TYPE_ENUM:
            reason = f"the writer's {_type_name(writer)} values may be unknown to the reader's enum"
            problems.append(Incompatibility(path, reason))
        return problems


def _enum_problems(reader: Any, writer: Any, path: str) -> list[Incompatibility]:
    known = set(reader.values_by_number)
    return [
        Incompatibility(path, f"enum value {value.name} = {number} is unknown to the reader")
        for number, value in sorted(writer.values_by_number.items())
        if number not in known
    ]


def _oneof_problems(reader: Any, writer: Any, path: str) -> list[Incompatibility]:
    r_synthetic, w_synthetic = _synthetic_oneofs(reader), _synthetic_oneofs(writer)
    shared = sorted(set(reader.fields_by_number) & set(writer.fields_by_number))
    r_oneof = {n: _real_oneof(reader.fields_by_number[n], r_synthetic) for n in shared}
    w_oneof = {n: _real_oneof(writer.fields_by_number[n], w_synthetic) for n in shared}
    problems = []
    for number in shared:
        if (r_oneof[number] is None) != (w_oneof[number] is None):
            name = reader.fields_by_number[number].name
            moved = "into" if w_oneof[number] is None else "out of"
            reason = f"field moved {moved} a oneof"
            problems.append(Incompatibility(f"{path}/{name}({number})", reason))
    # Fields the writer sets independently (different oneofs) but one reader oneof holds.
    merged: dict[str, set[str]] = {}
    for number in shared:
        r_name, w_name = r_oneof[number], w_oneof[number]
        if r_name is not None and w_name is not None:
            merged.setdefault(r_name, set()).add(w_name)
    for name, sources in sorted(merged.items()):
        if len(sources) > 1:
            reason = (
                f"oneof {name!r} of the reader merges the writer's oneofs "
                f"{', '.join(sorted(sources))}; the reader keeps only one of their fields"
            )
            problems.append(Incompatibility(path or "/", reason))
    return problems

"""Protobuf schemas built by hand from ``descriptor_pb2`` (no protoc), for the tests.

    schema = proto_schema(message("Order", field("id", 1, "int64"), field("sku", 2, "string")))

Messages go into one proto file (package ``shop``); ``message`` takes nested messages and
enums, ``oneofs`` (names, by index) and fields. Field types are the lower-case Protobuf type
names; message and enum fields name their type (``type_name="shop.Item"``).
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2

from airlane.registry import Schema

FDP = descriptor_pb2.FieldDescriptorProto
PACKAGE = "shop"


def field(
    name: str,
    number: int,
    kind: str,
    *,
    repeated: bool = False,
    required: bool = False,
    type_name: str | None = None,
    oneof: int | None = None,
    proto3_optional: bool = False,
) -> FDP:
    """One field; ``kind`` is ``int32``, ``string``, ``message``, ``enum`` ..."""
    label = FDP.LABEL_REPEATED if repeated else FDP.LABEL_OPTIONAL
    if required:
        label = FDP.LABEL_REQUIRED
    built = FDP(name=name, number=number, label=label, type=getattr(FDP, f"TYPE_{kind.upper()}"))
    if type_name:
        built.type_name = "." + type_name
    if oneof is not None:
        built.oneof_index = oneof
    if proto3_optional:
        built.proto3_optional = True
    return built


def enum(name: str, *values: str) -> descriptor_pb2.EnumDescriptorProto:
    """An enum whose values are numbered 0, 1, 2 ... in order; None skips a number."""
    built = descriptor_pb2.EnumDescriptorProto(name=name)
    for number, value in enumerate(values):
        if value is not None:
            built.value.add(name=value, number=number)
    return built


def message(
    name: str,
    *fields: FDP,
    oneofs: tuple[str, ...] = (),
    nested: tuple[descriptor_pb2.DescriptorProto, ...] = (),
    enums: tuple[descriptor_pb2.EnumDescriptorProto, ...] = (),
    map_entry: bool = False,
) -> descriptor_pb2.DescriptorProto:
    """A message with its fields, oneof names, nested messages and enums."""
    built = descriptor_pb2.DescriptorProto(name=name)
    built.field.extend(fields)
    for oneof in oneofs:
        built.oneof_decl.add(name=oneof)
    built.nested_type.extend(nested)
    built.enum_type.extend(enums)
    if map_entry:
        built.options.map_entry = True
    return built


def file_set(
    *messages: descriptor_pb2.DescriptorProto,
    enums: tuple[descriptor_pb2.EnumDescriptorProto, ...] = (),
    syntax: str = "proto3",
    dependencies: tuple[str, ...] = (),
) -> descriptor_pb2.FileDescriptorSet:
    """A FileDescriptorSet of one file holding ``messages`` and ``enums``."""
    file = descriptor_pb2.FileDescriptorProto(name="shop.proto", package=PACKAGE, syntax=syntax)
    file.message_type.extend(messages)
    file.enum_type.extend(enums)
    file.dependency.extend(dependencies)
    return descriptor_pb2.FileDescriptorSet(file=[file])


def proto_schema(
    *messages: descriptor_pb2.DescriptorProto,
    enums: tuple[descriptor_pb2.EnumDescriptorProto, ...] = (),
    syntax: str = "proto3",
    root: str | None = None,
) -> Schema:
    """A Protobuf `Schema` for ``root`` (default: the first message)."""
    name = root or messages[0].name
    return Schema.protobuf(file_set(*messages, enums=enums, syntax=syntax), f"{PACKAGE}.{name}")

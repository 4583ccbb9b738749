"""Protobuf wire compatibility: a table of descriptor changes in every mode, and the rules'
reasons. Descriptor sets are built by hand (tests/registry/protos.py)."""

from __future__ import annotations

import pytest

from airlane.registry.proto_compat import check
from tests.registry.modes_table import expand, problems
from tests.registry.protos import enum, field, message, proto_schema

ORDER = message("Order", field("id", 1, "int64"), field("sku", 2, "string"))


def order(*extra, **kwargs):
    return proto_schema(message("Order", field("id", 1, "int64"), *extra, **kwargs))


def with_id(kind: str, **kwargs):
    return proto_schema(message("Order", field("id", 1, kind, **kwargs)))


def item(kind: str):
    return proto_schema(
        message("Order", field("item", 1, "message", type_name="shop.Item")),
        message("Item", field("qty", 1, kind)),
    )


def status(*values):
    return proto_schema(
        message("Order", field("status", 1, "enum", type_name="shop.Status")),
        enums=(enum("Status", *values),),
    )


def in_oneof(inside: bool):
    if inside:
        return proto_schema(
            message(
                "Order",
                field("id", 1, "int64", oneof=0),
                field("sku", 2, "string", oneof=0),
                oneofs=("key",),
            )
        )
    return proto_schema(message("Order", field("id", 1, "int64"), field("sku", 2, "string")))


def required(present: bool):
    fields = [field("id", 1, "int64", required=True)]
    if present:
        fields.append(field("sku", 2, "string", required=True))
    return proto_schema(message("Order", *fields), syntax="proto2")


def tree(extra=()):
    return proto_schema(
        message(
            "Node", field("children", 1, "message", repeated=True, type_name="shop.Node"), *extra
        )
    )


def counts(value_kind: str):
    entry = message(
        "CountsEntry", field("key", 1, "string"), field("value", 2, value_kind), map_entry=True
    )
    return proto_schema(
        message(
            "Order",
            field("counts", 1, "message", repeated=True, type_name="shop.Order.CountsEntry"),
            nested=(entry,),
        )
    )


def two_oneofs(merged: bool):
    if merged:
        fields = (field("a", 1, "int32", oneof=0), field("b", 2, "int32", oneof=0))
        return proto_schema(message("Order", *fields, oneofs=("z",)))
    fields = (field("a", 1, "int32", oneof=0), field("b", 2, "int32", oneof=1))
    return proto_schema(message("Order", *fields, oneofs=("x", "y")))


# (name, old, new, backward: new reads old data, forward: old reads new data)
CASES = [
    ("identical", proto_schema(ORDER), proto_schema(ORDER), True, True),
    ("add-optional-field", order(), order(field("sku", 2, "string")), True, True),
    ("remove-optional-field", order(field("sku", 2, "string")), order(), True, True),
    (
        "rename-field",
        order(field("sku", 2, "string")),
        order(field("code", 2, "string")),
        True,
        True,
    ),
    ("int32-to-int64", with_id("int32"), with_id("int64"), True, True),
    ("bool-to-uint32", with_id("bool"), with_id("uint32"), True, True),
    ("int32-to-string", with_id("int32"), with_id("string"), False, False),
    ("sint32-to-int32", with_id("sint32"), with_id("int32"), False, False),
    ("sint32-to-sint64", with_id("sint32"), with_id("sint64"), True, True),
    ("fixed32-to-sfixed32", with_id("fixed32"), with_id("sfixed32"), True, True),
    ("fixed32-to-float", with_id("fixed32"), with_id("float"), False, False),
    ("fixed64-to-double", with_id("fixed64"), with_id("double"), False, False),
    ("string-to-bytes", with_id("string"), with_id("bytes"), True, True),
    ("singular-to-repeated", with_id("int64"), with_id("int64", repeated=True), False, False),
    ("nested-type-change", item("int32"), item("string"), False, False),
    ("nested-compatible-change", item("int32"), item("uint64"), True, True),
    ("enum-value-added", status("NEW", "PAID"), status("NEW", "PAID", "SHIPPED"), True, False),
    ("enum-value-dropped", status("NEW", "PAID", "SHIPPED"), status("NEW", "PAID"), False, True),
    ("enum-to-int32", status("NEW"), with_id("int32"), True, False),
    ("field-into-oneof", in_oneof(False), in_oneof(True), False, False),
    ("required-added", required(False), required(True), False, True),
    ("required-removed", required(True), required(False), True, False),
    (
        "message-renamed",
        proto_schema(ORDER),
        proto_schema(message("Purchase", *ORDER.field)),
        False,
        False,
    ),
    ("recursive-add-field", tree(), tree((field("name", 2, "string"),)), True, True),
    (
        "recursive-type-change",
        tree((field("name", 2, "string"),)),
        tree((field("name", 2, "int32"),)),
        False,
        False,
    ),
    (
        "proto3-optional-added",
        order(),
        order(field("sku", 2, "string", oneof=0, proto3_optional=True), oneofs=("_sku",)),
        True,
        True,
    ),
    ("map-value-change", counts("int32"), counts("string"), False, False),
    ("oneofs-merged", two_oneofs(False), two_oneofs(True), False, True),
]


@pytest.mark.parametrize(("mode", "old", "new", "compatible"), expand(CASES))
def test_change_in_every_mode(mode, old, new, compatible):
    found = problems(mode, old, new)
    assert (not found) is compatible, [str(p) for p in found]


def test_reasons_name_the_field_and_types():
    (found,) = check(with_id("string").descriptor, with_id("int32").descriptor)
    assert found.path == "/id(1)"
    assert found.reason == "type int32 (writer) is not wire-compatible with string (reader)"
    (nested,) = check(item("string").descriptor, item("int32").descriptor)
    assert nested.path == "/item(1)/qty(1)"
    (dropped,) = check(status("NEW").descriptor, status("NEW", "PAID").descriptor)
    assert dropped.reason == "enum value PAID = 1 is unknown to the reader"
    (moved,) = check(in_oneof(True).descriptor, in_oneof(False).descriptor)[:1]
    assert moved.reason == "field moved into a oneof"
    (missing,) = check(required(True).descriptor, required(False).descriptor)
    assert missing.path == "/sku(2)" and "absent from the writer" in missing.reason

"""Schemas are parsed and checked when built; bad input is `InvalidSchema` with a clear
message. Subjects, fingerprints, compatibility modes and the public surface."""

from __future__ import annotations

import re

import pytest
from google.protobuf import descriptor_pb2

import airlane.registry
from airlane.registry import (
    Compatibility,
    InvalidSchema,
    InvalidSubject,
    Schema,
    SchemaType,
    SchemaVersion,
    check_compatibility,
    check_subject,
)
from tests.registry.protos import field, file_set, message, proto_schema


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "schema is not valid JSON"),
        ("[1, 2]", "must be an object or a boolean, not list"),
        ('{"type": "strnig"}', "not a valid JSON Schema at /type"),
        ('{"minimum": "zero"}', "not a valid JSON Schema at /minimum"),
        ('{"$schema": "https://example.com/mine"}', "unknown $schema"),
        ('{"$ref": "https://example.com/s.json"}', "is not local"),
        ('{"$ref": "#/$defs/missing"}', "does not resolve"),
    ],
)
def test_bad_json_schemas_say_what_is_wrong(text, message):
    with pytest.raises(InvalidSchema, match=re.escape(message)) as info:
        Schema.json(text)
    assert info.value.code == "invalid_schema"


def test_json_schema_forms_and_fingerprint_ignore_formatting():
    compact = Schema.json('{"type":"object","properties":{"a":{"type":"string"}}}')
    spaced = Schema.json('{\n  "properties": {"a": {"type": "string"}},\n  "type": "object"\n}')
    as_dict = Schema.json({"type": "object", "properties": {"a": {"type": "string"}}})
    assert compact == spaced == as_dict and hash(compact) == hash(spaced)
    assert len(compact.fingerprint) == 64 and compact.type is SchemaType.JSON
    assert compact.document["type"] == "object" and compact.text.startswith("{")
    assert Schema.json(True).document is True
    assert Schema.json({"type": "string"}) != Schema.json({"type": "integer"})
    with pytest.raises(TypeError):
        _ = compact.descriptor


def test_refs_under_property_names_that_are_keywords_are_checked():
    with pytest.raises(InvalidSchema, match="does not resolve"):
        Schema.json({"properties": {"enum": {"$ref": "#/$defs/nowhere"}}})


def test_draft7_and_refs_in_enum_values_are_fine():
    Schema.json(
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "definitions": {"a": {}},
            "$ref": "#/definitions/a",
        }
    )
    Schema.json({"enum": [{"$ref": "not a reference, just data"}]})


def test_schema_type_may_be_given_by_name():
    assert Schema("JSON", b'{"type": "string"}').type is SchemaType.JSON
    with pytest.raises(InvalidSchema, match="unknown schema type 'AVRO'"):
        Schema("AVRO", b"{}")


def test_protobuf_schema_from_set_or_bytes():
    files = file_set(message("Order", field("id", 1, "int64")))
    from_set = Schema.protobuf(files, "shop.Order")
    from_bytes = Schema.protobuf(files.SerializeToString(), ".shop.Order")
    assert from_set == from_bytes and from_set.message == "shop.Order"
    assert from_set.descriptor.fields_by_number[1].name == "id"
    with pytest.raises(TypeError):
        _ = from_set.document


def test_bad_protobuf_schemas_say_what_is_wrong():
    files = file_set(message("Order", field("id", 1, "int64")), message("Item"))
    with pytest.raises(InvalidSchema, match="not a serialized FileDescriptorSet"):
        Schema.protobuf(b"\xff\xff\xff", "shop.Order")
    with pytest.raises(
        InvalidSchema,
        match=r"'shop.Missing' is not in the descriptor set \(it defines: shop.Item, shop.Order\)",
    ):
        Schema.protobuf(files, "shop.Missing")
    with pytest.raises(InvalidSchema, match="needs the fully qualified message name"):
        Schema.protobuf(files, "")
    broken = file_set(message("Order", field("item", 1, "message", type_name="shop.Nowhere")))
    with pytest.raises(InvalidSchema, match="cannot link"):
        Schema.protobuf(broken, "shop.Order")
    lacking = file_set(message("Order"), dependencies=("other.proto",))
    with pytest.raises(InvalidSchema, match=re.escape("lacks 'other.proto'")):
        Schema.protobuf(lacking, "shop.Order")


def test_well_known_imports_need_not_be_included():
    files = file_set(
        message("Order", field("at", 1, "message", type_name="google.protobuf.Timestamp")),
        dependencies=("google/protobuf/timestamp.proto",),
    )
    schema = Schema.protobuf(files, "shop.Order")
    assert (
        schema.descriptor.fields_by_number[1].message_type.full_name == "google.protobuf.Timestamp"
    )


def test_versions_of_one_message_live_in_separate_pools():
    v1 = proto_schema(message("Order", field("id", 1, "int64")))
    v2 = proto_schema(message("Order", field("id", 1, "string")))
    assert v1.descriptor.fields_by_number[1].type != v2.descriptor.fields_by_number[1].type


@pytest.mark.parametrize("subject", ["orders", "orders.created-value", "a_b.C-9", "x" * 200, "."])
def test_valid_subjects(subject):
    assert check_subject(subject) == subject


@pytest.mark.parametrize("subject", ["", "x" * 201, "has space", "a/b", "a*", "a>", "ü", None])
def test_invalid_subjects(subject):
    with pytest.raises(InvalidSubject, match="invalid subject") as info:
        check_subject(subject)
    assert info.value.code == "invalid_subject" and isinstance(info.value, ValueError)


def test_mode_flags():
    assert [m for m in Compatibility if m.backward] == [
        Compatibility.BACKWARD,
        Compatibility.FULL,
        Compatibility.BACKWARD_TRANSITIVE,
        Compatibility.FULL_TRANSITIVE,
    ]
    assert Compatibility.FORWARD_TRANSITIVE.forward and Compatibility.FORWARD_TRANSITIVE.transitive
    assert not Compatibility.NONE.backward and not Compatibility.NONE.forward


def test_transitive_modes_check_every_earlier_version():
    # v1 integer -> v2 number -> v3 integer again: v3 is forward compatible with v2 (its
    # integers are numbers) and with v1, but backward only with v1.
    v1, v2 = Schema.json({"type": "integer"}), Schema.json({"type": "number"})
    history = [SchemaVersion("s", 1, v1), SchemaVersion("s", 2, v2)]
    narrow = Schema.json({"type": "integer", "minimum": 0})
    assert check_compatibility(Compatibility.FORWARD_TRANSITIVE, narrow, history) == []
    found = check_compatibility(Compatibility.BACKWARD_TRANSITIVE, narrow, history)
    assert {(p.version, p.direction) for p in found} == {(1, "backward"), (2, "backward")}
    found = check_compatibility(Compatibility.BACKWARD, narrow, history)
    assert {p.version for p in found} == {2}
    # Non-transitive only looks at the latest: a change v1 would object to passes.
    wide = Schema.json({"type": ["number", "string"]})
    assert check_compatibility(Compatibility.FORWARD, v2, [history[0]])
    assert check_compatibility(Compatibility.BACKWARD, wide, history) == []


def test_type_change_is_incompatible_unless_none():
    history = [SchemaVersion("s", 1, Schema.json({"type": "object"}))]
    proto = proto_schema(message("Order"))
    for mode in Compatibility:
        found = check_compatibility(mode, proto, history)
        assert bool(found) is (mode is not Compatibility.NONE)
        if found:
            assert found[0].reason == "schema type changed from JSON to PROTOBUF"
            assert (
                str(found[0])
                == "against version 1, at /: schema type changed from JSON to PROTOBUF"
            )


def test_exported_names():
    assert set(airlane.registry.__all__) == {
        "DEFAULT_BUCKET",
        "Compatibility",
        "IncompatibleSchema",
        "Incompatibility",
        "InvalidCompatibility",
        "InvalidSchema",
        "InvalidSubject",
        "JetStreamSchemaStore",
        "MemorySchemaStore",
        "RegistrationConflict",
        "RegistryError",
        "RegistryUnavailable",
        "Schema",
        "SchemaRegistry",
        "SchemaStore",
        "SchemaType",
        "SchemaVersion",
        "SchemaViolation",
        "SubjectNotFound",
        "Validators",
        "VersionNotFound",
        "check_compatibility",
        "check_pair",
        "check_subject",
        "validate",
    }
    for name in airlane.registry.__all__:
        value = getattr(airlane.registry, name)
        if callable(value):
            assert value.__doc__, name


def test_descriptor_proto_is_the_real_one():
    # The helpers build real descriptor protos (guards against a silently different API).
    assert isinstance(file_set(message("X")), descriptor_pb2.FileDescriptorSet)

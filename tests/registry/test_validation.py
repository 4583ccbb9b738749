"""Validation of event payloads: located, bounded errors for JSON Schema; decode errors,
missing required fields and the JSON mapping for Protobuf; a bounded validator cache."""

from __future__ import annotations

import orjson
import pytest

from airlane.registry import Schema, SchemaViolation, Validators, validate
from airlane.registry.validation import MAX_ERRORS, is_json_content_type, is_protobuf_content_type
from tests.registry.protos import field, message, proto_schema

ORDER = Schema.json(
    {
        "type": "object",
        "required": ["id", "items"],
        "properties": {
            "id": {"type": "string"},
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"price": {"type": "number", "minimum": 0}},
                },
            },
            "email": {"type": "string", "format": "email"},
        },
    }
)
PROTO = proto_schema(message("Order", field("id", 1, "int64"), field("sku", 2, "string")))
PROTO2 = proto_schema(message("Order", field("id", 1, "int64", required=True)), syntax="proto2")


def violation(schema, payload, content_type="application/json") -> SchemaViolation:
    with pytest.raises(SchemaViolation) as info:
        validate(schema, payload, content_type)
    assert info.value.code == "schema_violation"
    return info.value


def test_conforming_json_passes():
    validate(ORDER, orjson.dumps({"id": "o1", "items": [{"price": 2.5}]}), "application/json")
    validate(
        ORDER, b'{"id": "o1", "items": []}', "application/vnd.airlane.event+json; charset=utf-8"
    )
    # format is an annotation (no format checker): not asserted.
    validate(ORDER, b'{"id": "o1", "items": [], "email": "not an email"}', "application/json")


def test_json_errors_are_located():
    found = violation(ORDER, orjson.dumps({"id": 7, "items": [{"price": -1}]}))
    assert found.message == "payload does not conform to the JSON Schema"
    assert sorted(found.errors) == [
        "/id: 7 is not of type 'string'",
        "/items/0/price: -1 is less than the minimum of 0",
    ]
    assert "/id: 7 is not of type 'string'" in str(found)
    (missing,) = violation(ORDER, b"{}").errors[:1]
    assert missing == "(root): 'id' is a required property"


def test_json_errors_are_bounded():
    many = Schema.json({"type": "array", "items": {"type": "string"}})
    found = violation(many, orjson.dumps(list(range(50))))
    assert len(found.errors) == MAX_ERRORS + 1 and found.errors[-1] == "(more errors not shown)"


def test_not_json_and_wrong_content_type():
    assert violation(ORDER, b"{oops").message == "payload is not valid JSON"
    found = violation(ORDER, b"{}", "application/protobuf")
    assert "does not fit the schema; expected application/json" in found.message
    assert violation(PROTO, b"", "text/plain").message.startswith("content type 'text/plain'")


def test_protobuf_binary():
    cls = Validators().compiled(PROTO)
    validate(PROTO, cls(id=5, sku="x").SerializeToString(), "application/protobuf")
    # Unknown fields are allowed: a writer one version ahead adds field 9.
    validate(PROTO, cls(id=5).SerializeToString() + b"\x48\x01", "application/x-protobuf")
    found = violation(PROTO, b"\x12\x05ab", "application/protobuf")  # length 5, 2 bytes follow
    assert found.message == "payload is not an encoded shop.Order" and found.errors


def test_protobuf_missing_required_field():
    found = violation(PROTO2, b"", "application/protobuf")
    assert found.errors == ["missing required field id"]


def test_protobuf_json_mapping():
    validate(PROTO, b'{"id": "5", "sku": "x"}', "application/json")
    found = violation(PROTO, b'{"id": 5, "colour": "red"}')
    assert "JSON mapping" in found.message and "colour" in found.errors[0]
    assert violation(PROTO2, b"{}").errors == ["missing required field id"]


def test_validator_cache_is_reused_and_bounded():
    cache = Validators(maxsize=2)
    first = cache.compiled(ORDER)
    assert cache.compiled(ORDER) is first
    for n in range(3):
        cache.compiled(Schema.json({"maxLength": n}))
    assert len(cache) == 2 and cache.compiled(ORDER) is not first
    with pytest.raises(ValueError, match="at least 1"):
        Validators(maxsize=0)


def test_content_types():
    assert is_json_content_type("application/json; charset=utf-8")
    assert is_json_content_type("Application/Problem+JSON")
    assert not is_json_content_type("text/json-ish")
    assert is_protobuf_content_type("application/x-protobuf")
    assert not is_protobuf_content_type("application/octet-stream")

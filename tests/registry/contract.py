"""The registry contract: `SchemaRegistry` behaves the same over every `SchemaStore`.

Subclass `RegistryContract` and provide an async ``store`` fixture yielding an empty store.
"""

from __future__ import annotations

import orjson
import pytest

from airlane.registry import (
    Compatibility,
    IncompatibleSchema,
    InvalidCompatibility,
    InvalidSubject,
    RegistryError,
    Schema,
    SchemaRegistry,
    SchemaStore,
    SchemaVersion,
    SchemaViolation,
    SubjectNotFound,
    VersionNotFound,
)
from tests.registry.protos import field, message, proto_schema


def obj(**props: str) -> Schema:
    return Schema.json({"type": "object", "properties": {k: {"type": v} for k, v in props.items()}})


V1 = obj(id="string")
V2 = obj(id="string", note="string")
CLOSED_V1 = Schema.json(
    {"type": "object", "properties": {"id": {"type": "string"}}, "additionalProperties": False}
)
CLOSED_V2 = Schema.json(
    {
        "type": "object",
        "properties": {"id": {"type": "string"}, "note": {"type": "string"}},
        "additionalProperties": False,
    }
)
BREAKING = obj(id="integer")


class RegistryContract:
    """Behaviour every store gives the registry. Tests get an empty ``store``."""

    @pytest.fixture
    def registry(self, store: SchemaStore) -> SchemaRegistry:
        return SchemaRegistry(store)

    async def test_register_assigns_versions_from_one(self, registry: SchemaRegistry):
        first = await registry.register("orders", CLOSED_V1)
        second = await registry.register("orders", CLOSED_V2)
        assert (first.version, second.version) == (1, 2)
        assert first.id == CLOSED_V1.fingerprint and second.subject == "orders"
        assert await registry.versions("orders") == [1, 2]
        assert (await registry.get("orders")).schema == CLOSED_V2
        assert (await registry.get("orders", 1)) == first
        assert await registry.subjects() == ["orders"]

    async def test_register_is_idempotent(self, registry: SchemaRegistry):
        first = await registry.register("orders", CLOSED_V1)
        await registry.register("orders", CLOSED_V2)
        reformatted = Schema.json(orjson.dumps(CLOSED_V1.document, option=orjson.OPT_INDENT_2))
        assert await registry.register("orders", reformatted) == first
        assert await registry.versions("orders") == [1, 2]

    async def test_incompatible_schema_is_refused_with_reasons(self, registry: SchemaRegistry):
        await registry.register("orders", V1)
        with pytest.raises(IncompatibleSchema) as info:
            await registry.register("orders", BREAKING)
        error = info.value
        assert error.code == "incompatible_schema"
        assert "not BACKWARD compatible with subject 'orders'" in str(error)
        (problem,) = error.incompatibilities
        assert problem.path == "/properties/id/type" and problem.version == 1
        assert problem.direction == "backward"
        assert await registry.versions("orders") == [1]

    async def test_check_is_a_dry_run(self, registry: SchemaRegistry):
        await registry.register("orders", V1)
        assert await registry.check("orders", BREAKING)
        assert await registry.check("orders", V1) == []
        assert await registry.check("orders", obj(id="string", extra="integer")) != []
        assert await registry.check("new-subject", BREAKING) == []
        assert await registry.versions("orders") == [1]

    async def test_compatibility_per_subject(self, registry: SchemaRegistry):
        assert await registry.compatibility("orders") is Compatibility.BACKWARD
        await registry.set_compatibility("orders", "none")
        assert await registry.compatibility("orders") is Compatibility.NONE
        with pytest.raises(InvalidCompatibility) as info:
            await registry.set_compatibility("orders", "SIDEWAYS")
        assert info.value.code == "invalid_compatibility" and "FULL_TRANSITIVE" in str(info.value)
        assert await registry.compatibility("other") is Compatibility.BACKWARD
        await registry.register("orders", V1)
        assert (await registry.register("orders", BREAKING)).version == 2
        await registry.set_compatibility("orders", Compatibility.FULL)
        assert (await registry.register("orders", V1)).version == 1  # identical: no check
        with pytest.raises(IncompatibleSchema):
            await registry.register("orders", obj(id="boolean"))
        assert await registry.subjects() == ["orders"]

    async def test_forward_and_transitive_modes(self, store: SchemaStore):
        registry = SchemaRegistry(store, Compatibility.FORWARD_TRANSITIVE)
        await registry.register("n", Schema.json({"type": "number"}))
        await registry.register("n", Schema.json({"type": "integer"}))
        with pytest.raises(IncompatibleSchema) as info:
            await registry.register("n", Schema.json({"type": ["integer", "string"]}))
        assert {p.version for p in info.value.incompatibilities} == {1, 2}

    async def test_schema_type_change_needs_mode_none(self, registry: SchemaRegistry):
        await registry.register("events", V1)
        proto = proto_schema(message("Event", field("id", 1, "string")))
        with pytest.raises(IncompatibleSchema, match="schema type changed from JSON to PROTOBUF"):
            await registry.register("events", proto)
        await registry.set_compatibility("events", Compatibility.NONE)
        stored = await registry.register("events", proto)
        assert (await registry.get("events", stored.version)).schema.definition == proto.definition

    async def test_not_found_errors(self, registry: SchemaRegistry):
        with pytest.raises(SubjectNotFound) as info:
            await registry.get("ghost")
        assert info.value.code == "subject_not_found"
        with pytest.raises(SubjectNotFound):
            await registry.versions("ghost")
        with pytest.raises(SubjectNotFound):
            await registry.get("ghost", 1)
        await registry.register("orders", V1)
        with pytest.raises(VersionNotFound) as missing:
            await registry.get("orders", 7)
        assert missing.value.code == "version_not_found" and isinstance(
            missing.value, RegistryError
        )
        for bad in (0, -1, "2", True):
            with pytest.raises(VersionNotFound):
                await registry.get("orders", bad)

    async def test_invalid_subject_is_refused_everywhere(self, registry: SchemaRegistry):
        for call in (
            registry.register("bad subject", V1),
            registry.get("a/b"),
            registry.versions(""),
            registry.set_compatibility("a*", Compatibility.NONE),
            registry.validate("a>", b"{}", "application/json"),
            registry.delete_subject("x" * 201),
        ):
            with pytest.raises(InvalidSubject):
                await call

    async def test_dotted_subjects_do_not_collide(self, registry: SchemaRegistry):
        await registry.set_compatibility("a", Compatibility.NONE)
        for subject in ("a", "a.v", "a.v.1", "a.config", "a.b"):
            await registry.register(subject, V1)
        await registry.register("a", BREAKING)
        assert await registry.versions("a") == [1, 2]
        for subject in ("a.v", "a.v.1", "a.config", "a.b"):
            assert await registry.versions(subject) == [1]
            assert await registry.compatibility(subject) is Compatibility.BACKWARD
        assert await registry.subjects() == ["a", "a.b", "a.config", "a.v", "a.v.1"]
        await registry.delete_subject("a")
        assert await registry.subjects() == ["a.b", "a.config", "a.v", "a.v.1"]

    async def test_delete_subject_then_start_again(self, registry: SchemaRegistry):
        await registry.set_compatibility("orders", Compatibility.NONE)
        await registry.register("orders", V1)
        await registry.register("orders", BREAKING)
        assert await registry.delete_subject("orders") == [1, 2]
        assert await registry.subjects() == []
        assert await registry.compatibility("orders") is Compatibility.BACKWARD
        with pytest.raises(SubjectNotFound):
            await registry.delete_subject("orders")
        again = await registry.register("orders", BREAKING)
        assert again.version == 1

    async def test_validate_against_latest_or_a_version(self, registry: SchemaRegistry):
        await registry.set_compatibility("orders", Compatibility.NONE)
        await registry.register("orders", V1)
        await registry.register("orders", BREAKING)
        used = await registry.validate("orders", b'{"id": 5}', "application/json")
        assert used.version == 2
        assert (
            await registry.validate("orders", b'{"id": "x"}', "application/json", version=1)
        ).version == 1
        with pytest.raises(SchemaViolation) as info:
            await registry.validate("orders", b'{"id": "x"}', "application/json")
        assert (
            info.value.message
            == "payload does not conform to the JSON Schema (subject 'orders' version 2)"
        )
        assert info.value.errors == ["/id: 'x' is not of type 'integer'"]
        with pytest.raises(SubjectNotFound):
            await registry.validate("ghost", b"{}", "application/json")

    async def test_protobuf_round_trip_and_validation(self, registry: SchemaRegistry):
        v1 = proto_schema(message("Order", field("id", 1, "int64")))
        v2 = proto_schema(message("Order", field("id", 1, "int64"), field("sku", 2, "string")))
        await registry.register("orders.pb", v1)
        got = await registry.register("orders.pb", v2)
        assert got.version == 2 and (await registry.get("orders.pb")).schema == v2
        payload = registry.validators.compiled(v2)(id=1, sku="a").SerializeToString()
        await registry.validate("orders.pb", payload, "application/protobuf")
        with pytest.raises(IncompatibleSchema):
            await registry.register(
                "orders.pb", proto_schema(message("Order", field("id", 1, "string")))
            )

    async def test_store_create_refuses_a_taken_number(self, store: SchemaStore):
        assert await store.create(SchemaVersion("s", 1, V1))
        assert not await store.create(SchemaVersion("s", 1, V2))
        assert (await store.get("s", 1)).schema == V1
        assert await store.get("s", 2) is None
        assert await store.versions("s") == [1]
        assert await store.versions("t") == []

"""`MemorySchemaStore` against the registry contract."""

from __future__ import annotations

import pytest

from airlane.registry import (
    Compatibility,
    MemorySchemaStore,
    RegistrationConflict,
    Schema,
    SchemaRegistry,
    SchemaVersion,
)
from tests.registry.contract import RegistryContract


@pytest.fixture
def store() -> MemorySchemaStore:
    return MemorySchemaStore()


class TestMemoryStoreContract(RegistryContract):
    """The shared contract."""


class AlwaysBeaten(MemorySchemaStore):
    """Another node registers a version just before each of ours."""

    async def create(self, version: SchemaVersion) -> bool:
        rival = SchemaVersion(
            version.subject, version.version, Schema.json({"title": f"rival {version.version}"})
        )
        await super().create(rival)
        return await super().create(version)


async def test_lost_races_are_retried_then_give_up():
    registry = SchemaRegistry(AlwaysBeaten(), Compatibility.NONE, max_attempts=3)
    with pytest.raises(RegistrationConflict) as info:
        await registry.register("s", Schema.json({"type": "string"}))
    assert info.value.code == "registration_conflict"
    assert await registry.versions("s") == [1, 2, 3]
    with pytest.raises(ValueError, match="max_attempts"):
        SchemaRegistry(MemorySchemaStore(), max_attempts=0)


async def test_a_lost_race_rechecks_compatibility():
    """The winner's version is what the retry is checked against."""

    class BeatenOnce(MemorySchemaStore):
        beaten = False

        async def create(self, version: SchemaVersion) -> bool:
            if not self.beaten:
                self.beaten = True
                await super().create(
                    SchemaVersion(
                        version.subject, version.version, Schema.json({"type": "integer"})
                    )
                )
            return await super().create(version)

    registry = SchemaRegistry(BeatenOnce())
    from airlane.registry import IncompatibleSchema

    with pytest.raises(IncompatibleSchema):
        await registry.register("s", Schema.json({"type": "string"}))

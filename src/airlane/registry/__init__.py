"""The schema registry: versioned schemas per subject, compatibility checked on registration,
events validated on append, stored in JetStream KV so that every node sees the same registry.

    store = await JetStreamSchemaStore.open(nc.jetstream())   # or MemorySchemaStore()
    registry = SchemaRegistry(store)                          # default mode: BACKWARD
    v1 = await registry.register("orders", Schema.json(ORDER_SCHEMA))
    await registry.validate("orders", payload, "application/json")
"""

from airlane.registry.errors import (
    IncompatibleSchema,
    InvalidCompatibility,
    InvalidSchema,
    InvalidSubject,
    RegistrationConflict,
    RegistryError,
    RegistryUnavailable,
    SchemaViolation,
    SubjectNotFound,
    VersionNotFound,
)
from airlane.registry.modes import check_compatibility, check_pair
from airlane.registry.schemas import (
    Compatibility,
    Incompatibility,
    Schema,
    SchemaType,
    SchemaVersion,
    check_subject,
)
from airlane.registry.service import SchemaRegistry
from airlane.registry.store import (
    DEFAULT_BUCKET,
    MemorySchemaStore,
    SchemaStore,
)
from airlane.registry.validation import Validators, validate

__all__ = [
    "DEFAULT_BUCKET",
    "Compatibility",
    "Incompatibility",
    "IncompatibleSchema",
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
]


def __getattr__(name: str) -> object:
    # The JetStream store needs the NATS client: imported when first asked for, so that the
    # registry (and `import airlane`) does not load it for the in-memory default.
    if name == "JetStreamSchemaStore":
        from airlane.registry.jetstream_store import JetStreamSchemaStore

        return JetStreamSchemaStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

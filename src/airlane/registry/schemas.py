"""Schemas, versions and compatibility modes: the registry's values (pure, no I/O).

A `Schema` is parsed and checked when it is built, so an invalid one cannot exist: bad input
raises `InvalidSchema` with a message that says what is wrong. Two kinds are supported:

- JSON Schema: the document's text. It must be JSON (an object or a boolean) and valid against
  its metaschema (``$schema``, default draft 2020-12). ``$ref`` must be local JSON pointers
  (``#/$defs/name``), which keeps validation from ever fetching anything over the network.
- Protobuf: a serialized ``google.protobuf.FileDescriptorSet`` (what ``protoc
  --descriptor_set_out --include_imports`` writes) plus the fully qualified message name.

Equality and the ``fingerprint`` (a SHA-256) are over a canonical form (JSON with sorted keys;
the descriptor set re-serialized deterministically), so re-registering the same schema with
different whitespace is recognised as the same schema.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal
from urllib.parse import unquote

import orjson
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message import DecodeError
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from airlane.core.scope import split_scope
from airlane.registry.errors import InvalidSchema, InvalidSubject
from airlane.wire.limits import MAX_SCHEMA_DEPTH, json_depth

__all__ = [
    "MAX_SUBJECT_LENGTH",
    "Compatibility",
    "Direction",
    "Incompatibility",
    "Schema",
    "SchemaType",
    "SchemaVersion",
    "check_subject",
    "iter_refs",
    "resolve_pointer",
]

MAX_SUBJECT_LENGTH = 200
_SUBJECT_RE = re.compile(rf"[A-Za-z0-9._-]{{1,{MAX_SUBJECT_LENGTH}}}")

# Descriptor pools are costly to build (every file is linked); a schema version is parsed again
# each time it is read from the store, so pools are shared by content. 128 distinct descriptor
# sets is far more than the live versions a gateway validates against.
POOL_CACHE_SIZE = 128

Direction = Literal["backward", "forward"]


def check_subject(subject: str, *, scoped: bool = True) -> str:
    """Return ``subject`` if it is a valid subject name, else raise `InvalidSubject`. It may be
    in a tenant's scope (``@tenant/name``, `airlane.core.scope`: tenant and name together at
    most `MAX_SUBJECT_LENGTH` characters) unless ``scoped`` is false: what a client sends."""
    if not isinstance(subject, str):
        raise InvalidSubject(f"invalid subject {subject!r}")
    tenant, plain = split_scope(subject) if scoped else (None, subject)
    if _SUBJECT_RE.fullmatch(plain) is None:
        raise InvalidSubject(
            f"invalid subject {plain!r}: use 1 to {MAX_SUBJECT_LENGTH} of A-Z a-z 0-9 . _ -"
        )
    if tenant is not None and len(tenant) + len(plain) > MAX_SUBJECT_LENGTH:
        raise InvalidSubject(
            f"subject {plain!r} too long: with its tenant's name at most {MAX_SUBJECT_LENGTH}"
        )
    return subject


class SchemaType(StrEnum):
    """What kind of schema a version holds."""

    JSON = "JSON"
    PROTOBUF = "PROTOBUF"


class Compatibility(StrEnum):
    """What a new version must be compatible with (checked on registration).

    BACKWARD: readers on the new schema can read data written with the previous one.
    FORWARD: readers on the previous schema can read data written with the new one.
    FULL: both. The ``_TRANSITIVE`` variants check against every earlier version instead of
    only the latest. NONE checks nothing.
    """

    NONE = "NONE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @property
    def transitive(self) -> bool:
        """True if every earlier version is checked, not only the latest."""
        return self.value.endswith("_TRANSITIVE")

    @property
    def backward(self) -> bool:
        """True if the new schema must read data written with earlier ones."""
        return self.value.startswith(("BACKWARD", "FULL"))

    @property
    def forward(self) -> bool:
        """True if earlier schemas must read data written with the new one."""
        return self.value.startswith(("FORWARD", "FULL"))


@dataclass(frozen=True, slots=True)
class Incompatibility:
    """One reason why data written with one schema may be rejected by a reader of another.

    ``path`` is a JSON-pointer-like location in the schema (``/properties/address/zip`` for
    JSON Schema, ``/shop.Order/3`` (field number) for Protobuf). ``version`` and ``direction``
    are filled in by `airlane.registry.modes.check_compatibility`: the earlier version it
    conflicts with and whether the new schema is the reader (backward) or the writer (forward).
    """

    path: str
    reason: str
    version: int | None = None
    direction: Direction | None = None

    def __str__(self) -> str:
        where = self.path or "/"
        if self.version is None:
            return f"{where}: {self.reason}"
        against = f"{self.direction} " if self.direction else ""
        return f"{against}against version {self.version}, at {where}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible form, for error responses."""
        return {
            "path": self.path,
            "reason": self.reason,
            "version": self.version,
            "direction": self.direction,
        }


@dataclass(frozen=True, slots=True)
class Schema:
    """A parsed, checked schema. Build it with `Schema.json` or `Schema.protobuf`.

    ``definition`` is the JSON text (UTF-8) or the serialized FileDescriptorSet; ``message``
    is the fully qualified Protobuf message name (None for JSON Schema). Equality and hashing
    are by ``fingerprint``.
    """

    type: SchemaType = field(compare=False)
    definition: bytes = field(compare=False, repr=False)
    message: str | None = field(default=None, compare=False)
    fingerprint: str = field(init=False)
    _parsed: Any = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "type", SchemaType(self.type))
        except ValueError:
            raise InvalidSchema(f"unknown schema type {self.type!r}") from None
        if self.type is SchemaType.JSON:
            parsed, canonical = _parse_json_schema(self.definition)
        elif self.type is SchemaType.PROTOBUF:
            parsed, canonical = _parse_protobuf_schema(self.definition, self.message)
        digest = hashlib.sha256(self.type.value.encode() + b"\n" + canonical).hexdigest()
        object.__setattr__(self, "fingerprint", digest)
        object.__setattr__(self, "_parsed", parsed)

    @classmethod
    def json(cls, document: str | bytes | Mapping[str, Any] | bool) -> Schema:
        """A JSON Schema from its text, or from an already decoded document."""
        if isinstance(document, str):
            definition = document.encode()
        elif isinstance(document, bytes):
            definition = document
        else:
            definition = _dumps(document)
        return cls(SchemaType.JSON, definition)

    @classmethod
    def protobuf(
        cls, descriptor_set: bytes | descriptor_pb2.FileDescriptorSet, message: str
    ) -> Schema:
        """A Protobuf schema: a FileDescriptorSet (or its bytes) and a message's full name."""
        if isinstance(descriptor_set, descriptor_pb2.FileDescriptorSet):
            descriptor_set = descriptor_set.SerializeToString(deterministic=True)
        return cls(SchemaType.PROTOBUF, descriptor_set, message.lstrip("."))

    @property
    def document(self) -> Any:
        """The decoded JSON Schema document (a dict or a bool)."""
        if self.type is not SchemaType.JSON:
            raise TypeError("only a JSON Schema has a document")
        return self._parsed

    @property
    def descriptor(self) -> Any:
        """The message's ``google.protobuf.descriptor.Descriptor``."""
        if self.type is not SchemaType.PROTOBUF:
            raise TypeError("only a Protobuf schema has a message descriptor")
        return self._parsed

    @property
    def text(self) -> str:
        """The definition as text (JSON Schema only)."""
        if self.type is not SchemaType.JSON:
            raise TypeError("a Protobuf schema is binary; use `definition`")
        return self.definition.decode()


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """A schema registered under a subject as version ``version`` (1, 2, 3 ...)."""

    subject: str
    version: int
    schema: Schema

    @property
    def id(self) -> str:
        """The schema's SHA-256 fingerprint (the same schema has the same id everywhere)."""
        return self.schema.fingerprint

    @property
    def type(self) -> SchemaType:
        """The schema's type."""
        return self.schema.type


def _dumps(document: object) -> bytes:
    try:
        return orjson.dumps(document, option=orjson.OPT_SORT_KEYS)
    except TypeError as exc:
        raise InvalidSchema(f"schema is not JSON-serializable: {exc}") from None


def _parse_json_schema(definition: bytes) -> tuple[Any, bytes]:
    try:
        document = orjson.loads(definition)
    except orjson.JSONDecodeError as exc:
        raise InvalidSchema(f"schema is not valid JSON: {exc}") from None
    if not isinstance(document, dict | bool):
        raise InvalidSchema(
            f"a JSON Schema must be an object or a boolean, not {type(document).__name__}"
        )
    if json_depth(document, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
        raise InvalidSchema(f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
    cls = validator_for(document, default=None) if isinstance(document, dict) else None
    if isinstance(document, dict) and "$schema" in document and cls is None:
        raise InvalidSchema(f"unknown $schema {document['$schema']!r}")
    cls = cls or validator_for(True)
    try:
        cls.check_schema(document)
    except SchemaError as exc:
        where = "/" + "/".join(str(part) for part in exc.absolute_path)
        raise InvalidSchema(f"not a valid JSON Schema at {where}: {exc.message}") from None
    for ref in iter_refs(document):
        if not ref.startswith("#"):
            raise InvalidSchema(f"$ref {ref!r} is not local; only '#/...' references are supported")
        if resolve_pointer(document, ref) is None:
            raise InvalidSchema(f"$ref {ref!r} does not resolve inside the schema")
    return document, _dumps(document)


# Keywords whose values are data, not subschemas: a "$ref" key inside them is not a reference.
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})
# Keywords whose values map names to subschemas: the names are not keywords ("enum" may well
# be a property name).
_SCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)


def iter_refs(schema: Any) -> Iterator[str]:
    """Every ``$ref`` string in a JSON Schema (sub)schema."""
    if isinstance(schema, list):
        for item in schema:
            yield from iter_refs(item)
        return
    if not isinstance(schema, dict):
        return
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str):
            yield value
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            for subschema in value.values():
                yield from iter_refs(subschema)
        elif key not in _DATA_KEYWORDS:
            yield from iter_refs(value)


_MISSING: Any = object()


def resolve_pointer(root: Any, ref: str) -> Any | None:
    """The subschema a local ``$ref`` (``#`` or ``#/a/b``, RFC 6901) points at, or None."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return None  # anchors and remote references are not supported
    node = root
    for raw in ref[2:].split("/"):
        # RFC 6901 section 4: ~1 before ~0; %-escapes come from the URI fragment form.
        token = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            node = node.get(token, _MISSING)
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
        if node is _MISSING:
            return None
    return node


def _parse_protobuf_schema(definition: bytes, message: str | None) -> tuple[Any, bytes]:
    if not message:
        raise InvalidSchema("a Protobuf schema needs the fully qualified message name")
    try:
        files = descriptor_pb2.FileDescriptorSet.FromString(definition)
    except DecodeError as exc:
        raise InvalidSchema(f"not a serialized FileDescriptorSet: {exc}") from None
    canonical = files.SerializeToString(deterministic=True)
    pool = _pool(canonical)
    try:
        descriptor = pool.FindMessageTypeByName(message)
    except KeyError:
        known = sorted(_message_names(files))
        raise InvalidSchema(
            f"message {message!r} is not in the descriptor set (it defines: "
            f"{', '.join(known[:20]) or 'no messages'})"
        ) from None
    return descriptor, message.encode() + b"\n" + canonical


def _message_names(files: Any) -> Iterator[str]:
    def walk(prefix: str, messages: Any) -> Iterator[str]:
        for msg in messages:
            name = f"{prefix}{msg.name}"
            yield name
            yield from walk(name + ".", msg.nested_type)

    for file in files.file:
        yield from walk(f"{file.package}." if file.package else "", file.message_type)


@functools.lru_cache(maxsize=POOL_CACHE_SIZE)
def _pool(canonical: bytes) -> Any:
    """A private descriptor pool holding every file of the set, linked in dependency order.

    Private, because two versions of one subject define the same names differently.
    Dependencies missing from the set are taken from the default pool (the well-known types).
    """
    files = descriptor_pb2.FileDescriptorSet.FromString(canonical)
    by_name = {file.name: file for file in files.file}
    if len(by_name) != len(files.file):
        raise InvalidSchema("the descriptor set holds two files with the same name")
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(name: str, chain: tuple[str, ...]) -> None:
        if name in added:
            return
        if name in chain:
            raise InvalidSchema(f"import cycle in the descriptor set: {' -> '.join(chain)}")
        file = by_name.get(name)
        if file is None:
            file = _well_known_file(name)
        for dependency in file.dependency:
            add(dependency, (*chain, name))
        try:
            pool.Add(file)
        except (TypeError, ValueError, KeyError) as exc:
            raise InvalidSchema(f"cannot link {name!r}: {exc}") from None
        added.add(name)

    for name in by_name:
        add(name, ())
    return pool


def _well_known_file(name: str) -> Any:
    # Importing the generated modules registers the well-known types in the default pool.
    from google.protobuf import (  # noqa: F401
        any_pb2,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        struct_pb2,
        timestamp_pb2,
        wrappers_pb2,
    )

    try:
        found = descriptor_pool.Default().FindFileByName(name)
    except KeyError:
        raise InvalidSchema(
            f"the descriptor set lacks {name!r} (build it with --include_imports)"
        ) from None
    file = descriptor_pb2.FileDescriptorProto()
    found.CopyToProto(file)
    return file

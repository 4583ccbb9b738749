"""Validation of event payloads against a schema (pure; no I/O).

`Validators.validate` raises `SchemaViolation` with at most `MAX_ERRORS` located errors.

- JSON Schema: the payload is parsed with orjson and validated with the schema's draft
  (``jsonschema``); ``format`` is not asserted (no format checker), as the draft's default
  says, which is also what the compatibility checker assumes.
- Protobuf: a binary payload (``application/protobuf``, ``application/x-protobuf``) is parsed
  with the message class; a JSON payload (``application/json``) with the Protobuf JSON
  mapping, which rejects unknown fields. Missing proto2 required fields are reported.
  Unknown fields in a *binary* payload are allowed: that is how Protobuf carries data from a
  newer writer to an older reader (forward compatibility), and rejecting them would make a
  FORWARD-compatible registration useless to producers one version ahead.

Compiled validators and message classes are cached per schema fingerprint (a bounded LRU),
so the cost of compiling a schema is paid once per version, not once per event.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Any

import orjson
import referencing
from google.protobuf import json_format, message_factory
from google.protobuf.message import DecodeError
from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for
from referencing.exceptions import Unresolvable

from airlane.registry.errors import InvalidSchema, SchemaViolation
from airlane.registry.schemas import Schema, SchemaType

__all__ = [
    "DEFAULT_CACHE_SIZE",
    "MAX_ERRORS",
    "Validators",
    "is_json_content_type",
    "is_protobuf_content_type",
    "validate",
]

MAX_ERRORS = 10
"""At most this many errors are listed in a `SchemaViolation` (one bad event stays short)."""
DEFAULT_CACHE_SIZE = 256
"""Compiled validators kept: a gateway validates against a few live versions per subject."""

_PROTOBUF_TYPES = frozenset(
    {"application/protobuf", "application/x-protobuf", "application/vnd.google.protobuf"}
)


def _media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def is_json_content_type(content_type: str) -> bool:
    """``application/json`` or any ``+json`` media type (parameters ignored)."""
    media = _media_type(content_type)
    return media == "application/json" or media.endswith("+json")


def is_protobuf_content_type(content_type: str) -> bool:
    """One of the media types in use for binary Protobuf."""
    return _media_type(content_type) in _PROTOBUF_TYPES


class Validators:
    """A bounded cache of compiled validators, keyed by schema fingerprint."""

    def __init__(self, maxsize: int = DEFAULT_CACHE_SIZE) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self.maxsize = maxsize
        self._compiled: OrderedDict[str, Any] = OrderedDict()

    def __len__(self) -> int:
        return len(self._compiled)

    def validate(self, schema: Schema, payload: bytes, content_type: str) -> None:
        """Raise `SchemaViolation` unless ``payload`` (of ``content_type``) conforms."""
        if schema.type is SchemaType.JSON:
            if not is_json_content_type(content_type):
                raise _wrong_content_type(content_type, "application/json")
            self._validate_json(schema, payload)
        elif is_protobuf_content_type(content_type):
            self._validate_protobuf(schema, payload)
        elif is_json_content_type(content_type):
            self._validate_protobuf_json(schema, payload)
        else:
            raise _wrong_content_type(content_type, "application/protobuf or application/json")

    def compiled(self, schema: Schema) -> Any:
        """The JSON Schema validator or Protobuf message class for ``schema``."""
        found = self._compiled.get(schema.fingerprint)
        if found is not None:
            self._compiled.move_to_end(schema.fingerprint)
            return found
        found = _compile(schema)
        self._compiled[schema.fingerprint] = found
        if len(self._compiled) > self.maxsize:
            self._compiled.popitem(last=False)
        return found

    def _validate_json(self, schema: Schema, payload: bytes) -> None:
        try:
            instance = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise SchemaViolation("payload is not valid JSON", [str(exc)]) from None
        pending = self.compiled(schema).iter_errors(instance)
        try:
            found = list(itertools.islice(pending, MAX_ERRORS + 1))
        except Unresolvable as exc:  # a reference parsing could not vouch for ($id tricks)
            raise InvalidSchema(f"schema reference cannot be resolved: {exc}") from None
        except RecursionError:  # a payload nested deeper than validation can follow
            raise SchemaViolation(
                "payload nests too deep to validate", ["(nested past the validator's stack)"]
            ) from None
        if found:
            errors = [f"{_pointer(error.absolute_path)}: {error.message}" for error in found]
            if len(errors) > MAX_ERRORS:
                errors[MAX_ERRORS:] = ["(more errors not shown)"]
            raise SchemaViolation("payload does not conform to the JSON Schema", errors)

    def _validate_protobuf(self, schema: Schema, payload: bytes) -> None:
        message = self.compiled(schema)()
        try:
            message.ParseFromString(payload)
        except DecodeError as exc:
            raise SchemaViolation(
                f"payload is not an encoded {schema.message}", [str(exc)]
            ) from None
        _check_required(message, schema)

    def _validate_protobuf_json(self, schema: Schema, payload: bytes) -> None:
        message = self.compiled(schema)()
        try:
            json_format.Parse(payload.decode(), message)
        except (json_format.ParseError, UnicodeDecodeError) as exc:
            reason = f"payload is not {schema.message} in the Protobuf JSON mapping"
            raise SchemaViolation(reason, [str(exc)]) from None
        _check_required(message, schema)


_DEFAULT = Validators()


def validate(schema: Schema, payload: bytes, content_type: str) -> None:
    """Raise `SchemaViolation` unless ``payload`` conforms (a process-wide cache)."""
    _DEFAULT.validate(schema, payload, content_type)


def _compile(schema: Schema) -> Any:
    if schema.type is SchemaType.PROTOBUF:
        return message_factory.GetMessageClass(schema.descriptor)
    cls = validator_for(schema.document, default=Draft202012Validator)
    # An empty registry: a schema's references are local (checked when it was parsed), and
    # nothing must ever be fetched from the network while validating.
    return cls(schema.document, registry=referencing.Registry())


def _check_required(message: Any, schema: Schema) -> None:
    missing = message.FindInitializationErrors()
    if missing:
        errors = [f"missing required field {name}" for name in missing[:MAX_ERRORS]]
        raise SchemaViolation(f"payload lacks required fields of {schema.message}", errors)


def _pointer(path: Any) -> str:
    parts = [str(part).replace("~", "~0").replace("/", "~1") for part in path]
    return "/" + "/".join(parts) if parts else "(root)"


def _wrong_content_type(content_type: str, expected: str) -> SchemaViolation:
    return SchemaViolation(
        f"content type {content_type!r} does not fit the schema; expected {expected}"
    )

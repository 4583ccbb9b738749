"""The schema registry API.

=======  ==========================================  ============================================
method   path                                        what
=======  ==========================================  ============================================
GET      /v1/schemas                                 the subjects
GET      /v1/schemas/{subject}                       its versions and compatibility mode
DELETE   /v1/schemas/{subject}                       delete every version
POST     /v1/schemas/{subject}/versions              register a schema (idempotent); 409 with the
                                                     incompatibilities if the mode forbids it
GET      /v1/schemas/{subject}/versions/{n|latest}   one version
POST     /v1/schemas/{subject}/check                 would it register? (a dry run)
GET/PUT  /v1/schemas/{subject}/compatibility         ``{"compatibility": "backward"}``: backward,
                                                     forward, full (``_transitive`` too), none
POST     /v1/schemas/{subject}/validate              check a payload against the latest version
=======  ==========================================  ============================================

A schema is ``{"schema_type": "json", "schema": <JSON Schema>}``, or
``{"schema_type": "protobuf", "descriptor_set_base64": <FileDescriptorSet>, "message":
"pkg.Msg"}`` (``protoc --include_imports --descriptor_set_out``). A payload to validate is
``{"data": <JSON>}`` or ``{"data_base64": ..., "content_type": "application/x-protobuf"}``.

Event types are subjects: an event of type ``reward.v1`` appended to any log is validated
against subject ``reward.v1`` when it exists (`airlane.gateway.eventsourcing`).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from airlane.registry import IncompatibleSchema, Schema, SchemaRegistry, SchemaVersion
from airlane.security import Action, Principal
from airlane.transports.http.asgi import (
    HttpError,
    Receive,
    Request,
    Send,
    allow_methods,
    read_json,
    send_body,
    send_json,
)
from airlane.transports.http.context import AppContext

__all__ = ["handle_schemas", "schema_from_body", "version_to_dict"]


def version_to_dict(version: SchemaVersion) -> dict[str, Any]:
    """A registered version as JSON."""
    schema = version.schema
    out: dict[str, Any] = {
        "subject": version.subject,
        "version": version.version,
        "id": version.id,
        "schema_type": schema.type.value,
    }
    if schema.message is None:
        out["schema"] = schema.document
    else:
        out["message"] = schema.message
        out["descriptor_set_base64"] = base64.b64encode(schema.definition).decode("ascii")
    return out


def schema_from_body(body: Any) -> Schema:
    """The `Schema` a request describes (`InvalidSchema` 422 or a 400 if malformed)."""
    if not isinstance(body, dict):
        raise HttpError(400, "send a JSON object describing the schema")
    kind = str(body.get("schema_type", "json")).lower()
    if kind == "json":
        if "schema" not in body:
            raise HttpError(400, "a JSON Schema goes in 'schema'", param="schema")
        return Schema.json(body["schema"])
    if kind == "protobuf":
        message = body.get("message")
        if not isinstance(message, str):
            raise HttpError(400, "a Protobuf schema names its 'message'", param="message")
        try:
            descriptors = base64.b64decode(body.get("descriptor_set_base64", ""), validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise HttpError(
                400, "'descriptor_set_base64' is not base64", param="descriptor_set_base64"
            ) from None
        return Schema.protobuf(descriptors, message)
    raise HttpError(400, "'schema_type' must be 'json' or 'protobuf'", param="schema_type")


def _payload(body: Any) -> tuple[bytes, str]:
    if not isinstance(body, dict):
        raise HttpError(400, "send {'data': ...} or {'data_base64': ..., 'content_type': ...}")
    if "data_base64" in body:
        try:
            data = base64.b64decode(body["data_base64"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise HttpError(400, "'data_base64' is not base64", param="data_base64") from None
        return data, str(body.get("content_type", "application/x-protobuf"))
    if "data" in body:
        return orjson.dumps(body["data"]), str(body.get("content_type", "application/json"))
    raise HttpError(400, "give 'data' (JSON) or 'data_base64'", param="data")


async def handle_schemas(
    app: AppContext, principal: Principal, request: Request, receive: Receive, send: Send
) -> None:
    """Route a request under ``/v1/schemas``."""
    registry = app.gateway.events.registry
    rest = request.path[len("/v1/schemas") :].strip("/")
    parts = rest.split("/") if rest else []
    method = request.method
    if not parts:
        allow_methods(method, "GET")
        await send_json(send, 200, {"subjects": await registry.subjects()})
        return
    subject, action = parts[0], parts[1:]
    writing = method in ("POST", "PUT", "DELETE") and action not in (["check"], ["validate"])
    app.gateway.security.authorize(
        principal, Action.PUBLISH if writing else Action.SUBSCRIBE, f"schemas/{subject}"
    )
    if not action:
        await _subject(registry, subject, method, send)
    elif action == ["versions"]:
        allow_methods(method, "POST")
        await _register(app, registry, subject, receive, send)
    elif len(action) == 2 and action[0] == "versions":
        allow_methods(method, "GET")
        number = action[1]
        if number != "latest" and not number.isdigit():
            raise HttpError(400, "a version is a number or 'latest'", param="version")
        version = await registry.get(subject, "latest" if number == "latest" else int(number))
        await send_json(send, 200, version_to_dict(version))
    elif action == ["check"]:
        allow_methods(method, "POST")
        schema = schema_from_body(await read_json(receive, app.config.max_body_bytes))
        problems = await registry.check(subject, schema)
        body = {"compatible": not problems, "incompatibilities": [p.to_dict() for p in problems]}
        await send_json(send, 200, body)
    elif action == ["compatibility"]:
        await _compatibility(app, registry, subject, method, receive, send)
    elif action == ["validate"]:
        allow_methods(method, "POST")
        data, content_type = _payload(await read_json(receive, app.config.max_body_bytes))
        version = await registry.validate(subject, data, content_type)
        await send_json(send, 200, {"valid": True, "version": version.version})
    else:
        raise HttpError(404, f"no schema resource {request.path[:200]}", code="not_found")


async def _subject(registry: SchemaRegistry, subject: str, method: str, send: Send) -> None:
    if method == "GET":
        versions = await registry.versions(subject)
        mode = await registry.compatibility(subject)
        body = {"subject": subject, "versions": versions, "compatibility": mode.value.lower()}
        await send_json(send, 200, body)
    elif method == "DELETE":
        await registry.delete_subject(subject)
        await send_body(send, 204, b"", b"text/plain")
    else:
        allow_methods(method, "GET, DELETE")


async def _compatibility(
    app: AppContext,
    registry: SchemaRegistry,
    subject: str,
    method: str,
    receive: Receive,
    send: Send,
) -> None:
    if method == "PUT":
        body = await read_json(receive, app.config.max_body_bytes)
        mode = body.get("compatibility") if isinstance(body, dict) else None
        if not isinstance(mode, str):
            raise HttpError(400, "send {'compatibility': 'backward'}", param="compatibility")
        await registry.set_compatibility(subject, mode)
    else:
        allow_methods(method, "GET, PUT")
    current = await registry.compatibility(subject)
    await send_json(send, 200, {"subject": subject, "compatibility": current.value.lower()})


async def _register(
    app: AppContext, registry: SchemaRegistry, subject: str, receive: Receive, send: Send
) -> None:
    schema = schema_from_body(await read_json(receive, app.config.max_body_bytes))
    try:
        version = await registry.register(subject, schema)
    except IncompatibleSchema as exc:
        # The details a user needs to fix the schema, not only that it failed.
        await send_json(
            send,
            409,
            {
                "error": {
                    "message": str(exc),
                    "type": "invalid_request_error",
                    "code": exc.code,
                    "incompatibilities": [p.to_dict() for p in exc.incompatibilities],
                }
            },
        )
        return
    await send_json(send, 200, version_to_dict(version))

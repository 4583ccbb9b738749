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

from airlane.core.errors import BadRequest, NotFound
from airlane.core.numbers import decimal
from airlane.gateway import Principal, Schema, Schemas, version_to_dict
from airlane.transports.http.asgi import (
    Receive,
    Request,
    Send,
    allow_methods,
    read_json,
    send_body,
    send_json,
)
from airlane.transports.http.context import AppContext

__all__ = ["handle_schemas", "schema_from_body"]


def schema_from_body(body: Any) -> Schema:
    """The `Schema` a request describes (`InvalidSchema` 422 or a 400 if malformed)."""
    if not isinstance(body, dict):
        raise BadRequest("send a JSON object describing the schema")
    kind = str(body.get("schema_type", "json")).lower()
    if kind == "json":
        if "schema" not in body:
            raise BadRequest("a JSON Schema goes in 'schema'", param="schema")
        return Schema.json(body["schema"])
    if kind == "protobuf":
        message = body.get("message")
        if not isinstance(message, str):
            raise BadRequest("a Protobuf schema names its 'message'", param="message")
        try:
            descriptors = base64.b64decode(body.get("descriptor_set_base64", ""), validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise BadRequest(
                "'descriptor_set_base64' is not base64", param="descriptor_set_base64"
            ) from None
        return Schema.protobuf(descriptors, message)
    raise BadRequest("'schema_type' must be 'json' or 'protobuf'", param="schema_type")


def _payload(body: Any) -> tuple[bytes, str]:
    if not isinstance(body, dict):
        raise BadRequest("send {'data': ...} or {'data_base64': ..., 'content_type': ...}")
    if "data_base64" in body:
        try:
            data = base64.b64decode(body["data_base64"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise BadRequest("'data_base64' is not base64", param="data_base64") from None
        return data, str(body.get("content_type", "application/x-protobuf"))
    if "data" in body:
        return orjson.dumps(body["data"]), str(body.get("content_type", "application/json"))
    raise BadRequest("give 'data' (JSON) or 'data_base64'", param="data")


async def handle_schemas(
    app: AppContext, principal: Principal, request: Request, receive: Receive, send: Send
) -> None:
    """Route a request under ``/v1/schemas``."""
    schemas = app.gateway.schemas
    rest = request.path[len("/v1/schemas") :].strip("/")
    parts = rest.split("/") if rest else []
    method = request.method
    if not parts:
        allow_methods(method, "GET")
        await send_json(send, 200, {"subjects": await schemas.subjects(principal)})
        return
    subject, action = parts[0], parts[1:]
    limit = app.config.max_body_bytes
    if not action:
        await _subject(schemas, principal, subject, method, send)
    elif action == ["versions"]:
        allow_methods(method, "POST")
        schema = schema_from_body(await read_json(receive, limit))
        version = await schemas.register(principal, subject, schema)
        await send_json(send, 200, version_to_dict(version))
    elif len(action) == 2 and action[0] == "versions":
        allow_methods(method, "GET")
        number = action[1]
        parsed = decimal(number)
        if number != "latest" and parsed is None:
            raise BadRequest("a version is a number or 'latest'", param="version")
        version = await schemas.version(principal, subject, "latest" if parsed is None else parsed)
        await send_json(send, 200, version_to_dict(version))
    elif action == ["check"]:
        allow_methods(method, "POST")
        schema = schema_from_body(await read_json(receive, limit))
        problems = await schemas.check(principal, subject, schema)
        body = {"compatible": not problems, "incompatibilities": [p.to_dict() for p in problems]}
        await send_json(send, 200, body)
    elif action == ["compatibility"]:
        if method == "PUT":
            body = await read_json(receive, limit)
            mode = body.get("compatibility") if isinstance(body, dict) else None
            if not isinstance(mode, str):
                raise BadRequest("send {'compatibility': 'backward'}", param="compatibility")
            current = await schemas.set_compatibility(principal, subject, mode)
        else:
            allow_methods(method, "GET, PUT")
            current = await schemas.compatibility(principal, subject)
        await send_json(send, 200, {"subject": subject, "compatibility": current.value.lower()})
    elif action == ["validate"]:
        allow_methods(method, "POST")
        data, content_type = _payload(await read_json(receive, limit))
        version = await schemas.validate(principal, subject, data, content_type)
        await send_json(send, 200, {"valid": True, "version": version.version})
    else:
        raise NotFound(f"no schema resource {request.path[:200]}")


async def _subject(
    schemas: Schemas, principal: Principal, subject: str, method: str, send: Send
) -> None:
    if method == "GET":
        versions, mode = await schemas.describe(principal, subject)
        body = {"subject": subject, "versions": versions, "compatibility": mode.value.lower()}
        await send_json(send, 200, body)
    elif method == "DELETE":
        await schemas.delete(principal, subject)
        await send_body(send, 204, b"", b"text/plain")
    else:
        allow_methods(method, "GET, DELETE")

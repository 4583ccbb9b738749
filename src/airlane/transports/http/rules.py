"""The rules API: streaming SQL rules over MQTT topics, event logs and streams.

=======  ==========================================  ============================================
method   path                                        what
=======  ==========================================  ============================================
GET      /v1/rules                                   the caller's tenant's rules, briefly
POST     /v1/rules/test                              run SQL over sample messages, nothing kept
PUT      /v1/rules/{name}                            add (201) or replace (200) a rule
GET      /v1/rules/{name}                            its definition, counters and held rows
DELETE   /v1/rules/{name}                            stop it; forget its state and its logs
GET      /v1/rules/{name}/approvals                  the rows it holds for approval
POST     /v1/rules/{name}/approvals/{id}             ``{"approve": true}`` or ``false``: decide
=======  ==========================================  ============================================

A rule is ``{"sql": "SELECT ...", "actions": [...]}`` (`airlane.gateway.rules.definition`); a
bad one is a 400 whose ``param`` names the field (``sql`` with the parser's line and column).
A test is ``{"sql": ..., "messages": [{"payload": {...}, "ts": 0, "topic": "a/b"}]}`` and
answers ``{"columns": [...], "outputs": [...], "stats": {...}}``.
"""

from __future__ import annotations

from airlane.core.errors import BadRequest, NotFound
from airlane.gateway import Principal
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

__all__ = ["handle_rules"]


async def handle_rules(
    app: AppContext, principal: Principal, request: Request, receive: Receive, send: Send
) -> None:
    """Route a request under ``/v1/rules``."""
    rules = app.gateway.rules
    rest = request.path[len("/v1/rules") :].strip("/")
    parts = rest.split("/") if rest else []
    method = request.method
    if not parts:
        allow_methods(method, "GET")
        await send_json(send, 200, {"rules": rules.names(principal)})
        return
    if parts == ["test"]:
        allow_methods(method, "POST")
        body = await read_json(receive, app.config.max_body_bytes)
        await send_json(send, 200, rules.test(principal, body))
        return
    name = parts[0]
    if len(parts) == 1:
        if method == "PUT":
            body = await read_json(receive, app.config.max_body_bytes)
            described, created = await rules.put(principal, name, body)
            await send_json(send, 201 if created else 200, described)
        elif method == "GET":
            await send_json(send, 200, rules.get(principal, name))
        elif method == "DELETE":
            await rules.delete(principal, name)
            await send_body(send, 204, b"", b"text/plain")
        else:
            allow_methods(method, "GET, PUT, DELETE")
        return
    if parts[1] == "approvals" and len(parts) == 2:
        allow_methods(method, "GET")
        await send_json(send, 200, {"approvals": rules.pending(principal, name)})
        return
    if parts[1] == "approvals" and len(parts) == 3:
        allow_methods(method, "POST")
        body = await read_json(receive, app.config.max_body_bytes)
        if not isinstance(body, dict) or not isinstance(body.get("approve"), bool):
            raise BadRequest('send {"approve": true} or {"approve": false}', param="approve")
        decided = await rules.decide(principal, name, parts[2], approve=body["approve"])
        await send_json(send, 200, decided)
        return
    raise NotFound(f"no rule resource {request.path[:200]}")

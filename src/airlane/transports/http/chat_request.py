"""`airlane.gateway.chat_request` for the HTTP transport: a bad request is a 400 naming the
parameter."""

from __future__ import annotations

from typing import Any

from airlane.gateway.chat_request import ChatRequest, InvalidChatRequest
from airlane.gateway.chat_request import parse_chat_request as parse_body
from airlane.transports.http.asgi import HttpError

__all__ = ["ChatRequest", "parse_chat_request"]


def parse_chat_request(body: Any) -> ChatRequest:
    """Validate an OpenAI chat request body; raise `HttpError` 400 if it is invalid."""
    try:
        return parse_body(body)
    except InvalidChatRequest as exc:
        raise HttpError(400, exc.message, param=exc.param, code=exc.code) from None

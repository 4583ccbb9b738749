"""Validation of OpenAI chat requests: every mistake is an `InvalidChatRequest` that names the
parameter (``invalid_parameter``: HTTP answers it with 400, AIRC with an ``ERROR`` frame).

Only what the gateway itself reads is checked strictly; other fields are forwarded to an
upstream unchanged, where that server judges them. Every wire that can start a generation
parses its request body here, so they cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airlane.backends.base import GenerationRequest
from airlane.core import OrphanMode
from airlane.core.errors import BadRequest, ErrorCode

__all__ = ["ChatRequest", "InvalidChatRequest", "parse_chat_request"]

# Fields consumed here; every other field is forwarded to an upstream unchanged.
_KNOWN = {
    "model", "messages", "stream", "stream_options", "seed", "max_tokens",
    "max_completion_tokens", "temperature", "tools", "tool_choice", "n", "airlane",
    "reasoning_effort",
}  # fmt: skip
_MAX_TOKENS = 1 << 20
_TOOL_CHOICE_MODES = ("none", "auto", "required")


class InvalidChatRequest(BadRequest, ValueError):
    """A chat request broke a rule; ``param`` names the offending parameter."""

    code = ErrorCode.INVALID_PARAMETER
    param: str

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message, param=param)
        self.message = message


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A validated chat request: the generation plus how to deliver it."""

    generation: GenerationRequest
    stream: bool
    include_usage: bool
    orphan: str | None


def _expect(condition: bool, message: str, param: str) -> None:
    if not condition:
        raise InvalidChatRequest(message, param)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _object(body: dict[str, Any], key: str) -> dict[str, Any]:
    value = body.get(key)
    _expect(value is None or isinstance(value, dict), f"'{key}' must be an object", key)
    return value or {}


def _check_tools(tools: Any, tool_choice: Any) -> None:
    _expect(tools is None or isinstance(tools, list), "'tools' must be an array", "tools")
    for i, tool in enumerate(tools or []):
        function = tool.get("function") if isinstance(tool, dict) else None
        _expect(
            isinstance(function, dict) and isinstance(function.get("name"), str),
            f"'tools[{i}]' must be an object with a 'function' that has a 'name'",
            f"tools[{i}]",
        )
    if tool_choice is None or tool_choice in _TOOL_CHOICE_MODES:
        return
    function = tool_choice.get("function") if isinstance(tool_choice, dict) else None
    _expect(
        isinstance(function, dict) and isinstance(function.get("name"), str),
        "'tool_choice' must be 'none', 'auto', 'required' or {'type': 'function',"
        " 'function': {'name': ...}}",
        "tool_choice",
    )


def parse_chat_request(body: Any) -> ChatRequest:
    """Validate an OpenAI chat request body."""
    _expect(isinstance(body, dict), "the request body must be a JSON object", "body")
    model = body.get("model")
    _expect(isinstance(model, str) and 0 < len(model) <= 256, "'model' must be a string", "model")
    messages = body.get("messages")
    _expect(
        isinstance(messages, list)
        and bool(messages)
        and all(isinstance(m, dict) for m in messages),
        "'messages' must be a non-empty array of message objects",
        "messages",
    )
    stream = body.get("stream", False)
    _expect(isinstance(stream, bool), "'stream' must be a boolean", "stream")
    options = _object(body, "stream_options")
    seed = body.get("seed")
    _expect(seed is None or _is_int(seed), "'seed' must be an integer", "seed")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    _expect(
        max_tokens is None or (_is_int(max_tokens) and 0 < max_tokens <= _MAX_TOKENS),
        f"'max_tokens' must be an integer from 1 to {_MAX_TOKENS}",
        "max_tokens",
    )
    temperature = body.get("temperature")
    _expect(
        temperature is None
        or (
            isinstance(temperature, int | float)
            and temperature is not True
            and temperature is not False
        ),
        "'temperature' must be a number",
        "temperature",
    )
    tools, tool_choice = body.get("tools"), body.get("tool_choice")
    _check_tools(tools, tool_choice)
    _expect(body.get("n", 1) == 1, "only n=1 is supported", "n")
    extension = _object(body, "airlane")
    orphan = extension.get("orphan")
    _expect(
        orphan is None or orphan in {m.value for m in OrphanMode},
        "'airlane.orphan' must be 'keep', 'grace' or 'cancel'",
        "airlane.orphan",
    )
    generation = GenerationRequest(
        model=model,
        messages=messages,
        seed=seed,
        max_tokens=max_tokens,
        temperature=temperature,
        tools=tools or None,
        tool_choice=tool_choice,
        reasoning=bool(extension.get("reasoning")) or body.get("reasoning_effort") is not None,
        extra={k: v for k, v in body.items() if k not in _KNOWN},
    )
    return ChatRequest(generation, stream, bool(options.get("include_usage")), orphan)

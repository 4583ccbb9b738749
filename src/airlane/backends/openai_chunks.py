"""OpenAI chat completion streams to Airlane events, sans-I/O.

`ChunkTranslator` turns the body of one ``/chat/completions`` stream (SSE messages holding
``chat.completion.chunk`` objects, then ``data: [DONE]``) into events; `EventSplitter` finds the
SSE messages in the bytes. No sockets, no clock: `airlane.backends.openai` does the I/O.

Every failure becomes one final ``error`` event (codes in `airlane.backends.openai`); nothing
here raises on bad input.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from airlane.core.events import Channel, Event, Kind
from airlane.wire.errors import SSEError
from airlane.wire.sse import DEFAULT_MAX_LINE_BYTES, SSEDecoder, SSEMessage

__all__ = ["ChunkTranslator", "EventSplitter", "error_message", "quote"]

PROTOCOL_ERROR = "upstream_protocol_error"
_QUOTE_LIMIT = 200
_DATA = b"data: "
_BLANK_LINE = b"\n\n"
_BOM_FIRST_BYTE = 0xEF
_CONTENT_KEY = b'"content":'
_QUOTE, _BACKSLASH = 0x22, 0x5C
# Text chunks from which a stream's template (`_TextTemplate`) may be learnt, first or again
# after a change of shape: a stream whose chunks differ beyond their text (a per-chunk nonce,
# say) stops trying after these.
_TEMPLATE_TRIES = 4


class EventSplitter:
    """Finds SSE messages in an event stream, with a shortcut for the shape OpenAI servers use.

    OpenAI-compatible servers write each event as one ``data: <json>`` line and a blank line,
    with LF line ends. For such an event, `feed` returns the payload bytes sliced straight out
    of the input: no line splitting and no text decoding (orjson parses the bytes). Any other
    block (``event:`` or ``id:`` fields, comments, several data lines) goes to
    `airlane.wire.sse.SSEDecoder`, which applies WHATWG HTML section 9.2 exactly and comes out
    as an `SSEMessage`; so does the rest of a stream that uses CR line ends, starts with a
    byte-order mark, or holds a line over the decoder's limit. Whole blocks are handed to the
    decoder, so it is never left holding half of one when the shortcut resumes.

    Bounded: at most ``max_line_bytes`` (plus one read) of an unfinished event is held before
    the decoder takes over, which then enforces its own limits.
    """

    def __init__(
        self, decoder: SSEDecoder | None = None, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    ) -> None:
        self._decoder = decoder if decoder is not None else SSEDecoder()
        self._max_line_bytes = max_line_bytes
        self._pending = bytearray()  # the start of an event whose blank line has not come
        self._exact = False  # every byte goes to the decoder from now on
        self._started = False

    def feed(self, data: bytes) -> list[bytes | SSEMessage]:
        """The messages completed by ``data``: payload bytes for a plain ``data:`` event,
        `SSEMessage` for anything else.

        Raises:
            SSEError: a line or an event over the decoder's limits.
        """
        if self._exact:
            return list(self._decoder.feed(data))
        if not self._started and data:
            self._started = True
            if data[0] == _BOM_FIRST_BYTE:
                return self._hand_over(data)
            # Settle the decoder's start-of-stream check (section 9.2.5 strips a byte-order
            # mark only there) so that a block it gets later is not taken for a stream start.
            self._decoder.feed(b"\n")
        pending = self._pending
        if (
            not pending
            and data.startswith(_DATA)
            and data.find(b"\n", 6) == len(data) - 2  # one line, then the blank line
            and data.endswith(_BLANK_LINE)
            and b"\r" not in data
            and len(data) <= self._max_line_bytes
        ):
            return [data[6:-2]]  # the usual read: exactly one whole event
        if b"\r" in data:
            return self._hand_over(data)
        if pending:
            searched = len(pending) - 1  # the blank line may begin at the old end
            pending += data
            end = pending.rfind(_BLANK_LINE, searched)
            if end >= 0:
                complete = bytes(pending[:end])
                del pending[: end + 2]
        else:
            end = data.rfind(_BLANK_LINE)
            if end >= 0:
                complete = data[:end]
                pending += data[end + 2 :]
            else:
                pending += data
        if end < 0:
            return self._hand_over(b"") if len(pending) > self._max_line_bytes else []
        if len(complete) > self._max_line_bytes:
            # A block that may hold an overlong line: let the decoder judge it exactly.
            rest = bytes(pending)
            pending.clear()
            return self._hand_over(complete + _BLANK_LINE + rest)
        return self._split(complete)

    def close(self) -> list[SSEMessage]:
        """End of the stream: an unfinished event is dropped (section 9.2.6)."""
        self._pending.clear()
        return self._decoder.close()

    def _split(self, complete: bytes) -> list[bytes | SSEMessage]:
        messages: list[bytes | SSEMessage] = []
        for block in complete.split(_BLANK_LINE):
            if block.startswith(_DATA) and b"\n" not in block:
                messages.append(block[6:])
            elif block:
                messages.extend(self._decoder.feed(block + _BLANK_LINE))
        return messages

    def _hand_over(self, data: bytes) -> list[bytes | SSEMessage]:
        self._exact = True
        buffered = bytes(self._pending) + data
        self._pending = bytearray()
        return list(self._decoder.feed(buffered))


class _MalformedChunk(Exception):
    """A chunk that is valid JSON but not a ``chat.completion.chunk``."""


class ChunkTranslator:
    """Turns the bytes of one chat completion stream into events; no I/O.

    Feed the response body to `receive_data` as it arrives, then call `end_of_stream` when it
    ends. Once a terminal event has been returned (``done`` on ``[DONE]``, or ``error``),
    `finished` is true and further input is ignored. A body that ends before ``[DONE]`` gets
    an ``error`` from `end_of_stream`.
    """

    def __init__(self, decoder: SSEDecoder | None = None) -> None:
        self.finished = False
        """True once a terminal event has been returned."""
        self._splitter = EventSplitter(decoder)
        self._finish_reason: str | None = None
        self._template: _TextTemplate | None = None
        self._template_tries = _TEMPLATE_TRIES

    def receive_data(self, data: bytes) -> list[Event]:
        """The events completed by ``data``, up to and including a terminal one."""
        if self.finished:
            return []
        try:
            messages = self._splitter.feed(data)
        except SSEError as exc:
            return self._fail(f"upstream sent a malformed event stream: {exc}", PROTOCOL_ERROR)
        if len(messages) == 1:  # the usual read: one chunk
            return self._receive_one(messages[0])
        return self.receive_messages(messages)

    def receive_messages(self, messages: Iterable[bytes | SSEMessage]) -> list[Event]:
        """The events carried by already split ``messages`` (see `EventSplitter.feed`)."""
        events: list[Event] = []
        for message in messages:
            if self.finished:
                break
            events.extend(self._receive_one(message))
        return events

    def end_of_stream(self) -> list[Event]:
        """The terminal event owed when the body ends; none if already finished."""
        if self.finished:
            return []
        events = self.receive_messages(self._splitter.close())
        if self.finished:
            return events
        return events + self._fail("upstream stream ended without [DONE]", PROTOCOL_ERROR)

    def _receive_one(self, message: bytes | SSEMessage) -> list[Event]:
        template = self._template
        if template is not None and type(message) is bytes:
            text = template.text(message)
            if text is not None:  # the stream's usual text chunk: only its text differs
                return [Event.delta(text)] if text else []
        if isinstance(message, bytes):
            data: bytes | str = message
            is_error = False
            done = message.strip() == b"[DONE]"
        else:
            data = message.data
            is_error = message.event == "error"
            done = data.strip() == "[DONE]"
        if done:
            self.finished = True
            return [Event.done(self._finish_reason or "stop")]
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return self._undecodable(data, is_error)
        # vLLM and others report a failure mid-stream as a chunk holding an error object.
        if is_error or (type(chunk) is dict and chunk.get("error")):
            return self._fail(f"upstream error: {error_message(chunk)}", "upstream_error")
        try:
            events = self._chunk_events(chunk)
        except _MalformedChunk as exc:
            text = _text(data)
            return self._fail(
                f"upstream sent a malformed chunk ({exc}): {quote(text)}", PROTOCOL_ERROR
            )
        if self._template_tries and type(data) is bytes and _is_text(events):
            self._template_tries -= 1
            self._template = _TextTemplate.learn(data, chunk) or self._template
        return events

    def _undecodable(self, data: bytes | str, is_error: bool) -> list[Event]:
        if isinstance(data, bytes):
            # The decoder would have replaced invalid UTF-8 before parsing; so do we, then.
            return self._receive_one(SSEMessage(data.decode("utf-8", "replace")))
        if is_error:
            return self._fail(f"upstream error: {quote(data)}", "upstream_error")
        return self._fail(f"upstream sent a malformed JSON chunk: {quote(data)}", PROTOCOL_ERROR)

    def _chunk_events(self, chunk: Any) -> list[Event]:
        # One of these runs per upstream chunk: exact type tests (orjson makes plain dicts and
        # lists) and no helper calls on the path of an ordinary text delta.
        if type(chunk) is not dict:
            raise _MalformedChunk("not a JSON object")
        choices = chunk.get("choices")
        events: list[Event]
        if choices is None:
            events = []
        elif type(choices) is not list:
            raise _MalformedChunk("choices is not a list")
        elif choices:
            events = self._choice_events(choices[0])
        else:
            events = []
        usage = chunk.get("usage")
        if usage is not None:
            if type(usage) is not dict:
                raise _MalformedChunk("usage is not an object")
            events.append(
                Event.usage(
                    prompt_tokens=_count(usage, "prompt_tokens"),
                    completion_tokens=_count(usage, "completion_tokens"),
                )
            )
        return events

    def _choice_events(self, choice: Any) -> list[Event]:
        if type(choice) is not dict:
            raise _MalformedChunk("choices[0] is not an object")
        finish_reason = choice.get("finish_reason")
        if type(finish_reason) is str:
            self._finish_reason = finish_reason
        delta = choice.get("delta")
        if delta is None:
            return []
        if type(delta) is not dict:
            raise _MalformedChunk("delta is not an object")
        events: list[Event] = []
        # vLLM and DeepSeek call it reasoning_content; others (OpenRouter, Ollama) reasoning.
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning and type(reasoning) is str:
            events.append(Event.delta(reasoning, channel=Channel.REASONING))
        content = delta.get("content")
        if content and type(content) is str:
            events.append(Event.delta(content))
        tool_calls = delta.get("tool_calls")
        if tool_calls is not None:
            if type(tool_calls) is not list:
                raise _MalformedChunk("tool_calls is not a list")
            for position, item in enumerate(tool_calls):
                event = _tool_call_event(_object(item, "tool_calls[]"), position)
                if event is not None:
                    events.append(event)
        return events

    def _fail(self, message: str, code: str) -> list[Event]:
        self.finished = True
        return [Event.error(message, code=code)]


class _TextTemplate:
    """A stream's text chunk with the text cut out: the bytes before and after it.

    OpenAI-compatible servers (vLLM, TGI, llama.cpp, the benchmark's upstream) send every text
    chunk of a stream alike but for the text: the same id, model, creation time and field
    order. A chunk that is the template's head, one JSON string, and its tail means exactly
    what the template chunk meant with that string as the text: the head leaves a JSON parser
    expecting a value, and one string token later the tail goes on as it did. So its events are
    one text delta, found by parsing the string alone rather than the whole chunk. A chunk that
    does not match goes the long way, as every chunk did before the template was learnt.
    """

    __slots__ = ("_head", "_tail", "_tail_len")

    def __init__(self, head: bytes, tail: bytes) -> None:
        self._head = head
        self._tail = tail
        self._tail_len = len(tail)

    def text(self, message: bytes) -> str | None:
        """The text of ``message`` if it is the template with other text; else None."""
        head = self._head
        if not (message.startswith(head) and message.endswith(self._tail)):
            return None
        try:
            text = orjson.loads(message[len(head) : len(message) - self._tail_len])
        except orjson.JSONDecodeError:  # not one string: a chunk of another shape
            return None
        return text if type(text) is str else None

    @classmethod
    def learn(cls, data: bytes, chunk: Any) -> _TextTemplate | None:
        """The template of ``data`` (parsed: ``chunk``), a chunk whose only event is a text
        delta (`_is_text`), if its text can be cut out and it sets no finish reason."""
        # `_chunk_events` made the delta from the first choice, so it is there.
        if chunk["choices"][0].get("finish_reason") is not None:  # a side effect to keep
            return None
        if data.count(_CONTENT_KEY) != 1:
            return None
        start = data.find(_CONTENT_KEY) + len(_CONTENT_KEY)
        while start < len(data) and data[start] in b" \t":
            start += 1
        end = _string_end(data, start)
        if end < 0:
            return None
        head, tail = data[:start], data[end:]
        # Proof, not trust: the template with an empty text must parse as this chunk with an
        # empty text, and nothing else may differ (a "content" key elsewhere, say).
        try:
            probe = orjson.loads(head + b'""' + tail)
        except orjson.JSONDecodeError:
            return None
        expected = orjson.loads(data)
        expected["choices"][0]["delta"]["content"] = ""
        return cls(head, tail) if probe == expected else None


def _is_text(events: list[Event]) -> bool:
    """True for the events of a plain text chunk: one delta of the content channel."""
    return (
        len(events) == 1 and events[0].kind is Kind.DELTA and events[0].channel is Channel.CONTENT
    )


def _string_end(data: bytes, start: int) -> int:
    """The index just past the JSON string that starts at ``data[start]``; -1 if none does."""
    if start >= len(data) or data[start] != _QUOTE:
        return -1
    at = start + 1
    while (quote_at := data.find(b'"', at)) >= 0:
        escapes = 0
        while data[quote_at - 1 - escapes] == _BACKSLASH:
            escapes += 1
        if escapes % 2 == 0:  # not escaped: the string ends here
            return quote_at + 1
        at = quote_at + 1
    return -1


def _present(value: Any, default: Any) -> Any:
    """``value``, or ``default`` where the field is absent or JSON null."""
    return default if value is None else value


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _MalformedChunk(f"{what} is not an object")
    return value


def _count(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key, 0)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _MalformedChunk(f"usage.{key} is not a count")
    return value


def _tool_call_event(item: dict[str, Any], position: int) -> Event | None:
    """The event for one ``tool_calls`` item; None for an item that carries nothing."""
    index = item.get("index", position)  # some servers leave out the index of a lone call
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise _MalformedChunk("tool call index is not a count")
    function = _object(_present(item.get("function"), {}), "tool call function")
    call_id, name, arguments = item.get("id"), function.get("name"), function.get("arguments")
    call_id = call_id if isinstance(call_id, str) else None
    name = name if isinstance(name, str) else None
    arguments = arguments if isinstance(arguments, str) else ""
    if call_id is None and name is None and not arguments:
        return None
    return Event.tool_call(index, arguments, call_id=call_id, name=name)


def error_message(payload: Any) -> str:
    """The human message in an OpenAI-style error payload, or a quote of the payload."""
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        for candidate in (error, payload.get("message"), payload.get("detail")):
            if isinstance(candidate, str) and candidate:
                return candidate
    return quote(orjson.dumps(payload).decode())


def quote(text: str) -> str:
    """``text`` cut to a readable length, as a Python literal (for error messages)."""
    return repr(text if len(text) <= _QUOTE_LIMIT else text[:_QUOTE_LIMIT] + "...")


def _text(data: bytes | str) -> str:
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data

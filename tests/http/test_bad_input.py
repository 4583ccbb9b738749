"""Whatever a client sends, the gateway answers with a status and an OpenAI-style JSON error
(or, on a WebSocket, an ``error`` message or a close code with a reason), never a traceback,
and keeps serving.

Each HTTP case is one request; after it the gateway must still answer ``/healthz``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import msgspec
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.http.conftest import API_KEY
from tests.http.support import MODEL, assert_healthy, assert_json_error
from tests.servers import FAST_SYNTHETIC, run_server

CHAT = "/v1/chat/completions"
OK_MESSAGES = [{"role": "user", "content": "hi"}]
MIB = 1 << 20


def chat(**fields) -> bytes:
    body = {"model": MODEL, "messages": OK_MESSAGES, **fields}
    return json.dumps({k: v for k, v in body.items() if v is not ...}).encode()


@pytest.fixture(scope="module")
def http(server) -> Iterator[httpx.Client]:
    # Bodies say they are JSON, as clients do: what is inside them is what is tested here.
    headers = {"content-type": "application/json"}
    with httpx.Client(base_url=server.url, timeout=10, headers=headers) as client:
        yield client


@pytest.fixture(scope="module")
def named(http) -> dict:
    """A named stream with two events, still open."""
    response = http.post("/v1/streams", json={"name": "bad-input/open"})
    assert response.status_code == 201
    published = http.post("/v1/streams/bad-input/open/events", json={"events": [{}, {}]})
    assert published.json()["seq"] == [1, 2]
    return response.json()


def check(server, response: httpx.Response, status: int, code: str | None = None) -> dict:
    error = assert_json_error(response, status, code)
    assert_healthy(server.url)
    return error


# -- malformed JSON, wrong types, missing fields -----------------------------------------------

CHAT_CASES = {
    "malformed json": b'{"model": "m", "messages": [',
    "not utf-8": b'{"model": "\xff\xfe"}',
    "empty body": b"",
    "json array": b"[1, 2]",
    "json string": b'"hello"',
    "json null": b"null",
    "infinite number": b'{"model": "m", "messages": [], "seed": 1e999}',
    "missing model": chat(model=...),
    "missing messages": chat(messages=...),
    "model not a string": chat(model=5),
    "model empty": chat(model=""),
    "messages empty": chat(messages=[]),
    "messages not a list": chat(messages={"role": "user"}),
    "message not an object": chat(messages=[1]),
    "stream not a boolean": chat(stream="yes"),
    "stream_options not an object": chat(stream_options="x"),
    "seed not an integer": chat(seed="1"),
    "seed a float": chat(seed=1.5),
    "seed a boolean": chat(seed=True),
    "max_tokens zero": chat(max_tokens=0),
    "max_tokens negative": chat(max_tokens=-3),
    "max_tokens a string": chat(max_tokens="5"),
    "max_tokens a boolean": chat(max_tokens=True),
    "max_completion_tokens huge": chat(max_completion_tokens=1 << 40),
    "temperature a string": chat(temperature="hot"),
    "temperature a boolean": chat(temperature=True),
    "tools not a list": chat(tools={"type": "function"}),
    "tool not an object": chat(tools=[1]),
    "tool_choice function not an object": chat(
        tools=[{"type": "function", "function": {"name": "f"}}],
        tool_choice={"type": "function", "function": 5},
    ),
    "n above one": chat(n=2),
    "airlane not an object": chat(airlane="on"),
    "unknown orphan mode": chat(airlane={"orphan": "forever"}),
}


@pytest.mark.parametrize("body", CHAT_CASES.values(), ids=CHAT_CASES.keys())
@pytest.mark.parametrize("path", [CHAT, "/v1/streams"])
def test_bad_chat_requests_are_400(server, http, path, body):
    response = http.post(path, content=body, headers={"content-type": "application/json"})
    check(server, response, 400)


def test_bad_chat_request_names_the_parameter(server, http):
    error = check(server, http.post(CHAT, content=chat(max_tokens="5")), 400)
    assert error["param"] == "max_tokens"
    assert error["code"] == "invalid_parameter"
    error = check(server, http.post(CHAT, content=b"{"), 400, "invalid_json")
    assert "JSON" in error["message"]


CREATE_CASES = {
    "name not a string": {"name": 5},
    "name empty": {"name": ""},
    "name with a space": {"name": "agents 42"},
    "name with a question mark": {"name": "a?b"},
    "name too long": {"name": "a" * 201},
    "name not ascii": {"name": "über"},
}


@pytest.mark.parametrize("body", CREATE_CASES.values(), ids=CREATE_CASES.keys())
def test_invalid_stream_names_are_400(server, http, body):
    check(server, http.post("/v1/streams", json=body), 400)


PUBLISH_CASES = {
    "malformed json": b"{",
    "empty body": b"",
    "null": b"null",
    "a number": b"5",
    "events empty": b'{"events": []}',
    "events not a list": b'{"events": "x"}',
    "event not an object": b'{"events": [1]}',
    "unknown kind": b'{"kind": "shout"}',
    "snapshot kind": b'{"kind": "snapshot", "text": {}}',
    "usage kind": b'{"kind": "usage"}',
    "delta without text": b'{"kind": "delta"}',
    "delta text not a string": b'{"kind": "delta", "text": 5}',
    "unknown channel": b'{"kind": "delta", "text": "x", "channel": "audio"}',
    "tool_call index a string": b'{"kind": "tool_call", "index": "0", "arguments": ""}',
    "unknown lane": b'{"payload": 1, "lane": "fast"}',
    "too many events": json.dumps({"events": [{}] * 1001}).encode(),
}


@pytest.mark.parametrize("body", PUBLISH_CASES.values(), ids=PUBLISH_CASES.keys())
def test_bad_events_are_400(server, http, named, body):
    response = http.post("/v1/streams/bad-input/open/events", content=body)
    check(server, response, 400)
    status = http.get("/v1/streams/bad-input/open").json()
    assert status["last_seq"] == 2, "a refused batch publishes nothing"


def test_publishing_to_an_invalid_stream_id_is_400(server, http):
    check(server, http.post("/v1/streams/bad id/events", json={}), 400, "invalid_stream_id")
    check(server, http.post(f"/v1/streams/{'x' * 201}/events", json={}), 400, "invalid_stream_id")


@pytest.mark.parametrize("path", ["", "/snapshot", "/events", "/cancel"])
@pytest.mark.parametrize("stream_id", ["bad id", "x" * 201], ids=["space", "too long"])
def test_invalid_stream_ids_are_400_everywhere(server, http, stream_id, path):
    method = "POST" if path == "/cancel" else "GET"
    response = http.request(method, f"/v1/streams/{stream_id}{path}")
    check(server, response, 400, "invalid_stream_id")
    if not path:
        check(server, http.delete(f"/v1/streams/{stream_id}"), 400, "invalid_stream_id")


# -- unknown streams and routes -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/streams/no-such-stream"),
        ("GET", "/v1/streams/no-such-stream/snapshot"),
        ("GET", "/v1/streams/no-such-stream/events"),
        ("POST", "/v1/streams/no-such-stream/cancel"),
        ("DELETE", "/v1/streams/no-such-stream"),
        ("GET", "/v1/streams/agents/no/such/thing/events"),
    ],
)
def test_unknown_streams_are_404(server, http, method, path):
    check(server, http.request(method, path), 404, "stream_not_found")


@pytest.mark.parametrize(
    "path", ["/", "/nope", "/v1", "/v1/", "/v1/chat", "/v1/chat/completions/x", "/v2/models"]
)
def test_unknown_routes_are_404(server, http, path):
    check(server, http.get(path), 404, "not_found")
    check(server, http.post(path, json={}), 404, "not_found")


# -- wrong methods ---------------------------------------------------------------------------

WRONG_METHODS = [
    ("GET", CHAT, "POST"),
    ("PUT", CHAT, "POST"),
    ("DELETE", CHAT, "POST"),
    ("POST", "/v1/models", "GET"),
    ("PUT", "/v1/streams", "GET, POST"),
    ("DELETE", "/v1/streams", "GET, POST"),
    ("PUT", "/v1/streams/bad-input/open", "GET, DELETE"),
    ("POST", "/v1/streams/bad-input/open", "GET, DELETE"),
    ("DELETE", "/v1/streams/bad-input/open/events", "GET, POST"),
    ("POST", "/v1/streams/bad-input/open/snapshot", "GET"),
    ("GET", "/v1/streams/bad-input/open/cancel", "POST"),
    ("POST", "/healthz", "GET"),
    ("DELETE", "/metrics", "GET"),
]


@pytest.mark.parametrize(("method", "path", "allow"), WRONG_METHODS)
def test_wrong_methods_are_405_with_allow(server, http, named, method, path, allow):
    """RFC 9110 section 15.5.6: a 405 response MUST carry ``Allow``."""
    response = http.request(method, path)
    check(server, response, 405)
    allowed = {m.strip() for m in response.headers.get("allow", "").split(",") if m.strip()}
    assert allowed == {m.strip() for m in allow.split(",")}, response.headers


# -- resume tokens and query parameters ----------------------------------------------------------


@pytest.mark.parametrize(
    "token",
    ["garbage", ":", "abc:", ":5", "abc:-1", "abc:1.5", "ab c:1", "abc:99999999999999999999"],
)
def test_bad_last_event_id_is_400(server, http, named, token):
    response = http.get("/v1/streams/bad-input/open/events", headers={"last-event-id": token})
    check(server, response, 400, "bad_resume_token")


def test_bad_from_query_is_400(server, http, named):
    response = http.get("/v1/streams/bad-input/open/events?from=nope")
    check(server, response, 400, "bad_resume_token")


def test_resume_beyond_the_end_is_416(server, http, named):
    beyond = f"{named['epoch']}:3"  # the stream holds seqs 1 and 2
    response = http.get("/v1/streams/bad-input/open/events", headers={"last-event-id": beyond})
    check(server, response, 416, "invalid_resume")
    response = http.get(f"/v1/streams/bad-input/open/events?from={named['epoch']}:99")
    check(server, response, 416, "invalid_resume")


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", "99999999999999999999"])
def test_bad_max_events_is_400(server, http, named, value):
    response = http.get(f"/v1/streams/bad-input/open/events?max_events={value}")
    check(server, response, 400)


# -- oversize bodies ---------------------------------------------------------------------------

OVERSIZE_PATHS = [CHAT, "/v1/streams", "/v1/streams/bad-input/big/events"]


@pytest.mark.parametrize("path", OVERSIZE_PATHS)
def test_oversize_body_is_413(server, http, path):
    body = chat(messages=[{"role": "user", "content": "a" * MIB}])
    assert len(body) > MIB
    check(server, http.post(path, content=body), 413, "body_too_large")


@pytest.mark.parametrize("path", OVERSIZE_PATHS)
def test_oversize_chunked_body_is_413(server, http, path):
    def chunks() -> Iterator[bytes]:
        yield b'{"model": "m", "messages": [{"role": "user", "content": "'
        for _ in range(17):
            yield b"a" * (64 * 1024)
        yield b'"}]}'

    check(server, http.post(path, content=chunks()), 413, "body_too_large")


def test_body_of_exactly_the_limit_is_accepted(server, http):
    head, tail = b'{"payload": "', b'"}'
    body = head + b"a" * (MIB - len(head) - len(tail)) + tail
    assert len(body) == MIB
    response = http.post("/v1/streams/bad-input/limit/events", content=body)
    assert response.status_code == 200, response.text[:300]


# -- API keys ----------------------------------------------------------------------------------


def test_requests_without_a_valid_key_are_401(keyed_server):
    url = keyed_server.url
    body = {"model": MODEL, "messages": OK_MESSAGES}
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "Basic c2VjcmV0"}):
        for method, path in (("POST", CHAT), ("GET", "/v1/streams/x"), ("GET", "/v1/models")):
            response = httpx.request(method, f"{url}{path}", json=body, headers=headers)
            check(keyed_server, response, 401, "unauthenticated")
    good = httpx.get(f"{url}/v1/models", headers={"authorization": f"Bearer {API_KEY}"})
    assert good.status_code == 200
    assert httpx.get(f"{url}/healthz").status_code == 200, "health needs no key"


def test_401_names_the_scheme(keyed_server):
    """RFC 9110 section 11.6.1: a 401 response MUST carry ``WWW-Authenticate``."""
    response = httpx.get(f"{keyed_server.url}/v1/models")
    assert response.status_code == 401
    assert response.headers.get("www-authenticate", "").lower().startswith("bearer")


# -- WebSocket ---------------------------------------------------------------------------------


def ws_url(url: str, path: str = "/v1/ws") -> str:
    return url.replace("http://", "ws://", 1) + path


async def closed_with(ws, timeout: float = 5) -> tuple[int, str]:
    """Wait for the server to close ``ws``; return its close code and reason."""
    with pytest.raises(ConnectionClosed) as caught:
        async with asyncio.timeout(timeout):
            while True:
                await ws.recv()
    received = caught.value.rcvd
    assert received is not None, "the server closed without a close frame"
    return received.code, received.reason


async def reply(ws) -> dict:
    async with asyncio.timeout(5):
        return json.loads(await ws.recv())


async def assert_usable(ws) -> None:
    await ws.send(json.dumps({"op": "ping", "ref": "alive"}))
    assert await reply(ws) == {"op": "pong", "ref": "alive"}


async def test_ws_wrong_subprotocol_is_1002(server):
    async with connect(ws_url(server.url), subprotocols=["chat.v9"]) as ws:
        code, reason = await closed_with(ws)
    assert code == 1002
    assert "airlane.v1.json" in reason
    assert_healthy(server.url)


async def test_ws_unknown_path_is_refused_as_not_found(server):
    """Either a handshake refused with 404, or (what app.py means to send) close 1008 with
    a reason; not a bare 403, which reads as a permissions problem."""
    try:
        async with connect(ws_url(server.url, "/v1/nope")) as ws:
            code, reason = await closed_with(ws)
    except InvalidStatus as exc:
        assert exc.response.status_code == 404, exc.response.status_code
    else:
        assert code == 1008 and reason
    assert_healthy(server.url)


@pytest.mark.parametrize(
    "message",
    ["{", "", "not json", "[1, 2]", "5", "null", '"ping"', '{"op": "ping"', "\x00"],
)
async def test_ws_invalid_json_gets_an_error_reply(server, message):
    async with connect(ws_url(server.url), subprotocols=["airlane.v1.json"]) as ws:
        await ws.send(message)
        error = await reply(ws)
        assert error["op"] == "error" and error["code"] == "invalid_message"
        assert error["message"]
        await assert_usable(ws)


@pytest.mark.parametrize(
    "message",
    [
        {"op": "shout", "ref": 7},
        {"ref": 7},
        {"op": None, "ref": 7},
        {"op": 5, "ref": 7},
        {"op": ["ping"], "ref": 7},
        {"op": {"name": "ping"}, "ref": 7},
    ],
    ids=["unknown", "missing", "null", "number", "list", "object"],
)
async def test_ws_unknown_op_gets_an_error_reply(server, message):
    async with connect(ws_url(server.url), subprotocols=["airlane.v1.json"]) as ws:
        await ws.send(json.dumps(message))
        error = await reply(ws)
        assert error["op"] == "error" and error["code"] == "unknown_op", error
        assert error["ref"] == 7
        await assert_usable(ws)
    assert_healthy(server.url)


WS_BAD_OPS = {
    "subscribe without stream": ({"op": "subscribe"}, "invalid_message"),
    "subscribe stream not a string": ({"op": "subscribe", "stream": 5}, "invalid_message"),
    "subscribe unknown stream": ({"op": "subscribe", "stream": "nope"}, "stream_not_found"),
    "subscribe bad token": (
        {"op": "subscribe", "stream": "bad-input/open", "from": "garbage"},
        "bad_resume_token",
    ),
    "subscribe beyond the end": (
        {"op": "subscribe", "stream": "bad-input/open", "from": "EPOCH:99"},
        "invalid_resume",
    ),
    "unsubscribe not subscribed": ({"op": "unsubscribe", "stream": "x"}, "not_subscribed"),
    "generate without request": ({"op": "generate"}, "invalid_parameter"),
    "generate bad request": ({"op": "generate", "request": {"model": 5}}, "invalid_parameter"),
    "publish bad event": (
        {"op": "publish", "stream": "bad-input/ws", "event": {"kind": "shout"}},
        "invalid_event",
    ),
    "publish invalid stream id": (
        {"op": "publish", "stream": "bad id", "event": {}},
        "invalid_stream_id",
    ),
    "cancel unknown stream": ({"op": "cancel", "stream": "nope"}, "stream_not_found"),
}


@pytest.mark.parametrize(("message", "code"), WS_BAD_OPS.values(), ids=WS_BAD_OPS.keys())
async def test_ws_bad_op_arguments_get_error_replies(server, named, message, code):
    if "from" in message:
        message = {**message, "from": message["from"].replace("EPOCH", named["epoch"])}
    async with connect(ws_url(server.url), subprotocols=["airlane.v1.json"]) as ws:
        await ws.send(json.dumps({**message, "ref": "bad"}))
        error = await reply(ws)
        assert (error["op"], error["code"], error["ref"]) == ("error", code, "bad"), error
        assert error["message"]
        await assert_usable(ws)


async def test_ws_double_subscribe_is_refused(server, named):
    async with connect(ws_url(server.url), subprotocols=["airlane.v1.json"]) as ws:
        await ws.send(json.dumps({"op": "subscribe", "stream": "bad-input/open", "ref": 1}))
        messages = [await reply(ws) for _ in range(3)]  # subscribed + 2 events, any order
        assert sorted(m["op"] for m in messages) == ["event", "event", "subscribed"]
        await ws.send(json.dumps({"op": "subscribe", "stream": "bad-input/open", "ref": 2}))
        error = await reply(ws)
        assert error["code"] == "already_subscribed" and error["ref"] == 2
        await assert_usable(ws)


async def test_ws_subscriptions_past_the_bound_are_refused_and_the_socket_stays_usable():
    config = FAST_SYNTHETIC + "\n[http]\nmax_ws_subscriptions = 2\n"
    with run_server(config=config) as limited:
        async with httpx.AsyncClient(base_url=limited.url) as http:
            for name in ("limit/a", "limit/b", "limit/c"):
                assert (await http.post("/v1/streams", json={"name": name})).status_code == 201
        async with connect(ws_url(limited.url), subprotocols=["airlane.v1.json"]) as ws:
            for ref, stream in enumerate(("limit/a", "limit/b", "limit/c")):
                await ws.send(json.dumps({"op": "subscribe", "stream": stream, "ref": ref}))
                answer = await reply(ws)
                while answer["op"] == "event":  # a stream's events may come first
                    answer = await reply(ws)
                if ref < 2:
                    assert answer["op"] == "subscribed", answer
            assert (answer["op"], answer["code"], answer["ref"]) == (
                "error",
                "too_many_subscriptions",
                2,
            ), answer
            assert "at most 2" in answer["message"]
            # A generation this socket could not follow is refused before it starts (it used
            # to run unread, and bill, until its orphan policy ended it), as is one whose
            # credits are wrong.
            chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            for ref, bad in ((3, {}), (4, {"credits": 0})):
                await ws.send(json.dumps({"op": "generate", "request": chat, "ref": ref, **bad}))
                answer = await reply(ws)
                while answer["op"] == "event":
                    answer = await reply(ws)
                assert answer["op"] == "error" and answer["ref"] == ref, answer
            assert answer["code"] == "invalid_request" and "credits" in answer["message"]
            await assert_usable(ws)
        async with httpx.AsyncClient(base_url=limited.url) as http:
            metrics = (await http.get("/metrics")).text
        assert "airlane_streams 3.0" in metrics, [
            line for line in metrics.splitlines() if line.startswith("airlane_streams")
        ]


async def test_ws_binary_message_on_json_subprotocol_is_1003(server):
    async with connect(ws_url(server.url), subprotocols=["airlane.v1.json"]) as ws:
        await assert_usable(ws)
        await ws.send(b'{"op": "ping"}')
        code, reason = await closed_with(ws)
    assert code == 1003 and "text" in reason
    assert_healthy(server.url)


async def test_ws_text_message_on_msgpack_subprotocol_is_1003(server):
    async with connect(ws_url(server.url), subprotocols=["airlane.v1.msgpack"]) as ws:
        await ws.send(b"\xc1")  # never valid msgpack
        error = msgspec.msgpack.decode(await ws.recv())
        assert error["op"] == "error" and error["code"] == "invalid_message"
        await ws.send('{"op": "ping"}')
        code, reason = await closed_with(ws)
    assert code == 1003 and "binary" in reason


async def test_ws_oversize_message_is_1009(server):
    async with connect(ws_url(server.url), subprotocols=["airlane.v1.json"]) as ws:
        await assert_usable(ws)
        await ws.send(json.dumps({"op": "ping", "pad": "a" * MIB}))
        code, reason = await closed_with(ws)
    assert code == 1009 and reason
    assert_healthy(server.url)


@pytest.mark.parametrize(
    ("headers", "query"),
    [
        ({}, ""),
        ({"authorization": "Bearer wrong"}, ""),
        ({}, f"?access_token={API_KEY}"),  # a key in the URL: off unless [http] query_tokens
        ({}, "?ticket=tk_made-up"),
    ],
    ids=["no key", "wrong key", "key in the URL", "made-up ticket"],
)
async def test_ws_without_a_valid_key_is_4401(keyed_server, headers, query):
    url = ws_url(keyed_server.url) + query
    async with connect(url, subprotocols=["airlane.v1.json"], additional_headers=headers) as ws:
        code, reason = await closed_with(ws)
    assert code == 4401 and reason
    assert_healthy(keyed_server.url)


@pytest.mark.parametrize("way", ["header", "ticket"])
async def test_ws_with_the_key_works(keyed_server, way):
    key = {"authorization": f"Bearer {API_KEY}"}
    headers, query = key, ""
    if way == "ticket":  # what a browser does: a ticket from a fetch, then ?ticket=
        async with httpx.AsyncClient() as http:
            issued = await http.post(f"{keyed_server.url}/v1/tickets", headers=key)
        headers, query = {}, f"?ticket={issued.json()['ticket']}"
    url = ws_url(keyed_server.url) + query
    async with connect(url, subprotocols=["airlane.v1.json"], additional_headers=headers) as ws:
        await assert_usable(ws)

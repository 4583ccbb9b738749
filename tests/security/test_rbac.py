"""RBAC from a policy file, on a real gateway, on every wire.

Two API keys: ``writer`` may do anything; ``reader`` may read streams, and publish to its
``inbox/*`` streams only by an HTTP POST. The reader's attempts to generate are refused on its
own wire (HTTP 403, a WebSocket error reply, gRPC PERMISSION_DENIED, an AIRC ERROR), each
with an audit record naming the rule (``default-deny``); what the rules allow goes through.
The file is then changed on disk: the new rule applies without a restart, and a broken
version leaves the previous one in force. Last, the seed's mesh rule over mutual TLS: only
the ``ai-trainer`` workload may POST model updates, and the policy's identities put both
workloads in one tenant.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import struct
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import grpc
import httpx
import pytest
import websockets

from airlane.client import RequestRejected
from airlane.client.airc import AircClient
from airlane.security.certs import IssuedFiles, issue_certificate, make_ca
from tests.grpc_transport.conftest import airlane_stub, generate_request, read_all
from tests.http.support import chat_body
from tests.servers import ServerProcess, run_server

pytestmark = pytest.mark.timeout(120)

T = TypeVar("T")

WRITER, READER = "sk-writer-1", "sk-reader-2"

POLICY = """
[[rules]]
name = "writers write"
principals = ["key:writer"]
actions = ["*"]

[[rules]]
name = "readers read"
principals = ["key:reader"]
actions = ["subscribe"]

[[rules]]
name = "readers post to their inbox"
principals = ["key:reader"]
actions = ["publish"]
resources = ["inbox/*"]
methods = ["POST"]
"""

MAY_GENERATE = """
[[rules]]
name = "readers may generate now"
principals = ["key:reader"]
actions = ["generate"]
"""


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def audit_records(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY)
    return path


@pytest.fixture
def server(policy_file: Path, tmp_path: Path) -> Iterator[ServerProcess]:
    config = f'[policy]\nreload_s = 0.1\n[audit]\npath = "{tmp_path / "audit.log"}"\n'
    keys = ["--api-key", f"writer={WRITER}", "--api-key", f"reader={READER}"]
    with run_server(*keys, "--policy", str(policy_file), config=config,
                    stderr=(tmp_path / "server.log").open("w")) as running:  # fmt: skip
        yield running


async def test_every_wire_refuses_what_no_rule_allows(
    server: ServerProcess, tmp_path: Path
) -> None:
    body = chat_body("hello", 1, max_tokens=4)
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as http:
        refused = await http.post("/v1/chat/completions", json=body, headers=bearer(READER))
        assert refused.status_code == 403, refused.text
        error = refused.json()["error"]
        assert error["code"] == "permission_denied"
        assert error["message"].endswith(": no rule allows generate there"), error
        allowed = await http.post("/v1/chat/completions", json=body, headers=bearer(WRITER))
        assert allowed.status_code == 200, allowed.text
        # The reader's inbox: an HTTP POST is allowed; the same publish over WebSocket is not
        # a POST, so the rule does not apply there.
        event = {"kind": "message", "payload": {"n": 1}}
        posted = await http.post("/v1/streams/inbox/1/events", json=event, headers=bearer(READER))
        assert posted.status_code == 200, posted.text
        elsewhere = await http.post("/v1/streams/notes/events", json=event, headers=bearer(READER))
        assert elsewhere.status_code == 403
        read = await http.get("/v1/streams/inbox/1/snapshot", headers=bearer(READER))
        assert read.status_code == 200, read.text

    url = server.url.replace("http://", "ws://") + "/v1/ws"
    async with websockets.connect(url, additional_headers=bearer(READER)) as ws:
        await ws.send(json.dumps({"op": "generate", "request": body, "ref": 1}))
        reply = json.loads(await ws.recv())
        assert (reply["op"], reply["code"], reply["ref"]) == ("error", "permission_denied", 1)
        await ws.send(json.dumps({"op": "publish", "stream": "inbox/1", "event": event, "ref": 2}))
        reply = json.loads(await ws.recv())
        assert (reply["op"], reply["code"]) == ("error", "permission_denied"), reply
        await ws.send(json.dumps({"op": "subscribe", "stream": "inbox/1", "ref": 3}))
        reply = json.loads(await ws.recv())
        assert reply["op"] == "subscribed", reply

    assert server.grpc is not None
    async with grpc.aio.insecure_channel(server.grpc) as channel:
        stub = airlane_stub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await read_all(stub.Generate(generate_request(body), metadata=bearer(READER).items()))
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
        trailers = dict(caught.value.trailing_metadata() or ())
        assert trailers.get("airlane-error-code") == "permission_denied"
        events = await read_all(
            stub.Generate(generate_request(body), metadata=bearer(WRITER).items())
        )
        assert events

    # gRPC-Web (the browser's gRPC), as grpc-web's JavaScript client frames a call.
    message = generate_request(body).SerializeToString()
    grpc_web = {"content-type": "application/grpc-web+proto", "x-grpc-web": "1", **bearer(READER)}
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as http:
        framed = struct.pack(">BI", 0, len(message)) + message
        refused = await http.post("/airlane.v1.Airlane/Generate", content=framed, headers=grpc_web)
    trailer = refused.content[5:]  # one frame: the trailers (flag 0x80), no message before it
    assert refused.content[0] == 0x80 and b"grpc-status: 7" in trailer, refused.content
    assert b"airlane-error-code: permission_denied" in trailer

    assert server.airc is not None
    async with await AircClient.tcp(*server.airc, READER) as reader:
        with pytest.raises(RequestRejected) as rejected:
            await reader.generate(body)
        assert rejected.value.code == "permission_denied"

    denials = [
        record for record in audit_records(tmp_path / "audit.log")
        if record["decision"] == "deny" and record.get("action") == "generate"
    ]  # fmt: skip
    assert len(denials) == 5  # HTTP, WebSocket, gRPC, gRPC-Web, AIRC
    assert {(r["principal"], r["rule"], r["code"], r["from"]) for r in denials} == {
        ("reader", "default-deny", "permission_denied", "127.0.0.1")
    }


async def test_a_changed_policy_applies_without_a_restart(
    server: ServerProcess, policy_file: Path, tmp_path: Path
) -> None:
    body = chat_body("hello", 1, max_tokens=4)
    async with httpx.AsyncClient(base_url=server.url, headers=bearer(READER), timeout=20) as http:

        async def status() -> int:
            return (await http.post("/v1/chat/completions", json=body)).status_code

        assert await status() == 403
        policy_file.write_text(POLICY + MAY_GENERATE)
        assert await until(status, 200) == 200
        # A broken version is reported and the one in force stays.
        policy_file.write_text(POLICY + MAY_GENERATE + "\n[[rules]]\nname = 'half'\n")
        log = tmp_path / "server.log"

        async def reported() -> bool:
            return "policy not reloaded" in log.read_text()

        assert await until(reported, True)
        assert "principals is required" in log.read_text()
        assert await status() == 200
        # Taking the rule out takes the right away.
        policy_file.write_text(POLICY)
        assert await until(status, 403) == 403


async def until(probe: Callable[[], Awaitable[T]], wanted: T, timeout: float = 10.0) -> T:
    """Poll ``probe()`` (another process's state) every 50 ms until it returns ``wanted``."""
    deadline = time.monotonic() + timeout
    while (found := await probe()) != wanted and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return found


# -- the seed's mesh rule, over mutual TLS ----------------------------------------------------

MESH = """
[[identities]]
spiffe = "spiffe://example.org/ns/ml/sa/*"
tenant = "ml"

[[rules]]
name = "ml reads"
principals = ["tenant:ml"]
actions = ["logs.read"]

[[rules]]
name = "only the trainer posts model updates"
principals = ["spiffe://example.org/ns/ml/sa/ai-trainer"]
actions = ["logs.append"]
resources = ["logs/model-updates"]
methods = ["POST", "PUT"]
"""


def test_only_the_trainer_may_post_model_updates(tmp_path: Path) -> None:
    ca = tmp_path / "ca"
    make_ca(ca, "example.org")
    gateway = issue_certificate(ca, "spiffe://example.org/gateway", tmp_path / "s")
    trainer = issue_certificate(ca, "spiffe://example.org/ns/ml/sa/ai-trainer", tmp_path / "c")
    notebook = issue_certificate(ca, "spiffe://example.org/ns/ml/sa/notebook", tmp_path / "c")
    policy = tmp_path / "mesh.toml"
    policy.write_text(MESH)
    audit = tmp_path / "audit.log"
    args = ["--tls-cert", str(gateway.cert), "--tls-key", str(gateway.key),
            "--tls-client-ca", str(ca / "ca.pem"), "--trust-domain", "example.org",
            "--policy", str(policy), "--audit-log", str(audit)]  # fmt: skip

    def client(files: IssuedFiles) -> httpx.Client:
        context = ssl.create_default_context(cafile=ca / "ca.pem")
        context.load_cert_chain(files.cert, files.key)
        return httpx.Client(base_url=running.url, timeout=20, verify=context)

    with run_server(*args) as running:
        event = {"events": [{"type": "model.v1", "data": {"version": 7}}]}
        with client(trainer) as http:
            assert http.put("/v1/logs/model-updates").status_code == 201
            posted = http.post("/v1/logs/model-updates/events", json=event)
            assert posted.status_code == 201, posted.text
        with client(notebook) as http:
            refused = http.post("/v1/logs/model-updates/events", json=event)
            assert refused.status_code == 403, refused.text
            assert refused.json()["error"]["code"] == "permission_denied"
            # Same tenant (the policy's identities): it reads what the trainer wrote.
            read = http.get("/v1/logs/model-updates/events")
            assert read.status_code == 200, read.text
            assert [r["data"] for r in read.json()["records"]] == [{"version": 7}]
    (denied,) = [r for r in audit_records(audit) if r["decision"] == "deny"]
    assert denied["principal"] == "spiffe://example.org/ns/ml/sa/notebook"
    assert (denied["tenant"], denied["action"], denied["rule"]) == ("ml", "logs.append",
                                                                   "default-deny")  # fmt: skip


def test_policy_explain_names_the_deciding_rule(tmp_path: Path) -> None:
    policy = tmp_path / "mesh.toml"
    policy.write_text(MESH)

    def explain(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "airlane", "policy", "explain", str(policy), *args],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    trainer = explain("--principal", "spiffe://example.org/ns/ml/sa/ai-trainer",
                      "--action", "logs.append", "--resource", "logs/model-updates",
                      "--method", "POST", "--path", "/v1/logs/model-updates/events")  # fmt: skip
    assert trainer.returncode == 0, trainer.stderr
    assert trainer.stdout.startswith("ALLOWED: allowed by rule 'only the trainer posts")
    assert "(tenant ml)" in trainer.stdout
    over_airc = explain("--principal", "spiffe://example.org/ns/ml/sa/ai-trainer",
                        "--action", "logs.append", "--resource", "logs/model-updates",
                        "--wire", "airc")  # fmt: skip
    assert over_airc.returncode == 1
    assert "the request has no HTTP method (wire airc)" in over_airc.stdout
    key = explain("--principal", "key:bob@ml", "--action", "logs.append",
                  "--resource", "logs/model-updates", "--method", "POST")  # fmt: skip
    assert key.returncode == 1 and key.stdout.startswith("DENIED: no rule allows logs.append")
    assert "principal key:bob (tenant ml) is not one of" in key.stdout
    wrong = explain("--principal", "bob", "--action", "logs.append", "--resource", "x")
    assert wrong.returncode == 2 and "key:NAME, jwt:SUBJECT" in wrong.stderr
    policy.write_text("[[rules]]\nname = 'x'\n")
    broken = subprocess.run(
        [sys.executable, "-m", "airlane", "policy", "check", str(policy)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert broken.returncode == 2 and "principals is required" in broken.stderr
